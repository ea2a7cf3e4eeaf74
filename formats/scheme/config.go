// Package scheme understands what a checkpoint's quantization is: it reads
// config.json's quantization_config and ModelOpt's hf_quant_config.json into a
// Scheme, groups safetensors tensors into modules (a linear layer's weight with
// its scales, zero points and shape), decides each module's stored format from
// its tensors and the config together, dequantizes a module, and checks the
// compressed-tensors format rules.
//
// It works on header facts (names, dtypes, shapes) and reads tensor bytes only
// through the small TensorReader interface, so it runs the same natively and
// in the browser. It does not fetch anything and does not guess from a model's
// name.
package scheme

import (
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
)

// Families of quantization a checkpoint can declare.
const (
	FamilyNone  = "none"
	FamilyFP8   = "fp8"
	FamilyNVFP4 = "nvfp4"
	FamilyMXFP8 = "mxfp8"
	FamilyMXFP4 = "mxfp4"
	FamilyInt   = "int"
	FamilyMixed = "mixed"
)

// QuantArgs is one quantization_config args block (weights, input_activations).
type QuantArgs struct {
	NumBits        int    `json:"num_bits"`
	Type           string `json:"type,omitempty"` // int | float
	Symmetric      bool   `json:"symmetric"`
	Strategy       string `json:"strategy,omitempty"`
	GroupSize      int    `json:"group_size,omitempty"`
	BlockStructure []int  `json:"block_structure,omitempty"`
	Dynamic        any    `json:"dynamic,omitempty"`
	Actorder       any    `json:"actorder,omitempty"`
}

// ConfigGroup is one entry of compressed-tensors' config_groups.
type ConfigGroup struct {
	Name             string     `json:"name"`
	Targets          []string   `json:"targets"`
	Format           string     `json:"format,omitempty"`
	Weights          *QuantArgs `json:"weights,omitempty"`
	InputActivations *QuantArgs `json:"input_activations,omitempty"`
}

// LayerQuant is a ModelOpt MIXED_PRECISION per-layer entry.
type LayerQuant struct {
	QuantAlgo string `json:"quant_algo"`
	GroupSize int    `json:"group_size,omitempty"`
}

// Scheme is what a checkpoint's config files declare.
type Scheme struct {
	Method           string                `json:"method"` // compressed-tensors | modelopt | fp8 | gptq | awq | mxfp4 | none | another declared quant_method
	Family           string                `json:"family"`
	Format           string                `json:"format,omitempty"`     // compressed-tensors format
	QuantAlgo        string                `json:"quant_algo,omitempty"` // ModelOpt
	Producer         string                `json:"producer,omitempty"`
	Version          string                `json:"version,omitempty"`
	Bits             int                   `json:"bits,omitempty"`
	GroupSize        int                   `json:"group_size,omitempty"`
	Symmetric        *bool                 `json:"symmetric,omitempty"`
	CheckpointFormat string                `json:"checkpoint_format,omitempty"` // gptq | gptq_v2 | gptq_p
	DescAct          bool                  `json:"desc_act,omitempty"`
	FP8Format        string                `json:"fp8_format,omitempty"` // e4m3 | e5m2 | ...
	WeightBlockSize  []int                 `json:"weight_block_size,omitempty"`
	ActivationScheme string                `json:"activation_scheme,omitempty"`
	InverseFP8Scales bool                  `json:"inverse_fp8_scales,omitempty"` // GPT-QModel's own FP8 export: w = q / scale_inv
	Groups           []ConfigGroup         `json:"config_groups,omitempty"`
	Ignore           []string              `json:"ignore,omitempty"`          // compressed-tensors ignore, modules_to_not_convert
	ExcludeModules   []string              `json:"exclude_modules,omitempty"` // ModelOpt fnmatch wildcards
	QuantizedLayers  map[string]LayerQuant `json:"quantized_layers,omitempty"`
	KVCache          string                `json:"kv_cache,omitempty"`
	DeclaredIn       []string              `json:"declared_in,omitempty"` // config.json, hf_quant_config.json
	// Dynamic is GPT-QModel's per-module overrides, in file order (dynamic.go).
	Dynamic []DynamicRule `json:"dynamic,omitempty"`
	// Conflicts says where hf_quant_config.json and config.json's
	// quantization_config disagree (each a sentence); config.json's word is
	// the one read, as vLLM reads it.
	Conflicts []string `json:"conflicts,omitempty"`

	lists atomic.Value // *compiledLists: the lists above compiled on first use (match.go)
	// fileScale is a lone file's quantscope.scale (FromFileMetadata), which
	// names the scale tensor it describes; "" for a config's scheme.
	fileScale string
	// groupOrder is config.json's config_groups keys in file order
	// (configGroupOrder), for Groups' order; dynamicOrder the same for
	// GPT-QModel's dynamic.
	groupOrder, dynamicOrder []string
}

// ConfigError is a config file that cannot be read as the shape its producer writes.
type ConfigError struct {
	File  string
	Field string
	Msg   string
}

func (e *ConfigError) Error() string {
	if e.Field == "" {
		return fmt.Sprintf("%s: rule config: %s", e.File, e.Msg)
	}
	return fmt.Sprintf("%s: field %s: rule config: %s", e.File, e.Field, e.Msg)
}

// UnsupportedError is valid config naming a method quantscope does not read yet.
type UnsupportedError struct{ Method string }

func (e *UnsupportedError) Error() string {
	return fmt.Sprintf("quantization method %q is not supported yet", e.Method)
}

// Detect reads the quantization scheme from config.json and hf_quant_config.json
// (either may be nil when the repo has no such file).
func Detect(configJSON, hfQuantJSON []byte) (*Scheme, error) {
	s := &Scheme{Method: "none", Family: FamilyNone}
	if hfQuantJSON != nil {
		top, err := decodeObject("hf_quant_config.json", hfQuantJSON)
		if err != nil {
			return nil, err
		}
		if err := s.readModelOpt(top); err != nil {
			return nil, err
		}
		s.DeclaredIn = append(s.DeclaredIn, "hf_quant_config.json")
	}
	if configJSON != nil {
		top, err := decodeObject("config.json", configJSON)
		if err != nil {
			return nil, err
		}
		qc := top.sub("quantization_config")
		if top.err != nil {
			return nil, top.err
		}
		if qc == nil {
			qc = top.sub("compression_config") // older compressed-tensors exports
			if top.err != nil {
				return nil, top.err
			}
		}
		if qc != nil {
			s.DeclaredIn = append(s.DeclaredIn, "config.json")
			s.groupOrder = configGroupOrder(configJSON, "config_groups")
			s.dynamicOrder = configGroupOrder(configJSON, "dynamic")
			before := *s
			if err := s.readQuantizationConfig(qc); err != nil {
				return nil, err
			}
			if hfQuantJSON != nil {
				s.Conflicts = conflicts(&before, s)
			}
		}
	}
	return s, nil
}

// conflicts compares what hf_quant_config.json declared (hf) with what
// config.json's quantization_config made of it (cfg): the method, ModelOpt's
// algorithm, its exclude list and KV-cache algorithm, each where both say one.
func conflicts(hf, cfg *Scheme) []string {
	var out []string
	say := func(what, a, b string) {
		if a != "" && b != "" && a != b {
			out = append(out, fmt.Sprintf("%s: hf_quant_config.json says %s, config.json's quantization_config says %s", what, a, b))
		}
	}
	say("quantization method", hf.Method, cfg.Method)
	if cfg.Method == hf.Method {
		say("quant_algo", hf.QuantAlgo, cfg.QuantAlgo)
		say("kv_cache_quant_algo", hf.KVCache, cfg.KVCache)
		if hf.ExcludeModules != nil && cfg.ExcludeModules != nil && !sameSet(hf.ExcludeModules, cfg.ExcludeModules) {
			out = append(out, fmt.Sprintf("exclude_modules: hf_quant_config.json lists %d, config.json's quantization_config %d, not the same", len(hf.ExcludeModules), len(cfg.ExcludeModules)))
		}
	}
	return out
}

func sameSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	x, y := slices.Clone(a), slices.Clone(b)
	slices.Sort(x)
	slices.Sort(y)
	return slices.Equal(x, y)
}

// readModelOpt reads hf_quant_config.json, or a quantization_config of
// quant_method modelopt, in the nested {"quantization": {...}} or flat shape.
func (s *Scheme) readModelOpt(top *obj) error {
	q := top
	if nested := top.sub("quantization"); nested != nil {
		q = nested
	}
	if p := top.sub("producer"); p != nil {
		name, ver := p.str("name"), p.str("version")
		s.Producer = strings.TrimSpace(name + " " + ver)
		top.adopt(p)
	}
	if top.err != nil {
		return top.err
	}
	algo := q.str("quant_algo")
	if s.Method == "modelopt" && algo == "" {
		return nil // the other file already said it
	}
	s.Method = "modelopt"
	s.QuantAlgo = strings.ToUpper(algo)
	if g := q.integer("group_size"); g != 0 {
		s.GroupSize = g
	}
	if ex := q.strs("exclude_modules"); ex != nil {
		s.ExcludeModules = ex
	} else if ig := q.strs("ignore"); ig != nil {
		// config.json's form of the list (ModelOpt's convert_hf_config,
		// which vLLM's ModelOpt config also reads)
		s.ExcludeModules = ig
	}
	if kv := q.str("kv_cache_quant_algo"); kv != "" {
		s.KVCache = kv
	}
	if ql := q.sub("quantized_layers"); ql != nil {
		s.QuantizedLayers = map[string]LayerQuant{}
		for name := range ql.m {
			l := ql.sub(name)
			if l == nil {
				ql.fail(name, "want an object")
				break
			}
			s.QuantizedLayers[name] = LayerQuant{QuantAlgo: strings.ToUpper(l.str("quant_algo")), GroupSize: l.integer("group_size")}
			ql.adopt(l)
		}
		q.adopt(ql)
	}
	if q.err != nil {
		return q.err
	}
	if s.QuantAlgo == "" {
		return &ConfigError{File: q.file, Field: q.path + "quant_algo", Msg: "ModelOpt config without quant_algo"}
	}
	if s.Family = modeloptFamily(s.QuantAlgo); s.Family == "" {
		return &UnsupportedError{Method: "modelopt " + s.QuantAlgo}
	}
	if s.Family == FamilyNVFP4 && s.GroupSize == 0 {
		s.GroupSize = 16
	}
	return nil
}

// modeloptFamily is the family of a ModelOpt quant_algo, "" for one this
// reader does not know.
func modeloptFamily(algo string) string {
	switch algo {
	case "NVFP4", "NVFP4_AWQ", "W4A16_NVFP4", "W4A8_NVFP4_FP8":
		return FamilyNVFP4
	case "FP8", "FP8_PER_CHANNEL_PER_TOKEN", "FP8_PB_WO":
		return FamilyFP8
	case "MXFP8":
		return FamilyMXFP8
	case "W4A16_AWQ", "W4A8_AWQ", "INT4_AWQ", "INT8_SQ", "W8A8_SQ":
		return FamilyInt
	case "MIXED_PRECISION":
		return FamilyMixed
	}
	return ""
}

func (s *Scheme) readQuantizationConfig(qc *obj) error {
	method := strings.ToLower(qc.str("quant_method"))
	if qc.err != nil {
		return qc.err
	}
	switch method {
	case "modelopt":
		return s.readModelOpt(qc)
	case "compressed-tensors", "compressed_tensors", "":
		if method == "" && qc.m["config_groups"] == nil && qc.m["format"] == nil {
			return &ConfigError{File: qc.file, Field: "quantization_config.quant_method", Msg: "quantization_config without a quant_method"}
		}
		return s.readCompressedTensors(qc)
	case "fp8":
		s.Method = "fp8"
		s.Family = FamilyFP8
		fmtName := qc.str("fmt")
		s.FP8Format = normalizeFP8(fmtName)
		if fmtName == "" {
			s.FP8Format = "e4m3"
		}
		s.ActivationScheme = qc.str("activation_scheme")
		s.WeightBlockSize = qc.ints("weight_block_size")
		s.Ignore = append(qc.strs("modules_to_not_convert"), qc.strs("ignored_layers")...)
		// GPT-QModel records itself as "quantizer": ["gptqmodel:VERSION"] (a
		// string in some versions); its FP8 export stores inverse scales.
		quantizer := fmt.Sprint(qc.m["quantizer"])
		if strings.Contains(strings.ToLower(quantizer), "gptqmodel") {
			s.InverseFP8Scales = true
		}
		if qc.err != nil {
			return qc.err
		}
		if s.FP8Format == "" {
			return &ConfigError{File: qc.file, Field: "quantization_config.fmt", Msg: fmt.Sprintf("unknown FP8 format %q", fmtName)}
		}
		if b := s.WeightBlockSize; b != nil && (len(b) != 2 || b[0] <= 0 || b[1] <= 0) {
			return &ConfigError{File: qc.file, Field: "quantization_config.weight_block_size", Msg: fmt.Sprintf("want two positive integers, found %v", b)}
		}
		if b := s.WeightBlockSize; b != nil && (b[0] > maxBlock || b[1] > maxBlock) {
			return &ConfigError{File: qc.file, Field: "quantization_config.weight_block_size", Msg: fmt.Sprintf("block %v is larger than 2^31", b)}
		}
		return s.readDynamic(qc, s.dynamicOrder) // GPT-QModel's FP8 export may carry per-module overrides
	case "gptq", "awq":
		s.Method = method
		s.Family = FamilyInt
		s.Bits = qc.integer("bits")
		s.GroupSize = qc.integer("group_size")
		if sym, ok := qc.boolean("sym"); ok {
			s.Symmetric = &sym
		}
		s.DescAct, _ = qc.boolean("desc_act")
		s.CheckpointFormat = strings.ToLower(qc.str("checkpoint_format"))
		if method == "gptq" && s.CheckpointFormat == "" {
			s.CheckpointFormat = "gptq"
		}
		if method == "gptq" {
			switch s.CheckpointFormat {
			case "gptq", "gptq_v2":
			case "gptq_p":
				// GPT-QModel's planar layout (packing.PackGPTQPlanarWeight):
				// zero points as v2 stores them; 2..8 bits, the 2-, 4- and
				// 8-bit words those of gptq/gptq_v2.
			default:
				return &ConfigError{File: qc.file, Field: "quantization_config.checkpoint_format",
					Msg: fmt.Sprintf("unknown GPTQ checkpoint_format %q (want gptq, gptq_v2 or gptq_p): its zero points and packing cannot be assumed", s.CheckpointFormat)}
			}
		}
		if method == "awq" {
			if s.Bits == 0 {
				s.Bits = qc.integer("w_bit")
			}
			if s.GroupSize == 0 {
				s.GroupSize = qc.integer("q_group_size")
			}
			if s.Format = strings.ToLower(qc.str("version")); s.Format == "" {
				s.Format = "gemm"
			}
			if s.Format != "gemm" {
				return &ConfigError{File: qc.file, Field: "quantization_config.version",
					Msg: fmt.Sprintf("AWQ version %q packs its qweight otherwise than gemm (the one quantscope decodes): not read as gemm", s.Format)}
			}
		}
		s.Ignore = qc.strs("modules_to_not_convert")
		if qc.err != nil {
			return qc.err
		}
		if s.CheckpointFormat == "gptq_p" && (s.Bits < 2 || s.Bits > 8) {
			return &ConfigError{File: qc.file, Field: "quantization_config.bits", Msg: fmt.Sprintf("gptq_p bits must be 2..8, found %d", s.Bits)}
		}
		if s.CheckpointFormat != "gptq_p" && s.Bits != 2 && s.Bits != 3 && s.Bits != 4 && s.Bits != 8 {
			return &ConfigError{File: qc.file, Field: "quantization_config.bits", Msg: fmt.Sprintf("%s bits must be 2, 3, 4 or 8, found %d (GPT-QModel writes 5, 6 and 7 bits as checkpoint_format gptq_p)", method, s.Bits)}
		}
		return s.readDynamic(qc, s.dynamicOrder)
	case "mxfp4":
		s.Method = "mxfp4"
		s.Family = FamilyMXFP4
		s.GroupSize = 32
		s.Ignore = qc.strs("modules_to_not_convert")
		return nilIfNone(qc.err)
	}
	return &UnsupportedError{Method: method}
}

func nilIfNone(e *ConfigError) error {
	if e == nil {
		return nil
	}
	return e
}

func (s *Scheme) readCompressedTensors(qc *obj) error {
	s.Method = "compressed-tensors"
	s.Format = strings.ToLower(qc.str("format"))
	s.Version = qc.str("version")
	s.Ignore = qc.strs("ignore")
	if kv := qc.sub("kv_cache_scheme"); kv != nil {
		s.KVCache = fmt.Sprintf("%s%d", kv.str("type"), kv.integer("num_bits"))
		qc.adopt(kv)
	}
	groups := qc.sub("config_groups")
	if qc.err != nil {
		return qc.err
	}
	if groups != nil {
		// In the file's order (a decoded map has none; names the order
		// does not know, if any, after it, sorted).
		names := make([]string, 0, len(groups.m))
		for _, n := range s.groupOrder {
			if _, ok := groups.m[n]; ok && !slices.Contains(names, n) {
				names = append(names, n)
			}
		}
		var rest []string
		for n := range groups.m {
			if !slices.Contains(names, n) {
				rest = append(rest, n)
			}
		}
		slices.Sort(rest)
		names = append(names, rest...)
		for _, n := range names {
			g := groups.sub(n)
			if g == nil {
				return &ConfigError{File: qc.file, Field: "quantization_config.config_groups." + n, Msg: "want an object"}
			}
			cg := ConfigGroup{Name: n, Targets: g.strs("targets"), Format: strings.ToLower(g.str("format"))}
			cg.Weights = readArgs(g, "weights")
			cg.InputActivations = readArgs(g, "input_activations")
			if g.err != nil {
				return g.err
			}
			if w := cg.Weights; w != nil && w.Type == "int" && (w.NumBits < 1 || w.NumBits > 8) {
				return &ConfigError{File: qc.file, Field: g.path + "weights.num_bits", Msg: fmt.Sprintf("rule CT-001: pack-quantized num_bits must be in 1..8, found %d", w.NumBits)}
			}
			s.Groups = append(s.Groups, cg)
		}
	}
	s.Family = ctFamily(s.Format, s.Groups)
	if len(s.Groups) > 0 && s.Groups[0].Weights != nil {
		w := s.Groups[0].Weights
		s.Bits, s.GroupSize = w.NumBits, w.GroupSize
		sym := w.Symmetric
		s.Symmetric = &sym
	}
	return nil
}

func readArgs(g *obj, key string) *QuantArgs {
	a := g.sub(key)
	if a == nil {
		return nil
	}
	qa := &QuantArgs{
		NumBits:        a.integer("num_bits"),
		Type:           strings.ToLower(a.str("type")),
		Strategy:       strings.ToLower(a.str("strategy")),
		GroupSize:      a.integer("group_size"),
		BlockStructure: a.ints("block_structure"),
		Dynamic:        a.m["dynamic"],
		Actorder:       a.m["actorder"],
	}
	qa.Symmetric, _ = a.boolean("symmetric")
	if qa.Type == "" {
		qa.Type = "int"
	}
	switch qa.Strategy {
	case "", "tensor", "channel", "group", "block", "token", "tensor_group", "attn_head":
	default:
		a.fail("strategy", fmt.Sprintf("unknown strategy %q", qa.Strategy))
	}
	g.adopt(a)
	return qa
}

// ctFamily decides the family of a compressed-tensors config from its
// format, or from the groups' formats and weight args for mixed-precision.
func ctFamily(format string, groups []ConfigGroup) string {
	switch format {
	case "nvfp4-pack-quantized":
		return FamilyNVFP4
	case "mxfp4-pack-quantized":
		return FamilyMXFP4
	case "mxfp8-quantized":
		return FamilyMXFP8
	case "float-quantized":
		return FamilyFP8
	case "pack-quantized", "int-quantized", "naive-quantized", "marlin-24":
		return FamilyInt
	}
	seen := map[string]bool{}
	for _, g := range groups {
		f := g.Format
		if f == "" || f == "mixed-precision" {
			f = argsFormat(g.Weights)
		}
		if fam := ctFamily(f, nil); fam != FamilyNone && fam != FamilyMixed {
			seen[fam] = true
		}
	}
	switch len(seen) {
	case 0:
		return FamilyNone
	case 1:
		for f := range seen {
			return f
		}
	}
	return FamilyMixed
}

// argsFormat is the compressed-tensors format implied by weight args alone.
func argsFormat(w *QuantArgs) string {
	if w == nil {
		return ""
	}
	if w.Type == "float" {
		switch {
		case w.NumBits == 4 && w.GroupSize == 32:
			return "mxfp4-pack-quantized"
		case w.NumBits == 4:
			return "nvfp4-pack-quantized"
		case w.NumBits == 8:
			return "float-quantized"
		}
		return ""
	}
	if w.NumBits == 8 {
		return "int-quantized"
	}
	return "pack-quantized"
}

// normalizeFP8 maps the FP8 format spellings people write to one name.
func normalizeFP8(s string) string {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "e4m3", "float8_e4m3", "float8_e4m3fn", "e4m3fn", "f8_e4m3", "fp8_e4m3":
		return "e4m3"
	case "e5m2", "float8_e5m2", "f8_e5m2", "fp8_e5m2":
		return "e5m2"
	case "e4m3fnuz", "float8_e4m3fnuz", "f8_e4m3fnuz":
		return "e4m3fnuz"
	case "e5m2fnuz", "float8_e5m2fnuz", "f8_e5m2fnuz":
		return "e5m2fnuz"
	case "e8m0", "e8m0fnu", "float8_e8m0fnu", "f8_e8m0":
		return "e8m0"
	}
	return ""
}

// NormalizeFP8Format exposes the alias table: "" when s is not an FP8 format.
func NormalizeFP8Format(s string) string { return normalizeFP8(s) }
