package scheme

import (
	"fmt"
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
	packLayout   packing.CTLayout
	// scaleRefused says why a lone file's quantscope.scale does not describe
	// the FP8 scale tensor stored (scaleKindMismatch); decoding refuses it.
	scaleRefused, scaleRole string
	// shapeRejected says why weight_shape values read were set aside for
	// the packed width (CT-004); empty when they were used or not read.
	shapeRejected string

	// bias/other parameters counted under their own dtype
	extraParams map[string]uint64 // nil when there are none
	infos       roleInfos         // role → info, in the order the tensors came
}

// roleInfo is one tensor of a module and its role.
type roleInfo struct {
	role string
	t    *TensorInfo
}

// roleInfos maps a module's roles to its tensors. A module has a handful of
// tensors, so a slice searched in turn is both smaller and faster than a map
// (a repo of 46,000 modules holds 46,000 of these).
type roleInfos []roleInfo

func (r roleInfos) lookup(role string) (*TensorInfo, bool) {
	for i := range r {
		if r[i].role == role {
			return r[i].t, true
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
	for _, ri := range m.infos {
		out[ri.role] = ri.t.Name
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
		into[m.Format] += m.Parameters - sumValues(m.extraParams)
	}
	for k, v := range m.extraParams {
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
	var roleSlab []roleInfo
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
				slab, roleSlab = make([]Module, n), make([]roleInfo, 4*n)
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
		m.infos = append(m.infos, roleInfo{role, t})
		t.Module, t.Role = mod, role
	}
	var deferred []*TensorInfo
	var fused map[string]bool // stems of ModelOpt's stacked-experts names
	for i := range tensors {
		t := &tensors[i]
		mod, role := SplitName(t.Name)
		if role == "tensor" && strings.HasSuffix(t.Name, "_bias") {
			deferred = append(deferred, t) // gpt-oss `*_bias` joins its `*_blocks` (or stacked experts') module
			continue
		}
		if mod != t.Name && slices.Contains(fusedRoles, role) {
			if fused == nil {
				fused = map[string]bool{}
			}
			fused[mod] = true
		}
		add(mod, role, t)
	}
	for stem := range fused {
		// the stacked parameter itself, named as its module: its weight
		if m := byName[stem]; m != nil {
			for i := range m.infos {
				if ri := &m.infos[i]; ri.role == "tensor" && ri.t.Name == stem {
					ri.role, ri.t.Role = "weight", "weight"
				}
			}
		}
	}
	for _, t := range deferred {
		stem := strings.TrimSuffix(t.Name, "_bias")
		if m := byName[stem]; m != nil && (m.infos.get("blocks") != nil || fused[stem]) {
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
	case strings.HasSuffix(n, ".gate") || strings.HasSuffix(n, ".router") || strings.Contains(n, ".router."):
		return "router" // an MoE router: runtimes build it unquantized whatever the config says
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

func classify(m *Module, s *Scheme, shapes ShapeValues) {
	in := m.infos
	for _, ri := range in {
		role, t := ri.role, ri.t
		m.Bytes += t.NBytes
		if role == "bias" || (role != "weight" && role != "tensor" && !metadataRoles[role] &&
			role != "weight_packed" && role != "qweight" && role != "blocks") {
			if m.extraParams == nil {
				m.extraParams = map[string]uint64{}
			}
			m.extraParams[dtypeFormat(t.DType)] += t.elements()
		}
	}
	w, packed, qw, blocks := in.get("weight"), in.get("weight_packed"), in.get("qweight"), in.get("blocks")
	if w == nil && packed == nil && qw == nil && blocks == nil {
		w = in.get("tensor")
	}
	switch {
	case blocks != nil:
		classifyMXBlocks(m, blocks)
	case packed != nil:
		classifyPacked(m, packed, s, shapes)
	case qw != nil:
		classifyGPTQorAWQ(m, qw, s)
	case w != nil:
		classifyWeight(m, w, s)
	default:
		m.Format = FormatNone
		m.Layout = ""
	}
	if m.WeightShape == nil {
		m.WeightShape = []uint64{}
	}
	var p uint64
	if m.Format != FormatNone {
		p = 1
		for _, d := range m.WeightShape {
			p *= d
		}
	}
	m.BiasParameters = sumValues(m.extraParams)
	m.Parameters = p + m.BiasParameters
}

func withLast(shape []uint64, f func(uint64) uint64) []uint64 {
	out := slices.Clone(shape)
	if len(out) > 0 {
		out[len(out)-1] = f(out[len(out)-1])
	}
	return out
}

func classifyMXBlocks(m *Module, b *TensorInfo) {
	m.Format, m.Layout, m.Bits, m.GroupSize, m.Quantized = FormatMXFP4, LayoutGPTOSS, 4, 32, true
	if len(b.Shape) >= 2 {
		m.WeightShape = append(slices.Clone(b.Shape[:len(b.Shape)-2]), b.Shape[len(b.Shape)-2]*b.Shape[len(b.Shape)-1]*2)
	} else {
		m.WeightShape = withLast(b.Shape, func(n uint64) uint64 { return 2 * n })
	}
}

func classifyPacked(m *Module, p *TensorInfo, s *Scheme, shapes ShapeValues) {
	m.Quantized = true
	scale := m.infos.get("weight_scale")
	switch {
	case p.DType == safetensors.U8 && scale != nil && isE8M0Carrier(scale.DType):
		m.Format, m.Layout, m.Bits, m.GroupSize = FormatMXFP4, LayoutCT, 4, 32
	case p.DType == safetensors.U8:
		m.Format, m.Layout, m.Bits, m.GroupSize = FormatNVFP4, LayoutCT, 4, 16
	default:
		m.Layout = LayoutCTPack
		m.packLayout = ctLayoutOf(s)
		m.Bits, m.GroupSize, m.Symmetric = 4, 0, true
		if g := s.groupFor(m.Name); g != nil && g.Weights != nil {
			m.Bits, m.GroupSize, m.Symmetric = g.Weights.NumBits, g.Weights.GroupSize, g.Weights.Symmetric
			if g.Weights.Strategy == "channel" {
				m.GroupSize = 0
			}
		} else if s.Bits != 0 {
			m.Bits, m.GroupSize = s.Bits, s.GroupSize
		}
		if m.infos.get("weight_zero_point") != nil {
			m.Symmetric = false
		}
		m.Format = fmt.Sprintf("int%d", m.Bits)
	}
	// weight_shape must fit the packed words in either layout (the wrong
	// one is CT-003, reported by the rules): at most 32·P/bits values.
	if v, ok := weightShapeValues(m, shapes); ok {
		why := badWeightShape(v, packedWidth(m, p, packing.CTBitstream))
		if why == "" {
			m.WeightShape = make([]uint64, len(v))
			for i, x := range v {
				m.WeightShape[i] = uint64(x)
			}
			return
		}
		m.shapeRejected = fmt.Sprintf("weight_shape values %v: %s", v, why)
	}
	// Without usable weight_shape values the packed width bounds the
	// logical width.
	m.WeightShape = packedWidth(m, p, ctLayoutOf(s))
	if p.DType == safetensors.U8 {
		return
	}
	m.ShapeInferred = m.infos.get("weight_shape") != nil
	// A group scale [out, ceil(in/g)] narrows the bound.
	if sc := m.infos.get("weight_scale"); sc != nil && m.GroupSize > 0 && len(sc.Shape) == len(p.Shape) && len(sc.Shape) > 0 {
		if lim := saturatingMul(sc.Shape[len(sc.Shape)-1], uint64(m.GroupSize)); lim < m.WeightShape[len(m.WeightShape)-1] {
			m.WeightShape[len(m.WeightShape)-1] = lim
		}
	}
}

func classifyGPTQorAWQ(m *Module, qw *TensorInfo, s *Scheme) {
	m.Quantized = true
	m.Bits = s.Bits
	if m.Bits == 0 {
		m.Bits = 4
	}
	sc := m.infos.get("scales")
	isAWQ := s.Method == "awq"
	if s.Method != "awq" && s.Method != "gptq" && sc != nil && len(sc.Shape) == 2 && len(qw.Shape) == 2 {
		isAWQ = qw.Shape[1]*8 == sc.Shape[1] && qw.Shape[1] != sc.Shape[1]
	}
	if len(qw.Shape) != 2 {
		m.Format, m.Layout = fmt.Sprintf("int%d", m.Bits), LayoutGPTQ
		m.WeightShape = slices.Clone(qw.Shape)
		return
	}
	if isAWQ {
		m.Bits = 4
		m.Format, m.Layout = "int4", LayoutAWQ
		m.WeightShape = []uint64{qw.Shape[1] * 8, qw.Shape[0]}
	} else {
		m.Format, m.Layout = fmt.Sprintf("int%d", m.Bits), LayoutGPTQ
		switch {
		case s.CheckpointFormat == "gptq_p" && m.Bits != 2 && m.Bits != 4 && m.Bits != 8:
			m.Layout = LayoutGPTQp
		case s.CheckpointFormat == "gptq_v2", s.CheckpointFormat == "gptq_p": // gptq_p's 2/4/8-bit words are the continuous ones
			m.Layout = LayoutGPTQv2
		}
		m.WeightShape = []uint64{qw.Shape[1], qw.Shape[0] * 32 / uint64(m.Bits)}
	}
	m.GroupSize = s.GroupSize
	if m.GroupSize <= 0 && sc != nil && len(sc.Shape) == 2 && sc.Shape[0] > 0 {
		m.GroupSize = int(m.WeightShape[1] / sc.Shape[0])
	}
	if s.Symmetric != nil {
		m.Symmetric = *s.Symmetric
	}
}

func classifyWeight(m *Module, w *TensorInfo, s *Scheme) {
	m.WeightShape = slices.Clone(w.Shape)
	sc, inv := m.infos.get("weight_scale"), m.infos.get("weight_scale_inv")
	switch {
	case w.DType == safetensors.U8 && sc != nil && isWideFloat(sc.DType) && s.modeloptInt(m.Name):
		m.Format, m.Layout, m.Bits, m.Quantized = "int4", LayoutModelOptAWQ, 4, true
		n := len(m.WeightShape)
		if n >= 2 { // pairs of output rows a byte (of each expert's, for [E, out/2, in])
			m.WeightShape[n-2] *= 2
		}
		m.GroupSize = s.GroupSize
		if k := len(sc.Shape); n >= 1 && k >= 1 && sc.Shape[k-1] > 0 && m.WeightShape[n-1]%sc.Shape[k-1] == 0 {
			m.GroupSize = int(m.WeightShape[n-1] / sc.Shape[k-1])
		}
	case w.DType == safetensors.U8 && sc != nil && sc.DType == safetensors.F8_E4M3 && stackedTransposed(m, w, sc):
		m.Format, m.Layout, m.Bits, m.GroupSize, m.Quantized = FormatNVFP4, LayoutModelOptExpertsT, 4, 16, true
		m.WeightShape = []uint64{w.Shape[0], 2 * w.Shape[1], w.Shape[2]} // [E, in, out], as the export stores it
	case w.DType == safetensors.U8 && sc != nil && (sc.DType == safetensors.F8_E4M3 || m.infos.get("weight_scale_2") != nil):
		m.Format, m.Layout, m.Bits, m.GroupSize, m.Quantized = FormatNVFP4, LayoutModelOpt, 4, 16, true
		m.WeightShape = withLast(w.Shape, func(n uint64) uint64 { return 2 * n })
	case w.DType == safetensors.U8 && sc != nil && isE8M0Carrier(sc.DType) && s.Family == FamilyMXFP4:
		m.Format, m.Layout, m.Bits, m.GroupSize, m.Quantized = FormatMXFP4, LayoutModelOpt, 4, 32, true
		m.WeightShape = withLast(w.Shape, func(n uint64) uint64 { return 2 * n })
	case w.DType == safetensors.U8 && s.Family == FamilyNVFP4 && m.Kind != "embedding" && m.Kind != "norm":
		// an FP4 label on U8 bytes with no scales: counted as packed pairs, flagged by the rules
		m.Format, m.Layout, m.Bits, m.GroupSize, m.Quantized = FormatNVFP4, LayoutModelOpt, 4, 16, true
		m.WeightShape = withLast(w.Shape, func(n uint64) uint64 { return 2 * n })
	case isFP8(w.DType) && sc != nil && isE8M0Carrier(sc.DType):
		m.Format, m.Layout, m.Bits, m.GroupSize, m.Quantized = FormatMXFP8, LayoutCT, 8, 32, true
	case isFP8(w.DType):
		m.Format, m.Bits, m.Quantized = FormatFP8, 8, true
		m.InverseScale = s.InverseFP8Scales
		scale, role := sc, "weight_scale"
		if scale == nil {
			scale, role = inv, "weight_scale_inv"
		}
		if scale != nil {
			m.scaleRefused, m.scaleRole = scaleKindMismatch(s.fileScale, role), role
		}
		m.Layout = fp8Layout(m, w, scale, s)
	case w.DType == safetensors.I8 && (sc != nil || inv != nil):
		m.Format, m.Layout, m.Bits, m.Quantized = "int8", LayoutIntChannel, 8, true
		if zp := m.infos.get("weight_zero_point"); zp == nil {
			m.Symmetric = true
		}
		if sc != nil && len(sc.Shape) == 2 && len(w.Shape) == 2 && sc.Shape[1] > 1 {
			m.GroupSize = int((w.Shape[1] + sc.Shape[1] - 1) / sc.Shape[1])
		}
	default:
		m.Format, m.Layout = dtypeFormat(w.DType), LayoutUnquantized
	}
}

// ctBlock is the block_structure [R, C] of the compressed-tensors config
// group that quantizes module name with strategy "block" (nil when none
// does, or it is not two sizes in 1..maxBlock). compressed-tensors tiles
// the weight by it, the last blocks partial: a [576, in] weight in 128-row
// blocks has 5 scale rows, which the scale's shape alone would read as
// blocks of 116.
func ctBlock(s *Scheme, name string) []int {
	if s == nil || len(s.Groups) == 0 {
		return nil
	}
	g := s.groupFor(name)
	if g == nil || g.Weights == nil || g.Weights.Strategy != "block" {
		return nil
	}
	b := g.Weights.BlockStructure
	if len(b) != 2 || b[0] <= 0 || b[1] <= 0 || b[0] > maxBlock || b[1] > maxBlock {
		return nil
	}
	return b
}

// fp8Layout reads the scale's shape against the weight's.
func fp8Layout(m *Module, w, scale *TensorInfo, s *Scheme) string {
	if scale == nil {
		return LayoutFP8Tensor // no scale at all: the rules report it
	}
	n := scale.elements()
	if n == 1 {
		return LayoutFP8Tensor
	}
	if len(w.Shape) != 2 {
		return LayoutFP8Channel
	}
	out, in := w.Shape[0], w.Shape[1]
	if n == out && (len(scale.Shape) == 1 || (len(scale.Shape) == 2 && scale.Shape[1] == 1)) {
		return LayoutFP8Channel
	}
	if len(scale.Shape) == 2 {
		br, bc := 128, 128
		if b := s.WeightBlockSize; len(b) == 2 {
			br, bc = b[0], b[1]
		} else if b := ctBlock(s, m.Name); b != nil {
			br, bc = b[0], b[1]
		} else if scale.Shape[0] > 0 && scale.Shape[1] > 0 {
			br, bc = blockOf(out, scale.Shape[0]), blockOf(in, scale.Shape[1])
		}
		if scale.Shape[0] == out && scale.Shape[1] > 1 {
			m.GroupSize = blockOf(in, scale.Shape[1])
			return LayoutFP8Group
		}
		// A zero-sized weight dimension gives no block: Block stays unset
		// and the rules report the scale (a block of 0 divided by zero).
		if br > 0 && bc > 0 {
			m.Block = []int{br, bc}
		}
		return LayoutFP8Block
	}
	return LayoutFP8Channel
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

// stackedTransposed says whether a U8 weight named as its module (ModelOpt's
// stacked experts, {name} beside {name}_weight_scale) is stored as its
// export writes Llama 4's and gpt-oss's: [E, in/2, out] with scales
// [E, in/16, out] (unified_export_hf transposes them back after
// quantizing along the input).
func stackedTransposed(m *Module, w, sc *TensorInfo) bool {
	return w.Name == m.Name && len(w.Shape) == 3 && len(sc.Shape) == 3 && sc.Shape[0] == w.Shape[0] &&
		sc.Shape[2] == w.Shape[2] && sc.Shape[1]*8 == w.Shape[1] && w.Shape[1] > 0
}
