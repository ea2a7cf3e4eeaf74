package scheme

import (
	"slices"
	"strings"

	"github.com/quantscope/quantscope/formats/packing"
	"github.com/quantscope/quantscope/formats/safetensors"
)

// TensorInfo is what a header says of one tensor.
type TensorInfo struct {
	Name   string            `json:"name"`
	DType  safetensors.DType `json:"dtype"`
	Shape  []uint64          `json:"shape"`
	NBytes uint64            `json:"nbytes"`
	// Module and Role are filled in by Group.
	Module string `json:"module,omitempty"`
	Role   string `json:"role,omitempty"`
}

func (t *TensorInfo) elements() uint64 {
	n := uint64(1)
	for _, d := range t.Shape {
		n *= d
	}
	return n
}

// Stored formats of a module's weight. Integer formats are "int<bits>";
// unquantized ones are the lower-cased dtype ("bf16", "f16", "f32").
const (
	FormatNVFP4 = "nvfp4"
	FormatMXFP4 = "mxfp4"
	FormatMXFP8 = "mxfp8"
	FormatFP8   = "fp8"
	FormatNone  = "none" // a module with no weight (kv-cache scales alone)
)

// Layouts say how a format's codes and scales are arranged.
const (
	LayoutModelOpt = "modelopt" // NVFP4: weight U8, weight_scale e4m3, weight_scale_2
	// LayoutModelOptExpertsT is ModelOpt's NVFP4 export of experts stacked
	// in one parameter (Llama 4's, gpt-oss's gate_up_proj and down_proj):
	// U8 [E, in/2, out], the pairs and the 16-blocks along the input
	// dimension; {name}_weight_scale E4M3 [E, in/16, out]; logical shape
	// [E, in, out].
	LayoutModelOptExpertsT = "modelopt-experts-t"
	LayoutCT               = "compressed-tensors" // NVFP4/MXFP4 weight_packed U8; FP8 weight + weight_scale
	LayoutCTPack           = "ct-pack"            // int weight_packed I32 + weight_scale (+ zero point, g_idx)
	LayoutGPTQ             = "gptq"               // v1: zeros stored as z−1
	LayoutGPTQv2           = "gptq_v2"
	LayoutGPTQp            = "gptq_p" // GPT-QModel's planar 3/5/6/7-bit qweight and qzeros, v2 zero points
	LayoutAWQ              = "awq-gemm"
	LayoutGPTOSS           = "gpt-oss" // MXFP4 *_blocks + *_scales
	LayoutFP8Tensor        = "fp8-tensor"
	LayoutFP8Channel       = "fp8-channel"
	LayoutFP8Block         = "fp8-block"
	LayoutFP8Group         = "fp8-group"
	LayoutIntChannel       = "int-scaled"   // I8 weight + weight_scale (int-quantized, naive-quantized)
	LayoutModelOptAWQ      = "modelopt-awq" // ModelOpt INT4 AWQ (W4A16/W4A8): weight U8 [out/2, in], two rows' codes a byte; weight_scale [out, in/group]
	LayoutUnquantized      = "dense"
)

// Module is a layer's weight with everything stored to describe it. Its
// JSON (MarshalJSON, AppendJSON) also carries "tensors": role → tensor name.
type Module struct {
	Name   string `json:"name"`
	Kind   string `json:"kind"` // attention | mlp | experts | router | embedding | norm | head | other
	Format string `json:"format"`
	Layout string `json:"layout"`
	// Bits per stored weight code (4 for NVFP4 and int4, 8 for FP8).
	Bits int `json:"bits,omitempty"`
	// GroupSize is how many input elements share a scale (16 for NVFP4, 32 for
	// MX, the group size of int schemes); 0 for per-tensor or per-channel.
	GroupSize int   `json:"group_size,omitempty"`
	Block     []int `json:"block,omitempty"` // FP8 block scales: rows × cols a scale
	// WeightShape is the logical shape; for linear layers [out, in].
	WeightShape   []uint64 `json:"weight_shape"`
	ShapeInferred bool     `json:"shape_inferred,omitempty"` // weight_shape values were not read (or not usable)
	// Parameters is the weight's logical elements (the product of
	// WeightShape) plus BiasParameters.
	Parameters uint64 `json:"parameters"`
	// BiasParameters is the part of Parameters outside WeightShape: the
	// elements of the bias (and any other unquantized float tensor of the
	// module), counted as parameters as model cards count them.
	BiasParameters uint64 `json:"bias_parameters"`
	Bytes          uint64 `json:"bytes"`
	Quantized      bool   `json:"quantized"`
	Symmetric      bool   `json:"symmetric,omitempty"`
	// InverseScale: FP8 scales are divisors (GPT-QModel's own export), not multipliers.
	InverseScale bool `json:"inverse_scale,omitempty"`
	// fused: a tensor of the module has one of fusedRoles (Group's use)
	fused      bool
	packLayout packing.CTLayout
	notes      *moduleNotes // nil for most modules (see rare)
	infos      roleInfos    // the module's tensors, in the order they came
}

// moduleNotes are what few modules have, kept apart so that the tens of
// thousands of modules of a large repo do not each carry the room.
type moduleNotes struct {
	// scaleRefused says why a lone file's quantscope.scale does not describe
	// the FP8 scale tensor stored (scaleKindMismatch); decoding refuses it.
	scaleRefused, scaleRole string
	// shapeRejected says why weight_shape values read were set aside for
	// the packed width (CT-004); empty when they were used or not read.
	shapeRejected string

	// bias/other parameters counted under their own dtype
	extraParams map[string]uint64 // nil when there are none
	extraBytes  map[string]uint64 // their bytes, by the same keys
}

// noNotes stands for a module's absent notes; never written.
var noNotes moduleNotes

// rare returns the module's notes to read (empty when it has none).
func (m *Module) rare() *moduleNotes {
	if m.notes == nil {
		return &noNotes
	}
	return m.notes
}

// rareToWrite returns the module's notes to change, made on first use.
func (m *Module) rareToWrite() *moduleNotes {
	if m.notes == nil {
		m.notes = &moduleNotes{}
	}
	return m.notes
}

// roleInfos are a module's tensors, each with its role in its Role (Group
// records it there). A module has a handful of tensors, so a slice
// searched in turn is both smaller and faster than a map (a repo of 46,000
// modules holds 46,000 of these).
type roleInfos []*TensorInfo

func (r roleInfos) lookup(role string) (*TensorInfo, bool) {
	for _, t := range r {
		if t.Role == role {
			return t, true
		}
	}
	return nil, false
}

func (r roleInfos) get(role string) *TensorInfo {
	t, _ := r.lookup(role)
	return t
}

// Info returns the header facts of the module's tensor in a role.
func (m *Module) Info(role string) (*TensorInfo, bool) {
	t, ok := m.infos.lookup(role)
	return t, ok
}

// Tensors maps the module's roles to its tensors' names (the JSON's
// "tensors"). It is built on each call: a repo holds tens of thousands of
// modules, and a map apiece cost more than grouping them.
func (m *Module) Tensors() map[string]string {
	out := make(map[string]string, len(m.infos))
	for _, t := range m.infos {
		out[t.Role] = t.Name
	}
	return out
}

// Tensor returns the name of the module's tensor in a role.
func (m *Module) Tensor(role string) (string, bool) {
	t, ok := m.infos.lookup(role)
	if !ok {
		return "", false
	}
	return t.Name, true
}

// ParametersByFormat splits the module's parameters: the weight's under its
// format, a bias (or other float data) under its own dtype.
func (m *Module) ParametersByFormat() map[string]uint64 {
	out := map[string]uint64{}
	m.AddParametersByFormat(out)
	return out
}

// AddParametersByFormat adds ParametersByFormat's figures to into, without
// a map per module (a repo's summary adds up tens of thousands).
func (m *Module) AddParametersByFormat(into map[string]uint64) {
	if m.Format != FormatNone {
		into[m.Format] += m.Parameters - sumValues(m.rare().extraParams)
	}
	for k, v := range m.rare().extraParams {
		into[k] += v
	}
}

// AddBytesByFormat splits the module's bytes as AddParametersByFormat
// splits its parameters: a bias (or other float data) under its own dtype,
// the rest (the weight and its scales) under the module's format.
func (m *Module) AddBytesByFormat(into map[string]uint64) {
	into[m.Format] += m.Bytes - sumValues(m.rare().extraBytes)
	for k, v := range m.rare().extraBytes {
		into[k] += v
	}
}

func sumValues(m map[string]uint64) uint64 {
	var s uint64
	for _, v := range m {
		s += v
	}
	return s
}

// Roles of tensors within a module. Metadata roles hold no parameters.
var dottedRoles = []string{
	"weight_packed", "weight_scale_inv", "weight_scale_2", "weight_scale", "weight_global_scale",
	"weight_zero_point", "weight_shape", "weight_g_idx", "input_global_scale", "input_scale",
	"input_zero_point", "output_scale", "qweight", "qzeros", "scales", "g_idx", "bias",
	"k_scale", "v_scale", "pre_quant_scale", "weight",
}

var metadataRoles = map[string]bool{
	"weight_scale_inv": true, "weight_scale_2": true, "weight_scale": true, "weight_global_scale": true,
	"weight_zero_point": true, "weight_shape": true, "weight_g_idx": true, "input_global_scale": true,
	"input_scale": true, "input_zero_point": true, "output_scale": true, "qzeros": true, "scales": true,
	"g_idx": true, "k_scale": true, "v_scale": true, "mx_scales": true,
	"pre_quant_scale": true, // ModelOpt AWQ: the input's per-column scale (see PreQuantScale)
}

// SplitName splits a tensor name into its module and role. MXFP4's
// `*_blocks` and `*_scales` are roles "blocks" and "mx_scales"; a name with no
// known role is its own module with role "tensor".
func SplitName(name string) (module, role string) {
	if dot := strings.LastIndexByte(name, '.'); dot > 0 && dot < len(name)-1 {
		if r := name[dot+1:]; dottedRole[r] {
			return name[:dot], r
		}
	}
	if m, ok := strings.CutSuffix(name, "_blocks"); ok && m != "" {
		return m, "blocks"
	}
	// ModelOpt's export of experts stacked in one parameter (Llama 4's,
	// gpt-oss's): gate_up_proj beside gate_up_proj_weight_scale, …
	for _, r := range fusedRoles {
		if m, ok := strings.CutSuffix(name, "_"+r); ok && m != "" && !strings.HasSuffix(m, ".") {
			return m, r
		}
	}
	if m, ok := strings.CutSuffix(name, "_scales"); ok && m != "" {
		return m, "mx_scales"
	}
	return name, "tensor"
}

// fusedRoles are the roles ModelOpt names with an underscore after a stacked
// experts parameter ({name}_weight_scale, quantization/utils.py), longest
// first.
var fusedRoles = []string{"weight_scale_2", "weight_scale", "input_scale"}

// dottedRole is dottedRoles as a set: a role is always the last dotted part.
var dottedRole = func() map[string]bool {
	m := make(map[string]bool, len(dottedRoles))
	for _, r := range dottedRoles {
		m[r] = true
	}
	return m
}()

// ShapeValues returns the int64 values of a small tensor (weight_shape), or
// false when they cannot be had without a read the caller does not want.
type ShapeValues func(tensor string) ([]int64, bool)

// Group collects tensors into modules and classifies each against the scheme,
// recording each tensor's module and role in the slice it is given. Modules
// come back sorted by name. shapes may be nil.
func Group(tensors []TensorInfo, s *Scheme, shapes ShapeValues) []*Module {
	if s == nil {
		s = &Scheme{Method: "none", Family: FamilyNone}
	}
	byName := make(map[string]*Module, len(tensors)/4)
	var order []*Module
	// Modules and their role lists are carved from blocks, four roles a
	// module (a longer list moves out on its own).
	var slab []Module
	var roleSlab []*TensorInfo
	var last *Module     // a module's tensors are often neighbours
	left := len(tensors) // not yet added: bounds the modules still to come
	add := func(mod, role string, t *TensorInfo) {
		left--
		m := last
		if m == nil || m.Name != mod {
			m = byName[mod]
		}
		if m == nil {
			if len(slab) == 0 {
				// A quantized linear has about four tensors: a slab for a
				// quarter of those left (and more when it runs out) wastes
				// little where a fixed size left a third of it unused.
				n := min(left+1, left/4+16)
				slab, roleSlab = make([]Module, n), make([]*TensorInfo, 4*n)
			}
			m = &slab[0]
			slab = slab[1:]
			m.Name, m.infos = mod, roleSlab[0:0:4]
			roleSlab = roleSlab[4:]
			byName[mod] = m
			order = append(order, m)
		}
		last = m
		if _, dup := m.infos.lookup(role); dup { // two tensors claim one role: keep both apart
			role = t.Name
		}
		t.Module, t.Role = mod, role
		m.infos = append(m.infos, t)
	}
	var deferred []*TensorInfo
	for i := range tensors {
		t := &tensors[i]
		mod, role := SplitName(t.Name)
		if role == "tensor" && strings.HasSuffix(t.Name, "_bias") {
			deferred = append(deferred, t) // gpt-oss `*_bias` joins its `*_blocks` (or stacked experts') module
			continue
		}
		add(mod, role, t)
		if mod != t.Name && slices.Contains(fusedRoles, role) {
			// a stem of ModelOpt's stacked-experts names: a flag on the
			// module, not a set of names (every quantized linear has such
			// a role; a set cost 4 MB and a hash each on a 180,000-tensor
			// repo)
			last.fused = true
		}
	}
	for _, m := range order {
		if !m.fused {
			continue
		}
		// the stacked parameter itself, named as its module: its weight
		for _, t := range m.infos {
			if t.Role == "tensor" && t.Name == m.Name {
				t.Role = "weight"
			}
		}
	}
	for _, t := range deferred {
		stem := strings.TrimSuffix(t.Name, "_bias")
		if m := byName[stem]; m != nil && (m.infos.get("blocks") != nil || m.fused) {
			add(stem, "bias", t)
		} else {
			add(t.Name, "tensor", t)
		}
	}
	if !slices.IsSortedFunc(order, cmpModuleName) {
		slices.SortFunc(order, cmpModuleName)
	}
	for _, m := range order {
		m.Kind = kindOf(m.Name)
		classify(m, s, shapes)
	}
	return order
}

func cmpModuleName(a, b *Module) int { return strings.Compare(a.Name, b.Name) }

func kindOf(name string) string {
	n := strings.ToLower(name)
	switch {
	case strings.HasSuffix(n, ".gate") || strings.HasSuffix(n, ".router") || strings.Contains(n, ".router."),
		strings.Contains(n, "mlp.gate.") || strings.Contains(n, "moe.gate.") || strings.Contains(n, "feed_forward.gate."):
		// an MoE router and its own tensors (DeepSeek's e_score_correction_bias),
		// as the layer map and diff file them: runtimes build it unquantized
		return "router"
	case strings.Contains(n, "expert"):
		return "experts"
	case strings.Contains(n, "embed") || strings.HasSuffix(n, "wte") || strings.HasSuffix(n, "wpe"):
		return "embedding"
	case strings.Contains(n, "norm") || strings.HasSuffix(n, "ln_f") || strings.Contains(n, ".ln_"):
		return "norm"
	case strings.Contains(n, "lm_head") || strings.HasSuffix(n, "output"):
		return "head"
	case strings.Contains(n, "attn") || strings.Contains(n, "attention"):
		return "attention"
	case strings.Contains(n, "mlp") || strings.Contains(n, "feed_forward") || strings.Contains(n, "ffn"):
		return "mlp"
	}
	return "other"
}

func dtypeFormat(d safetensors.DType) string { return strings.ToLower(d.String()) }

func isFP8(d safetensors.DType) bool {
	switch d {
	case safetensors.F8_E4M3, safetensors.F8_E5M2, safetensors.F8_E4M3FNUZ, safetensors.F8_E5M2FNUZ:
		return true
	}
	return false
}

func isE8M0Carrier(d safetensors.DType) bool { return d == safetensors.U8 || d == safetensors.F8_E8M0 }

// isWideFloat: a 16- or 32-bit float dtype (scales stored unquantized).
func isWideFloat(d safetensors.DType) bool {
	return d == safetensors.F16 || d == safetensors.BF16 || d == safetensors.F32
}

// PackedInputs says whether the module's inputs are packed along qweight's
// rows (GPTQ in any layout, AWQ): a window of its columns reads only the
// rows holding them.
func (m *Module) PackedInputs() bool {
	switch m.Layout {
	case LayoutGPTQ, LayoutGPTQv2, LayoutGPTQp, LayoutAWQ:
		return true
	}
	return false
}
