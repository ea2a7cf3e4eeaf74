package anatomy

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
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
	// Hybrids with linear attention (Qwen3-Next, Qwen3.5) that state no
	// layer_types: layer i is full attention when (i+1) % interval == 0.
	FullAttentionInterval int `json:"full_attention_interval"`
	// Quantization the runtime reads from config.json (kv_cache_scheme of
	// compressed-tensors lives here).
	QuantizationConfig json.RawMessage `json:"quantization_config"`
	// Other spellings of the KV heads (vLLM's get_total_num_kv_heads reads
	// them all): Falcon's num_kv_heads (with new_decoder_architecture) and
	// multi_query (one KV head), n_head_kv, ChatGLM's multi_query_group_num;
	// and GPT-2/Falcon-style n_layer, n_head, n_embd.
	NumKVHeads         intOrList `json:"num_kv_heads"` // OpenELM writes one a layer: not read then
	NHeadKV            int       `json:"n_head_kv"`
	MultiQueryGroupNum int       `json:"multi_query_group_num"`
	MultiQuery         bool      `json:"multi_query"`
	NewDecoderArch     bool      `json:"new_decoder_architecture"`
	NLayer             int       `json:"n_layer"`
	NHead              int       `json:"n_head"`
	NEmbd              int       `json:"n_embd"`
	NPositions         int       `json:"n_positions"`
}

// familyDefaults is what transformers' config class of a model type fills
// in for a field config.json leaves out, for the types whose checkpoints
// rely on it: Gemma 3's text config (Gemma3TextConfig) — multimodal Gemma 3
// repos state little more than the sizes under text_config.
func familyDefaults(modelType string) Model {
	switch modelType {
	case "gemma3_text":
		w := 4096
		return Model{ModelType: modelType, VocabSize: 262208, HiddenSize: 2304, NumHiddenLayers: 26, NumAttentionHeads: 8,
			NumKeyValueHeads: 4, HeadDim: 256, MaxPosition: 131072, SlidingWindow: &w, TieWordEmbeddings: true}
	}
	return Model{ModelType: modelType}
}

// textModelType is the model type of the decoder a multimodal config of
// type outer nests without naming it.
func textModelType(outer string) string {
	if outer == "gemma3" {
		return "gemma3_text"
	}
	return ""
}

// ParseModel reads config.json. Multimodal configs nest the decoder under
// text_config (or llm_config): its fields are the model's, each one it
// leaves out taking its family's default (familyDefaults), and the dtype,
// the context length and the quantization config the wrapper's when the
// decoder states none.
func ParseModel(configJSON []byte) (*Model, error) {
	if len(configJSON) == 0 {
		return &Model{}, nil
	}
	var outer struct {
		Model
		TextConfig json.RawMessage `json:"text_config"`
		LLMConfig  json.RawMessage `json:"llm_config"`
	}
	if err := json.Unmarshal(configJSON, &outer); err != nil {
		return nil, fmt.Errorf("config.json: %w", err)
	}
	inner, field := outer.TextConfig, "text_config"
	if isNull(inner) {
		inner, field = outer.LLMConfig, "llm_config"
	}
	var m Model
	if isNull(inner) {
		m = familyDefaults(outer.ModelType)
		if err := json.Unmarshal(configJSON, &m); err != nil {
			return nil, fmt.Errorf("config.json: %w", err)
		}
	} else {
		var peek struct {
			ModelType string `json:"model_type"`
		}
		if err := json.Unmarshal(inner, &peek); err != nil {
			return nil, fmt.Errorf("config.json: %s: %w", field, err)
		}
		if peek.ModelType == "" {
			peek.ModelType = textModelType(outer.ModelType)
		}
		m = familyDefaults(peek.ModelType)
		if err := json.Unmarshal(inner, &m); err != nil {
			return nil, fmt.Errorf("config.json: %s: %w", field, err)
		}
		if m.TorchDType == "" && m.DType == "" {
			m.TorchDType, m.DType = outer.TorchDType, outer.DType
		}
		if m.MaxPosition == 0 {
			m.MaxPosition = outer.MaxPosition
		}
		if len(m.QuantizationConfig) == 0 {
			m.QuantizationConfig = outer.QuantizationConfig
		}
	}
	if m.NumHiddenLayers == 0 {
		m.NumHiddenLayers = m.NLayer
	}
	if m.NumAttentionHeads == 0 {
		m.NumAttentionHeads = m.NHead
	}
	if m.HiddenSize == 0 {
		m.HiddenSize = m.NEmbd
	}
	if m.MaxPosition == 0 {
		m.MaxPosition = m.NPositions
	}
	if m.NumKeyValueHeads == 0 {
		m.NumKeyValueHeads = m.kvHeadsAlias()
	}
	if m.NumKeyValueHeads == 0 {
		m.NumKeyValueHeads = m.NumAttentionHeads // multi-head attention: one KV head per head
	}
	if m.HeadDim == 0 && m.NumAttentionHeads > 0 {
		m.HeadDim = m.HiddenSize / m.NumAttentionHeads
	}
	return &m, nil
}

func isNull(raw json.RawMessage) bool {
	return len(raw) == 0 || string(raw) == "null"
}

// kvHeadsAlias is the KV heads under another name, in the order vLLM's
// get_total_num_kv_heads reads them (0: none stated). multi_query means one
// KV head (GPTBigCode/StarCoder, Falcon), except in Falcon's new decoder
// architecture, which states num_kv_heads.
func (m *Model) kvHeadsAlias() int {
	falcon := m.ModelType == "falcon" || m.ModelType == "RefinedWeb" || m.ModelType == "RefinedWebModel"
	if m.MultiQuery && !(falcon && m.NewDecoderArch) {
		return 1
	}
	for _, n := range []int{m.NHeadKV, int(m.NumKVHeads), m.MultiQueryGroupNum} {
		if n > 0 {
			return n
		}
	}
	return 0
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

// LayerType is decoder layer i's entry in layer_types, or what
// full_attention_interval implies ("linear_attention" / "full_attention"),
// or "" when the config says neither.
func (m *Model) LayerType(i int) string {
	switch {
	case i < len(m.LayerTypes):
		return m.LayerTypes[i]
	case len(m.LayerTypes) == 0 && m.FullAttentionInterval > 0:
		if (i+1)%m.FullAttentionInterval == 0 {
			return "full_attention"
		}
		return "linear_attention"
	}
	return ""
}

// CachesKV says whether decoder layer i keeps a KV cache: every layer,
// except those its LayerType names as something other than attention
// (Qwen3-Next's linear_attention, a hybrid's mamba or conv layers), which
// keep a fixed-size state instead.
func (m *Model) CachesKV(i int) bool {
	t := m.LayerType(i)
	return t == "" || strings.HasSuffix(t, "attention") && t != "linear_attention"
}

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

// intOrList is a config integer that some models write as one value a
// layer (a JSON list): the list reads as 0, not stated, rather than failing
// the whole config.
type intOrList int

func (v *intOrList) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '[' {
		*v = 0
		return nil
	}
	var n int
	if err := json.Unmarshal(b, &n); err != nil {
		return err
	}
	*v = intOrList(n)
	return nil
}

// IsLlama says whether a config describes a Llama decoder, the one
// architecture quantscope's forward runs: model_type "llama" or the
// LlamaForCausalLM architecture.
func IsLlama(modelType string, architectures []string) bool {
	return modelType == "llama" || slices.Contains(architectures, "LlamaForCausalLM")
}

// LlamaProjections are the seven linears of a Llama decoder layer, under
// model.layers.N, in the order the forward runs them: the modules its W4A
// path reads as GPTQ INT4. Callers must not change the slice.
var LlamaProjections = []string{
	"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
	"mlp.gate_proj", "mlp.up_proj", "mlp.down_proj",
}
