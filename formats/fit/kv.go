package fit

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"math/bits"
	"slices"
	"strings"

	"github.com/quantscope/quantscope/formats/anatomy"
)

// kvLayer is one layer's KV cache: bytes per token at TP 1, and the most
// tokens it holds (0: the whole context).
type kvLayer struct {
	perToken uint64
	cap      int
}

// kvPlan is the KV cache of a model: its layers, the element size, and how
// tensor parallelism divides it.
type kvPlan struct {
	attention string // gqa | mha | mla
	dtype     string
	elem      uint64 // bytes an element
	layers    []kvLayer
	kvHeads   int // GQA/MHA: the KV heads; 0 for MLA
	headDim   int
	latent    int // MLA: kv_lora_rank + qk_rope_head_dim
	sliding   int // layers with a window
	window    int
}

// perGPUToken is one layer's per-token bytes on one GPU of a TP-n group:
// a GQA layer caches ceil(kv_heads/n) heads a GPU when kv_heads ≥ n, else
// one head (each KV head copied on n/kv_heads GPUs); MLA's latent is
// cached whole on every GPU.
func (p *kvPlan) perGPUToken(l kvLayer, n int) uint64 {
	if p.attention == "mla" {
		return l.perToken
	}
	h := 1
	if p.kvHeads >= n {
		h = (p.kvHeads + n - 1) / n
	}
	return 2 * uint64(h) * uint64(p.headDim) * p.elem
}

// bytes is the cache for ctx tokens × batch sequences on one GPU of a TP-n
// group (saturating at the largest uint64 rather than wrapping).
func (p *kvPlan) bytes(n, ctx, batch int) uint64 {
	var total uint64
	for _, l := range p.layers {
		t := ctx
		if l.cap > 0 && l.cap < t {
			t = l.cap
		}
		total = addSat(total, mulSat(p.perGPUToken(l, n), uint64(t)))
	}
	return mulSat(total, uint64(batch))
}

func mulSat(a, b uint64) uint64 {
	if hi, lo := bits.Mul64(a, b); hi == 0 {
		return lo
	}
	return math.MaxUint64
}

func addSat(a, b uint64) uint64 {
	if s, c := bits.Add64(a, b, 0); c == 0 {
		return s
	}
	return math.MaxUint64
}

// Bounds on what config.json may state, so a hostile config cannot make the
// estimate allocate or loop without limit.
const (
	maxLayers  = 4096
	maxHeads   = 1 << 16
	maxHeadDim = 1 << 16
	maxLatent  = 1 << 20
)

// checkModel rejects config.json values no model has.
func checkModel(m *anatomy.Model) error {
	for _, f := range []struct {
		name  string
		v, hi int
	}{{"num_hidden_layers", m.NumHiddenLayers, maxLayers}, {"num_attention_heads", m.NumAttentionHeads, maxHeads},
		{"num_key_value_heads", m.NumKeyValueHeads, maxHeads}, {"head_dim", m.HeadDim, maxHeadDim},
		{"kv_lora_rank", m.KVLoraRank, maxLatent}, {"qk_rope_head_dim", m.QKRopeHeadDim, maxLatent}} {
		if f.v < 0 || f.v > f.hi {
			return fmt.Errorf("config.json: field %s: rule fit-config: %d is outside 0..%d", f.name, f.v, f.hi)
		}
	}
	return nil
}

// perToken sums the per-token bytes of every layer (what a token costs
// while the context is within every window).
func (p *kvPlan) perToken(n int) uint64 {
	var total uint64
	for _, l := range p.layers {
		total += p.perGPUToken(l, n)
	}
	return total
}

// dtypeBytes maps config.json's torch_dtype to an element size.
func dtypeBytes(name string) (string, uint64, bool) {
	switch strings.ToLower(name) {
	case "bfloat16", "bf16":
		return "bf16", 2, true
	case "float16", "fp16", "half", "f16":
		return "fp16", 2, true
	case "float32", "fp32", "float", "f32":
		return "fp32", 4, true
	}
	return "", 0, false
}

// kvDeclared reads the KV-cache quantization a checkpoint declares:
// config.json's quantization_config.kv_cache_quant_algo, else its
// kv_cache_scheme (compressed-tensors), else hf_quant_config.json's
// kv_cache_quant_algo (ModelOpt): config.json first, as vLLM reads it and as
// inspect reads the scheme (a config-files-disagree finding says where the
// two files differ). It returns the dtype name, its size, and where it
// was read; "" when nothing is declared. A declaration it does not know is
// returned with size 0.
func kvDeclared(m *anatomy.Model, hfQuant []byte) (name string, elem uint64, from string, err error) {
	if len(m.QuantizationConfig) > 0 && string(m.QuantizationConfig) != "null" {
		var q struct {
			KV     *string `json:"kv_cache_quant_algo"`
			Scheme *struct {
				NumBits int    `json:"num_bits"`
				Type    string `json:"type"`
			} `json:"kv_cache_scheme"`
		}
		if err := json.Unmarshal(m.QuantizationConfig, &q); err != nil {
			return "", 0, "", fmt.Errorf("config.json: field quantization_config: %w", err)
		}
		if q.KV != nil && *q.KV != "" {
			n, e := algoBytes(*q.KV)
			return n, e, "config.json quantization_config.kv_cache_quant_algo " + *q.KV, nil
		}
		if s := q.Scheme; s != nil {
			from := fmt.Sprintf("config.json quantization_config.kv_cache_scheme (%s, num_bits %d)", s.Type, s.NumBits)
			switch {
			case s.NumBits == 8 && s.Type == "int":
				return "int8", 1, from, nil
			case s.NumBits == 8:
				return "fp8", 1, from, nil
			case s.NumBits == 16:
				return "fp16", 2, from, nil
			}
			return fmt.Sprintf("%s%d", s.Type, s.NumBits), 0, from, nil
		}
	}
	if len(hfQuant) > 0 {
		var h struct {
			Quantization struct {
				KV *string `json:"kv_cache_quant_algo"`
			} `json:"quantization"`
			KV *string `json:"kv_cache_quant_algo"`
		}
		if err := json.Unmarshal(hfQuant, &h); err != nil {
			return "", 0, "", fmt.Errorf("hf_quant_config.json: %w", err)
		}
		kv := h.Quantization.KV
		if kv == nil {
			kv = h.KV
		}
		if kv != nil && *kv != "" {
			n, e := algoBytes(*kv)
			return n, e, "hf_quant_config.json kv_cache_quant_algo " + *kv, nil
		}
	}
	return "", 0, "", nil
}

func algoBytes(algo string) (string, uint64) {
	switch strings.ToUpper(algo) {
	case "FP8", "FP8_E4M3", "FP8_E5M2", "FP8_INC": // vLLM's --kv-cache-dtype names too
		return "fp8", 1
	case "INT8":
		return "int8", 1
	}
	return strings.ToLower(algo), 0
}

// planKV sizes the KV cache from config.json (and hf_quant_config.json for
// its dtype). extra is the number of layers past num_hidden_layers to add
// (MTP layers, with --mtp); override is a dtype asked on the command line.
func planKV(m *anatomy.Model, sliding func(int) bool, hfQuant []byte, extra int, override string, notes *[]string) (*kvPlan, error) {
	if m.NumHiddenLayers <= 0 {
		return nil, fmt.Errorf("config.json: field num_hidden_layers: rule fit-config: not stated, so the KV cache cannot be sized")
	}
	p := &kvPlan{}
	// The element size: asked, else declared, else the model dtype.
	modelName, modelElem, modelKnown := dtypeBytes(m.DTypeName())
	switch {
	case override != "":
		n, e, ok := dtypeBytes(override)
		if !ok {
			n, e = algoBytes(override)
		}
		if e == 0 {
			return nil, fmt.Errorf("--kv-dtype %q: want bf16, fp16, fp32, fp8 or int8", override)
		}
		p.dtype, p.elem = n, e
		*notes = append(*notes, fmt.Sprintf("KV cache %s (%d byte(s) an element), as asked with --kv-dtype", n, e))
	default:
		n, e, from, err := kvDeclared(m, hfQuant)
		if err != nil {
			return nil, err
		}
		switch {
		case n != "" && e > 0:
			p.dtype, p.elem = n, e
			*notes = append(*notes, fmt.Sprintf("KV cache %s (%d byte an element), as %s declares; a runtime setting (vLLM --kv-cache-dtype) can override it", n, e, from))
		case modelKnown:
			p.dtype, p.elem = modelName, modelElem
			lead := "no KV-cache quantization declared"
			if n != "" {
				lead = fmt.Sprintf("%s is not a KV dtype this estimate knows", from)
			}
			*notes = append(*notes, fmt.Sprintf("%s: KV cache in the model dtype %s (%d bytes an element, config.json %q)", lead, modelName, modelElem, m.DTypeName()))
		default:
			p.dtype, p.elem = "bf16", 2
			*notes = append(*notes, fmt.Sprintf("no KV-cache quantization declared and config.json states no dtype (%q): KV cache assumed bf16, 2 bytes an element", m.DTypeName()))
		}
	}
	var perToken uint64
	switch {
	case m.MLA():
		if m.QKRopeHeadDim <= 0 {
			return nil, fmt.Errorf("config.json: field qk_rope_head_dim: rule fit-config: MLA (kv_lora_rank %d) without qk_rope_head_dim", m.KVLoraRank)
		}
		p.attention = "mla"
		p.latent = m.KVLoraRank + m.QKRopeHeadDim
		perToken = uint64(p.latent) * p.elem
		*notes = append(*notes, fmt.Sprintf("MLA: one latent of kv_lora_rank + qk_rope_head_dim = %d + %d = %d elements a layer a token (not ×2 for K and V), cached whole on every GPU under tensor parallelism, as vLLM does",
			m.KVLoraRank, m.QKRopeHeadDim, p.latent))
	default:
		if m.NumKeyValueHeads <= 0 || m.HeadDim <= 0 {
			return nil, fmt.Errorf("config.json: field num_key_value_heads/head_dim: rule fit-config: neither stated nor derivable (num_attention_heads %d, hidden_size %d)", m.NumAttentionHeads, m.HiddenSize)
		}
		p.attention = "gqa"
		if m.NumKeyValueHeads == m.NumAttentionHeads {
			p.attention = "mha"
		}
		p.kvHeads, p.headDim = m.NumKeyValueHeads, m.HeadDim
		perToken = 2 * uint64(p.kvHeads) * uint64(p.headDim) * p.elem
	}
	p.window = m.Window()
	stateful := map[string]int{}
	for i := range m.NumHiddenLayers {
		if !m.CachesKV(i) {
			stateful[m.LayerType(i)]++
			continue
		}
		l := kvLayer{perToken: perToken}
		if sliding(i) {
			l.cap = p.window
			p.sliding++
		}
		p.layers = append(p.layers, l)
	}
	for range extra {
		p.layers = append(p.layers, kvLayer{perToken: perToken})
	}
	if p.sliding > 0 {
		*notes = append(*notes, fmt.Sprintf("%d of %d decoder layers attend over a sliding window of %d tokens: their cache holds at most %d tokens a sequence "+
			"(while a prompt is prefilled vLLM keeps up to the window plus the step's token budget for them)",
			p.sliding, m.NumHiddenLayers, p.window, p.window))
	}
	for _, t := range slices.Sorted(maps.Keys(stateful)) {
		*notes = append(*notes, fmt.Sprintf("%d of %d decoder layers are %s layers: no KV cache; their fixed-size recurrent state is not counted",
			stateful[t], m.NumHiddenLayers, t))
	}
	return p, nil
}

// slidingLayers says which decoder layers use the sliding window: what
// anatomy.Model.SlidingLayer says, except for configs it reads as "every
// layer" that are not: a sliding_window_pattern N (every Nth layer attends
// globally: layer i slides unless (i+1) % N == 0), stated or, for Gemma 3
// and Cohere 2 configs that leave it out, transformers' default (6, 4); and
// Gemma 2, whose layers alternate (even layers slide); each when no
// layer_types says so explicitly.
func slidingLayers(config []byte, m *anatomy.Model) (func(int) bool, string) {
	type gemma struct {
		Pattern int `json:"sliding_window_pattern"`
	}
	var c struct {
		gemma
		TextConfig *gemma `json:"text_config"`
	}
	if m.Window() <= 0 || len(m.LayerTypes) > 0 || json.Unmarshal(config, &c) != nil {
		return m.SlidingLayer, ""
	}
	g := c.gemma
	if c.TextConfig != nil {
		g = *c.TextConfig
	}
	from := "sliding_window_pattern"
	if g.Pattern <= 0 {
		// transformers' defaults: Gemma3TextConfig's 6, Cohere2Config's 4
		switch m.ModelType {
		case "gemma3_text", "gemma3":
			g.Pattern, from = 6, "Gemma 3's default sliding_window_pattern"
		case "cohere2":
			g.Pattern, from = 4, "Cohere 2's default sliding_window_pattern"
		}
	}
	switch {
	case g.Pattern > 0:
		return func(i int) bool { return (i+1)%g.Pattern != 0 },
			fmt.Sprintf("%s %d: one layer in %d attends over the whole context", from, g.Pattern, g.Pattern)
	case m.ModelType == "gemma2":
		return func(i int) bool { return i%2 == 0 }, "Gemma 2: even layers use the sliding window, odd layers the whole context"
	}
	return m.SlidingLayer, ""
}
