package fit

import (
	"strings"
	"testing"
)

// FuzzEstimate feeds arbitrary config.json and hf_quant_config.json files
// to the estimate of a small Llama-shaped repo. Each either fails with an
// error naming the file and rule, or gives a report whose KV cache grows
// with the context and the batch and never wraps around.
func FuzzEstimate(f *testing.F) {
	llama := `"num_hidden_layers":2,"num_attention_heads":8,"num_key_value_heads":2,"hidden_size":512,"max_position_embeddings":4096`
	f.Add([]byte(`{`+llama+`,"torch_dtype":"bfloat16"}`), []byte(nil))
	f.Add([]byte(`{`+llama+`,"sliding_window":256,"layer_types":["sliding_attention","full_attention"]}`), []byte(`{"quantization":{"quant_algo":"FP8","kv_cache_quant_algo":"FP8"}}`))
	f.Add([]byte(`{"model_type":"deepseek_v3","num_hidden_layers":2,"num_attention_heads":128,"kv_lora_rank":512,"qk_rope_head_dim":64,"hidden_size":7168}`), []byte(nil))
	f.Add([]byte(`{"text_config":{`+llama+`,"sliding_window":128,"sliding_window_pattern":2},"model_type":"gemma3"}`), []byte(nil))
	mods := []Module{
		{Name: "model.embed_tokens", Bytes: 1 << 20, WeightParams: 1 << 19, Layout: "dense"},
		{Name: "model.layers.0.self_attn.q_proj", Bytes: 1 << 18, WeightParams: 1 << 18, Layout: "fp8-tensor", Bits: 8},
		{Name: "model.layers.1.mlp.down_proj", Bytes: 1 << 18, WeightParams: 1 << 19, Layout: "gptq", Bits: 4},
		{Name: "model.layers.2.mlp.down_proj", Bytes: 1 << 18, WeightParams: 1 << 19, Layout: "dense"},
		{Name: "lm_head", Bytes: 1 << 20, WeightParams: 1 << 19, Layout: "dense"},
	}
	f.Fuzz(func(t *testing.T, config, hfq []byte) {
		r := Repo{Source: "fuzz/repo", Config: config, HFQuant: hfq, Modules: mods}
		pl, err := Prepare(r)
		if err != nil {
			named(t, err)
			return
		}
		var prev *Report
		for _, o := range []Options{{Context: 1000}, {Context: 2000}, {Context: 2000, Batch: 3}, {Context: 2000, Batch: 3, TP: 2, W4A: "nvfp4", MTP: true}} {
			rep, err := pl.Estimate(o)
			if err != nil {
				named(t, err)
				return
			}
			if rep.KVBytesPerToken == 0 || rep.KVLayers == 0 || len(rep.GPUs) == 0 {
				t.Fatalf("%+v: a report with no KV cache or no verdicts: %+v", o, rep)
			}
			if prev != nil && o.TP == 0 && rep.KVBytes < prev.KVBytes {
				t.Fatalf("the KV cache shrank from %d to %d bytes as %+v grew", prev.KVBytes, rep.KVBytes, o)
			}
			prev = rep
		}
	})
}

// named fails unless err names the file or option it is about.
func named(t *testing.T, err error) {
	t.Helper()
	msg := err.Error()
	for _, w := range []string{"config.json", "hf_quant_config.json", "fuzz/repo", "--"} {
		if strings.Contains(msg, w) {
			return
		}
	}
	t.Fatalf("an error that names no file: %v", err)
}
