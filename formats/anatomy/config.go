package anatomy

import (
	"encoding/json"
	"fmt"
)

// Model is the shape of a decoder as config.json states it: what the layer
// map needs to tell decoder layers from extra ones, and what a KV-cache
// estimate needs. Zero means "not stated".
type Model struct {
	ModelType         string   `json:"model_type"`
	Architectures     []string `json:"architectures"`
	NumHiddenLayers   int      `json:"num_hidden_layers"`
	HiddenSize        int      `json:"hidden_size"`
	NumAttentionHeads int      `json:"num_attention_heads"`
	NumKeyValueHeads  int      `json:"num_key_value_heads"`
	HeadDim           int      `json:"head_dim"`
	VocabSize         int      `json:"vocab_size"`
	MaxPosition       int      `json:"max_position_embeddings"`
	TieWordEmbeddings bool     `json:"tie_word_embeddings"`
	TorchDType        string   `json:"torch_dtype"`
	DType             string   `json:"dtype"` // newer transformers write dtype instead of torch_dtype
	// MLA (DeepSeek V2/V3): the KV cache holds kv_lora_rank + qk_rope_head_dim per token per layer.
	KVLoraRank     int `json:"kv_lora_rank"`
	QKRopeHeadDim  int `json:"qk_rope_head_dim"`
	QKNopeHeadDim  int `json:"qk_nope_head_dim"`
	VHeadDim       int `json:"v_head_dim"`
	QLoraRank      int `json:"q_lora_rank"`
	NumNextNLayers int `json:"num_nextn_predict_layers"` // DeepSeek's MTP layers past num_hidden_layers
	// MoE.
	NRoutedExperts   int `json:"n_routed_experts"`
	NumLocalExperts  int `json:"num_local_experts"` // Mixtral, gpt-oss
	NumExperts       int `json:"num_experts"`       // Qwen MoE
	NSharedExperts   int `json:"n_shared_experts"`
	FirstKDenseLayer int `json:"first_k_dense_replace"`
	// Sliding windows: a window size, and which layers use it (layer_types of
	// "sliding_attention" / "full_attention"; or use_sliding_window with
	// max_window_layers as Qwen 2 writes it).
	SlidingWindow   *int     `json:"sliding_window"`
	LayerTypes      []string `json:"layer_types"`
	UseSlidingWin   *bool    `json:"use_sliding_window"`
	MaxWindowLayers int      `json:"max_window_layers"`
	// Quantization the runtime reads from config.json (kv_cache_scheme of
	// compressed-tensors lives here).
	QuantizationConfig json.RawMessage `json:"quantization_config"`
}

// ParseModel reads config.json. Multimodal configs nest the decoder under
// text_config (or llm_config); its fields win over the outer ones.
func ParseModel(configJSON []byte) (*Model, error) {
	if len(configJSON) == 0 {
		return &Model{}, nil
	}
	var outer struct {
		Model
		TextConfig *Model `json:"text_config"`
		LLMConfig  *Model `json:"llm_config"`
	}
	if err := json.Unmarshal(configJSON, &outer); err != nil {
		return nil, fmt.Errorf("config.json: %w", err)
	}
	m := outer.Model
	inner := outer.TextConfig
	if inner == nil {
		inner = outer.LLMConfig
	}
	if inner != nil {
		q := m.QuantizationConfig
		m = *inner
		if len(m.QuantizationConfig) == 0 {
			m.QuantizationConfig = q
		}
	}
	if m.NumKeyValueHeads == 0 {
		m.NumKeyValueHeads = m.NumAttentionHeads // multi-head attention: one KV head per head
	}
	if m.HeadDim == 0 && m.NumAttentionHeads > 0 {
		m.HeadDim = m.HiddenSize / m.NumAttentionHeads
	}
	return &m, nil
}

// Experts is the number of routed experts per MoE layer (0 for a dense model).
func (m *Model) Experts() int {
	for _, n := range []int{m.NRoutedExperts, m.NumLocalExperts, m.NumExperts} {
		if n > 0 {
			return n
		}
	}
	return 0
}

// DTypeName is the model's compute dtype as config.json names it.
func (m *Model) DTypeName() string {
	if m.DType != "" {
		return m.DType
	}
	return m.TorchDType
}

// MLA says whether attention is DeepSeek's multi-head latent attention.
func (m *Model) MLA() bool { return m.KVLoraRank > 0 }

// SlidingLayer says whether decoder layer i attends over a sliding window
// (its KV cache then holds at most Window() tokens).
func (m *Model) SlidingLayer(i int) bool {
	if m.SlidingWindow == nil || *m.SlidingWindow <= 0 {
		return false
	}
	if len(m.LayerTypes) > 0 {
		return i < len(m.LayerTypes) && m.LayerTypes[i] == "sliding_attention"
	}
	if m.UseSlidingWin != nil {
		// Qwen 2: layers from max_window_layers on use the window.
		return *m.UseSlidingWin && i >= m.MaxWindowLayers
	}
	return true // Mistral-style: a window and no per-layer list means every layer
}

// Window is the sliding window in tokens (0 when there is none).
func (m *Model) Window() int {
	if m.SlidingWindow == nil {
		return 0
	}
	return *m.SlidingWindow
}
