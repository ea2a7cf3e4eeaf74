package fit

import (
	"strings"
	"testing"
)

// Real configs whose KV cache the plain GQA reading gets wrong: the figures
// are worked out here by hand from the layer counts transformers and vLLM
// derive (2 for K and V × KV heads × head_dim × 2 bytes a bf16 element, per
// layer per token).
func TestKVModelFamilies(t *testing.T) {
	const ctx = 131072
	cases := []struct {
		name, config     string
		layers, sliding  int
		perToken, kv     uint64
		note             string // a piece of one note
		maxContextAtMost int
	}{
		// google/gemma-3-27b-it: the decoder under text_config with no
		// sliding_window_pattern (transformers' default 6: layers 5, 11, …,
		// 59 global, 10 of 62), the dtype only in the wrapper, the context
		// limit Gemma3TextConfig's default 131072.
		{"gemma-3-27b", `{"architectures":["Gemma3ForConditionalGeneration"],"model_type":"gemma3","torch_dtype":"bfloat16",
			"text_config":{"head_dim":128,"hidden_size":5376,"intermediate_size":21504,"model_type":"gemma3_text","num_attention_heads":32,
			"num_hidden_layers":62,"num_key_value_heads":16,"query_pre_attn_scalar":168,"rope_scaling":{"factor":8.0,"rope_type":"linear"},"sliding_window":1024},
			"vision_config":{"hidden_size":1152,"num_hidden_layers":27,"model_type":"siglip_vision_model"}}`,
			62, 52, 62 * 2 * 16 * 128 * 2, (10*ctx + 52*1024) * 2 * 16 * 128 * 2, "Gemma 3's default sliding_window_pattern 6", ctx},
		// google/gemma-3-4b-it: text_config states sizes only; the heads are
		// Gemma3TextConfig's defaults (8 heads, 4 KV heads, head_dim 256).
		{"gemma-3-4b", `{"model_type":"gemma3","torch_dtype":"bfloat16","text_config":{"hidden_size":2560,"intermediate_size":10240,
			"model_type":"gemma3_text","num_hidden_layers":34,"rope_scaling":{"factor":8.0,"rope_type":"linear"},"sliding_window":1024}}`,
			34, 29, 34 * 2 * 4 * 256 * 2, (5*ctx + 29*1024) * 2 * 4 * 256 * 2, "one layer in 6", ctx},
		// Qwen3-Next: full_attention_interval 4 and no layer_types: 12 of 48
		// layers cache K and V, 36 linear-attention layers keep a state.
		{"qwen3-next", `{"model_type":"qwen3_next","num_hidden_layers":48,"num_attention_heads":16,"num_key_value_heads":2,"head_dim":256,
			"hidden_size":2048,"full_attention_interval":4,"torch_dtype":"bfloat16","max_position_embeddings":262144}`,
			12, 0, 12 * 2 * 2 * 256 * 2, 12 * ctx * 2 * 2 * 256 * 2, "36 of 48 decoder layers are linear_attention layers", 262144},
		// the same split stated as layer_types, and a mamba hybrid's
		{"layer_types linear", `{"num_hidden_layers":4,"num_attention_heads":16,"num_key_value_heads":2,"head_dim":256,"hidden_size":2048,
			"layer_types":["linear_attention","linear_attention","linear_attention","full_attention"],"torch_dtype":"bfloat16","max_position_embeddings":262144}`,
			1, 0, 2 * 2 * 256 * 2, ctx * 2 * 2 * 256 * 2, "3 of 4 decoder layers are linear_attention layers", 262144},
		{"layer_types mamba", `{"num_hidden_layers":4,"num_attention_heads":16,"num_key_value_heads":2,"head_dim":256,"hidden_size":2048,
			"layer_types":["mamba","attention","mamba","attention"],"torch_dtype":"bfloat16","max_position_embeddings":262144}`,
			2, 0, 2 * 2 * 2 * 256 * 2, 2 * ctx * 2 * 2 * 256 * 2, "2 of 4 decoder layers are mamba layers", 262144},
		// tiiuae/falcon-40b: num_kv_heads with new_decoder_architecture (8 KV
		// heads of 64), not MHA's 128.
		{"falcon-40b", `{"model_type":"falcon","new_decoder_architecture":true,"num_kv_heads":8,"num_attention_heads":128,"hidden_size":8192,
			"num_hidden_layers":60,"torch_dtype":"bfloat16","max_position_embeddings":2048}`,
			60, 0, 60 * 2 * 8 * 64 * 2, 60 * ctx * 2 * 8 * 64 * 2, "", 2048},
		// tiiuae/falcon-7b: multi_query, one KV head.
		{"falcon-7b", `{"model_type":"falcon","multi_query":true,"new_decoder_architecture":false,"num_attention_heads":71,"hidden_size":4544,
			"num_hidden_layers":32,"torch_dtype":"bfloat16","max_position_embeddings":2048}`,
			32, 0, 32 * 2 * 1 * 64 * 2, 32 * ctx * 2 * 1 * 64 * 2, "", 2048},
		// bigcode/starcoder: multi_query on GPT-2 names, one KV head
		{"starcoder", `{"model_type":"gpt_bigcode","multi_query":true,"n_head":48,"n_layer":40,"n_embd":6144,"torch_dtype":"bfloat16","n_positions":8192}`,
			40, 0, 40 * 2 * 1 * 128 * 2, 40 * ctx * 2 * 1 * 128 * 2, "", 8192},
		// OpenELM: num_kv_heads one a layer (not read: MHA assumed rather than a failed parse)
		{"openelm", `{"model_type":"openelm","num_hidden_layers":2,"num_attention_heads":4,"num_kv_heads":[2,4],"hidden_size":256,"torch_dtype":"bfloat16","max_position_embeddings":2048}`,
			2, 0, 2 * 2 * 4 * 64 * 2, 2 * ctx * 2 * 4 * 64 * 2, "", ctx},
		// ChatGLM's multi_query_group_num
		{"chatglm", `{"num_hidden_layers":2,"num_attention_heads":32,"multi_query_group_num":2,"hidden_size":4096,"torch_dtype":"bfloat16","max_position_embeddings":2048}`,
			2, 0, 2 * 2 * 2 * 128 * 2, 2 * ctx * 2 * 2 * 128 * 2, "", 2048},
	}
	for _, c := range cases {
		rep, err := Estimate(Repo{Source: c.name, Config: []byte(c.config)}, Options{Context: ctx})
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if rep.KVDType != "bf16" || rep.KVLayers != c.layers || rep.SlidingLayers != c.sliding ||
			rep.KVBytesPerToken != c.perToken || rep.KVBytes != c.kv {
			t.Errorf("%s: %s, %d layers (%d sliding), %d B a token, %d B; want bf16, %d (%d), %d, %d",
				c.name, rep.KVDType, rep.KVLayers, rep.SlidingLayers, rep.KVBytesPerToken, rep.KVBytes, c.layers, c.sliding, c.perToken, c.kv)
		}
		if c.note != "" && !strings.Contains(strings.Join(rep.Assumptions, "\n"), c.note) {
			t.Errorf("%s: no note saying %q:\n%s", c.name, c.note, strings.Join(rep.Assumptions, "\n"))
		}
		for _, v := range rep.GPUs {
			if v.MaxContext > c.maxContextAtMost {
				t.Errorf("%s on %s: max context %d past the model's %d", c.name, v.Name, v.MaxContext, c.maxContextAtMost)
			}
		}
	}
}

// A multimodal repo's vision tower is loaded, whatever its block numbers;
// Qwen3-Next's mtp.* block is the MTP layer (loaded and cached with --mtp
// only).
func TestTowersAndMTPModules(t *testing.T) {
	config := `{"model_type":"qwen3_next","num_hidden_layers":4,"num_attention_heads":8,"num_key_value_heads":2,"head_dim":64,"hidden_size":512,
		"torch_dtype":"bfloat16","max_position_embeddings":4096}`
	mods := []Module{
		{Name: "model.layers.0.self_attn.q_proj", Bytes: 1000, WeightParams: 500},
		{Name: "model.layers.3.self_attn.q_proj", Bytes: 1000, WeightParams: 500},
		{Name: "visual.blocks.7.attn.qkv", Bytes: 300, WeightParams: 150}, // block 7 of a 4-layer decoder
		{Name: "mtp.layers.0.self_attn.q_proj", Bytes: 40, WeightParams: 20},
		{Name: "mtp.fc", Bytes: 2, WeightParams: 1},
	}
	for _, mtp := range []bool{false, true} {
		rep, err := Estimate(Repo{Source: "x", Config: []byte(config), Modules: mods}, Options{Context: 1000, MTP: mtp})
		if err != nil {
			t.Fatal(err)
		}
		wantWeights, wantKV := uint64(2300), 4
		if mtp {
			wantWeights, wantKV = 2342, 5
		}
		if rep.StoredBytes != 2342 || rep.ExtraLayers != 1 || rep.ExtraLayerBytes != 42 || rep.WeightsBytes != wantWeights || rep.KVLayers != wantKV {
			t.Errorf("mtp %v: stored %d, %d extra layer(s) of %d B, loaded %d, %d KV layers; want 2342, 1 of 42, %d, %d",
				mtp, rep.StoredBytes, rep.ExtraLayers, rep.ExtraLayerBytes, rep.WeightsBytes, rep.KVLayers, wantWeights, wantKV)
		}
	}
}
