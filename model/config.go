// Package model runs a decoder's forward pass over a checkpoint that formats/
// reads: Hugging Face LlamaForCausalLM semantics in float32, over dense
// (F32/F16/BF16) or quantized weights dequantized to float32, or with the
// seven projections of each layer as W4A linears on GPTQ INT4 weights.
//
// The forward is streamed: each projection's tensors are read, used and
// dropped before the next are read, so memory is bounded by one decoder
// layer's weights plus the activations (MemoryBound), whatever the model's
// size. It knows nothing of the command line or of jobs.
package model

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"

	"github.com/quantscope/quantscope/formats/anatomy"
)

// Config is what the Llama forward reads from config.json.
type Config struct {
	Layers, Hidden, Inter   int
	Heads, KVHeads, HeadDim int
	Vocab                   int
	Eps                     float64 // rms_norm_eps
	RopeTheta               float64
	Scaling                 *RopeScaling // nil: plain RoPE
	Tied                    bool         // tie_word_embeddings
	ModelType               string       // model_type (Bias's rules differ by it)
	AttentionBias, MLPBias  bool         // attention_bias, mlp_bias
}

// RopeScaling is rope_scaling of type llama3 (Llama 3.1's frequency bands).
type RopeScaling struct {
	Factor, LowFreqFactor, HighFreqFactor float64
	OriginalMaxPosition                   float64
}

type rawConfig struct {
	ModelType     string          `json:"model_type"`
	Architectures []string        `json:"architectures"`
	Layers        int             `json:"num_hidden_layers"`
	Hidden        int             `json:"hidden_size"`
	Inter         int             `json:"intermediate_size"`
	Heads         int             `json:"num_attention_heads"`
	KVHeads       int             `json:"num_key_value_heads"`
	HeadDim       int             `json:"head_dim"`
	Vocab         int             `json:"vocab_size"`
	Eps           *float64        `json:"rms_norm_eps"`
	RopeTheta     *float64        `json:"rope_theta"`
	RopeScaling   json.RawMessage `json:"rope_scaling"`
	// transformers 5 writes rope_parameters ({"rope_type", "rope_theta",
	// and the type's parameters}) instead of rope_theta and rope_scaling.
	RopeParameters json.RawMessage `json:"rope_parameters"`
	ropeField      string          // where RopeScaling came from, for errors
	Tied           *bool           `json:"tie_word_embeddings"`
	HiddenAct      string          `json:"hidden_act"`
	AttentionBias  bool            `json:"attention_bias"`
	MLPBias        bool            `json:"mlp_bias"`
	TextConfig     *rawConfig      `json:"text_config"`
}

// ParseConfig reads a Llama config.json (a multimodal one's text_config
// when present) and checks what the forward relies on.
func ParseConfig(configJSON []byte) (*Config, error) {
	if len(configJSON) == 0 {
		return nil, fmt.Errorf("config.json: missing; the forward needs the model's shape")
	}
	var r rawConfig
	if err := json.Unmarshal(configJSON, &r); err != nil {
		return nil, fmt.Errorf("config.json: %w", err)
	}
	if r.TextConfig != nil {
		r = *r.TextConfig
	}
	if !anatomy.IsLlama(r.ModelType, r.Architectures) {
		return nil, fmt.Errorf("config.json: model_type %q (architectures %v): the forward runs Llama decoders (LlamaForCausalLM) only", r.ModelType, r.Architectures)
	}
	if r.HiddenAct != "" && r.HiddenAct != "silu" {
		return nil, fmt.Errorf("config.json: hidden_act %q: the Llama MLP is SwiGLU (silu)", r.HiddenAct)
	}
	c := &Config{Layers: r.Layers, Hidden: r.Hidden, Inter: r.Inter, Heads: r.Heads, KVHeads: r.KVHeads, HeadDim: r.HeadDim, Vocab: r.Vocab, Eps: 1e-6, RopeTheta: 10000,
		ModelType: r.ModelType, AttentionBias: r.AttentionBias, MLPBias: r.MLPBias}
	if r.Eps != nil {
		c.Eps = *r.Eps
	}
	if err := r.ropeParameters(); err != nil {
		return nil, err
	}
	if r.RopeTheta != nil {
		c.RopeTheta = *r.RopeTheta
	}
	if r.Tied != nil {
		c.Tied = *r.Tied
	}
	if c.KVHeads == 0 {
		c.KVHeads = c.Heads
	}
	if c.HeadDim == 0 && c.Heads > 0 {
		c.HeadDim = c.Hidden / c.Heads
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"num_hidden_layers", c.Layers}, {"hidden_size", c.Hidden}, {"intermediate_size", c.Inter}, {"num_attention_heads", c.Heads}, {"num_key_value_heads", c.KVHeads}, {"head_dim", c.HeadDim}, {"vocab_size", c.Vocab}} {
		if f.v <= 0 || f.v > 1<<24 {
			return nil, fmt.Errorf("config.json: %s is %d, want a positive size", f.name, f.v)
		}
	}
	if c.Heads%c.KVHeads != 0 {
		return nil, fmt.Errorf("config.json: num_attention_heads %d is not a multiple of num_key_value_heads %d", c.Heads, c.KVHeads)
	}
	if c.HeadDim%2 != 0 {
		return nil, fmt.Errorf("config.json: head_dim %d is odd; rotary embeddings rotate pairs", c.HeadDim)
	}
	if !(c.RopeTheta > 0) {
		return nil, fmt.Errorf("config.json: rope_theta %v: want a positive value", c.RopeTheta)
	}
	// The norm adds eps to the mean square in float32.
	if e := float32(c.Eps); !(e > 0) || math.IsInf(float64(e), 0) {
		return nil, fmt.Errorf("config.json: rms_norm_eps %v is %v as float32, which the norm adds to the mean square: want it finite and positive", c.Eps, e)
	}
	if err := r.scaling(c); err != nil {
		return nil, err
	}
	if err := c.checkInvFreq(); err != nil {
		return nil, err
	}
	return c, nil
}

// ropeParameters reads transformers 5's rope_parameters, which replaces
// rope_theta and rope_scaling (its theta inside it, its type and the
// type's parameters as rope_scaling held them): when present it is what
// the model uses.
func (r *rawConfig) ropeParameters() error {
	if len(r.RopeParameters) == 0 || string(r.RopeParameters) == "null" {
		return nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(r.RopeParameters, &m); err != nil {
		return fmt.Errorf("config.json: rope_parameters: %w", err)
	}
	for k, v := range m {
		if len(v) > 0 && v[0] == '{' {
			return fmt.Errorf("config.json: rope_parameters: %q holds its own parameters (one set a layer type): the Llama forward has one RoPE for every layer", k)
		}
	}
	if raw, ok := m["rope_theta"]; ok {
		var theta float64
		if err := json.Unmarshal(raw, &theta); err != nil {
			return fmt.Errorf("config.json: rope_parameters.rope_theta: %w", err)
		}
		r.RopeTheta = &theta
	}
	_, typed := m["rope_type"]
	if _, old := m["type"]; typed || old {
		r.RopeScaling, r.ropeField = r.RopeParameters, "rope_parameters"
	}
	return nil
}

func (r *rawConfig) ropeScalingField() string {
	if r.ropeField != "" {
		return r.ropeField
	}
	return "rope_scaling"
}

// scaling reads rope_scaling into c.Scaling.
func (r *rawConfig) scaling(c *Config) error {
	if len(r.RopeScaling) > 0 && string(r.RopeScaling) != "null" {
		var s struct {
			Type, RopeType                        string
			Factor, LowFreqFactor, HighFreqFactor float64
			OriginalMaxPosition                   float64 `json:"original_max_position_embeddings"`
		}
		var m map[string]any
		if err := json.Unmarshal(r.RopeScaling, &m); err != nil {
			return fmt.Errorf("config.json: %s: %w", r.ropeScalingField(), err)
		}
		get := func(k string) float64 { f, _ := m[k].(float64); return f }
		s.Type, _ = m["rope_type"].(string)
		if s.Type == "" {
			s.Type, _ = m["type"].(string)
		}
		s.Factor, s.LowFreqFactor, s.HighFreqFactor, s.OriginalMaxPosition = get("factor"), get("low_freq_factor"), get("high_freq_factor"), get("original_max_position_embeddings")
		switch s.Type {
		case "default":
		case "llama3":
			if !(s.Factor > 0) || !(s.LowFreqFactor > 0) || !(s.HighFreqFactor > s.LowFreqFactor) || !(s.OriginalMaxPosition > 0) {
				return fmt.Errorf("config.json: %s llama3 needs factor, low_freq_factor < high_freq_factor and original_max_position_embeddings, got %s", r.ropeScalingField(), r.RopeScaling)
			}
			c.Scaling = &RopeScaling{Factor: s.Factor, LowFreqFactor: s.LowFreqFactor, HighFreqFactor: s.HighFreqFactor, OriginalMaxPosition: s.OriginalMaxPosition}
		default:
			return fmt.Errorf("config.json: %s type %q: the forward implements llama3 (and none)", r.ropeScalingField(), s.Type)
		}
	}
	return nil
}

// InvFreq is the rotary inverse frequencies, HF's
// 1/(theta^(2i/d)) in float32, then llama3's band scaling when configured
// (_compute_llama3_parameters): wavelengths longer than
// original/low_freq_factor divide by factor, shorter than
// original/high_freq_factor stay, the band between is smoothed.
func (c *Config) InvFreq() []float32 {
	d := c.HeadDim
	f := make([]float32, d/2)
	for i := range f {
		e := float32(2*i) / float32(d)
		f[i] = float32(1 / float32(math.Pow(c.RopeTheta, float64(e))))
	}
	s := c.Scaling
	if s == nil {
		return f
	}
	lowWave := s.OriginalMaxPosition / s.LowFreqFactor
	highWave := s.OriginalMaxPosition / s.HighFreqFactor
	for i, v := range f {
		inv := float64(v)
		wave := 2 * math.Pi / inv
		switch {
		case wave < highWave:
			// high frequency: unchanged
		case wave > lowWave:
			inv /= s.Factor
		default:
			smooth := (s.OriginalMaxPosition/wave - s.LowFreqFactor) / (s.HighFreqFactor - s.LowFreqFactor)
			inv = (1-smooth)*inv/s.Factor + smooth*inv
		}
		f[i] = float32(inv)
	}
	return f
}

// checkInvFreq refuses a rope_theta or rope_scaling whose inverse
// frequencies are not all finite and positive in float32: an infinite one
// makes every logit NaN, a zero one leaves its pair unrotated.
func (c *Config) checkInvFreq() error {
	plain := &Config{HeadDim: c.HeadDim, RopeTheta: c.RopeTheta}
	for i, v := range plain.InvFreq() {
		if !finitePositive(v) {
			return fmt.Errorf("config.json: rope_theta %v gives inverse frequency %d (1/theta^(%d/%d)) %v in float32: want every one finite and positive", c.RopeTheta, i, 2*i, c.HeadDim, v)
		}
	}
	if c.Scaling == nil {
		return nil
	}
	for i, v := range c.InvFreq() {
		if !finitePositive(v) {
			s := c.Scaling
			return fmt.Errorf("config.json: rope_scaling llama3 (factor %v, low_freq_factor %v, high_freq_factor %v, original_max_position_embeddings %v) scales inverse frequency %d to %v in float32: want every one finite and positive", s.Factor, s.LowFreqFactor, s.HighFreqFactor, s.OriginalMaxPosition, i, v)
		}
	}
	return nil
}

func finitePositive(v float32) bool { return v > 0 && !math.IsInf(float64(v), 1) }

// Bias says whether Hugging Face's model class for the config's model_type
// gives a decoder projection ("self_attn.q_proj" … "mlp.down_proj") a bias,
// and the rule that decides it: Qwen2's q/k/v_proj always, its o_proj and
// MLP never; Mistral's none; Llama's attention projections when
// attention_bias, its MLP's when mlp_bias (both default false). No LM head
// has one, nor a tied embedding.
func (c *Config) Bias(projection string) (bool, string) {
	attn := strings.HasPrefix(projection, "self_attn.")
	switch c.ModelType {
	case "qwen2":
		return attn && projection != "self_attn.o_proj", "model_type qwen2 gives q_proj, k_proj and v_proj a bias and no other projection one"
	case "mistral":
		return false, "model_type mistral gives no projection a bias"
	}
	if attn {
		return c.AttentionBias, fmt.Sprintf("config.json's attention_bias is %v", c.AttentionBias)
	}
	return c.MLPBias, fmt.Sprintf("config.json's mlp_bias is %v", c.MLPBias)
}
