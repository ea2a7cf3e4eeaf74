package fit

import (
	"math"
	"strings"
	"testing"
)

// TestKVFromConfig sizes the KV cache from config.json (and
// hf_quant_config.json) alone, for the declarations each producer writes.
func TestKVFromConfig(t *testing.T) {
	llama := `"num_hidden_layers":4,"num_attention_heads":8,"num_key_value_heads":2,"hidden_size":512,"max_position_embeddings":1000`
	cases := []struct {
		name, config, hfq string
		dtype             string
		perToken, kv      uint64 // at context 1000
	}{
		// 2 (K,V) × 2 heads × 64 (512/8) × bytes × 4 layers.
		{"bf16", `{` + llama + `,"torch_dtype":"bfloat16"}`, "", "bf16", 2 * 2 * 64 * 2 * 4, 2 * 2 * 64 * 2 * 4 * 1000},
		{"fp32 via dtype", `{` + llama + `,"dtype":"float32"}`, "", "fp32", 2 * 2 * 64 * 4 * 4, 2 * 2 * 64 * 4 * 4 * 1000},
		{"no dtype: bf16 assumed", `{` + llama + `}`, "", "bf16", 2 * 2 * 64 * 2 * 4, 2 * 2 * 64 * 2 * 4 * 1000},
		{"compressed-tensors kv_cache_scheme 8-bit float", `{` + llama + `,"torch_dtype":"bfloat16","quantization_config":{"quant_method":"compressed-tensors","kv_cache_scheme":{"num_bits":8,"type":"float","strategy":"tensor"}}}`, "",
			"fp8", 2 * 2 * 64 * 4, 2 * 2 * 64 * 4 * 1000},
		{"compressed-tensors kv_cache_scheme 8-bit int", `{` + llama + `,"torch_dtype":"bfloat16","quantization_config":{"kv_cache_scheme":{"num_bits":8,"type":"int"}}}`, "",
			"int8", 2 * 2 * 64 * 4, 2 * 2 * 64 * 4 * 1000},
		{"modelopt in config.json", `{` + llama + `,"torch_dtype":"float16","quantization_config":{"quant_method":"modelopt","kv_cache_quant_algo":"FP8"}}`, "",
			"fp8", 2 * 2 * 64 * 4, 2 * 2 * 64 * 4 * 1000},
		{"hf_quant_config kv null", `{` + llama + `,"torch_dtype":"float16"}`, `{"quantization":{"quant_algo":"NVFP4","kv_cache_quant_algo":null}}`,
			"fp16", 2 * 2 * 64 * 2 * 4, 2 * 2 * 64 * 2 * 4 * 1000},
		{"unknown kv algo falls back", `{` + llama + `,"torch_dtype":"bfloat16"}`, `{"quantization":{"kv_cache_quant_algo":"NVFP4"}}`,
			"bf16", 2 * 2 * 64 * 2 * 4, 2 * 2 * 64 * 2 * 4 * 1000},
		// Mistral: a window and no per-layer list: every layer holds ≤ 256 tokens.
		{"mistral window", `{` + llama + `,"sliding_window":256}`, "", "bf16", 2 * 2 * 64 * 2 * 4, 2 * 2 * 64 * 2 * 4 * 256},
		// Qwen 2: use_sliding_window with max_window_layers 3: only layer 3 is windowed.
		{"qwen2 max_window_layers", `{` + llama + `,"sliding_window":256,"use_sliding_window":true,"max_window_layers":3}`, "", "bf16",
			2 * 2 * 64 * 2 * 4, 2 * 2 * 64 * 2 * (3*1000 + 256)},
		{"qwen2 window off", `{` + llama + `,"sliding_window":256,"use_sliding_window":false}`, "", "bf16", 2 * 2 * 64 * 2 * 4, 2 * 2 * 64 * 2 * 4 * 1000},
		// Gemma 2 (no layer_types): even layers slide: layers 0 and 2 of 4 hold ≤ 256 tokens.
		{"gemma2 alternation", `{"model_type":"gemma2",` + llama + `,"sliding_window":256}`, "", "bf16", 2 * 2 * 64 * 2 * 4, 2 * 2 * 64 * 2 * (2*1000 + 2*256)},
		// Gemma 3 with sliding_window_pattern 2 under text_config: layers 1 and 3 are global.
		{"gemma3 pattern", `{"model_type":"gemma3","text_config":{"model_type":"gemma3_text",` + llama + `,"head_dim":64,"sliding_window":256,"sliding_window_pattern":2}}`, "", "bf16",
			2 * 2 * 64 * 2 * 4, 2 * 2 * 64 * 2 * (2*1000 + 2*256)},
		// layer_types wins over the pattern: only layer 0 slides.
		{"layer_types first", `{"model_type":"gemma3_text",` + llama + `,"head_dim":64,"sliding_window":256,"sliding_window_pattern":2,"layer_types":["sliding_attention","full_attention","full_attention","full_attention"]}`, "", "bf16",
			2 * 2 * 64 * 2 * 4, 2 * 2 * 64 * 2 * (3*1000 + 256)},
		// Multimodal: the decoder under text_config; MHA (no num_key_value_heads): 8 heads of head_dim 32.
		{"text_config MHA", `{"architectures":["X"],"text_config":{"num_hidden_layers":2,"num_attention_heads":8,"head_dim":32,"hidden_size":512,"torch_dtype":"bfloat16"}}`, "",
			"bf16", 2 * 8 * 32 * 2 * 2, 2 * 8 * 32 * 2 * 2 * 1000},
	}
	for _, c := range cases {
		r := Repo{Source: c.name, Config: []byte(c.config)}
		if c.hfq != "" {
			r.HFQuant = []byte(c.hfq)
		}
		rep, err := Estimate(r, Options{Context: 1000})
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if rep.KVDType != c.dtype || rep.KVBytesPerToken != c.perToken || rep.KVBytes != c.kv {
			t.Errorf("%s: kv %s %d B/token %d B, want %s %d %d", c.name, rep.KVDType, rep.KVBytesPerToken, rep.KVBytes, c.dtype, c.perToken, c.kv)
		}
	}
}

func TestBadInput(t *testing.T) {
	good := `{"num_hidden_layers":2,"num_attention_heads":4,"hidden_size":256}`
	cases := []struct {
		name, config string
		o            Options
		want         string
	}{
		{"no config", "", Options{}, "has no config.json"},
		{"bad json", `{"num_hidden_layers":`, Options{}, "config.json"},
		{"no layers", `{"num_attention_heads":4,"hidden_size":256}`, Options{}, "num_hidden_layers"},
		{"no heads", `{"num_hidden_layers":2}`, Options{}, "num_key_value_heads/head_dim"},
		{"mla without rope", `{"num_hidden_layers":2,"kv_lora_rank":512}`, Options{}, "qk_rope_head_dim"},
		{"tp 0 is 1, tp -1 is not", good, Options{TP: -1}, "--tp -1"},
		{"batch", good, Options{Batch: -2}, "--batch -2"},
		{"context", good, Options{Context: -5}, "--context -5"},
		{"w4a", good, Options{W4A: "int8"}, `--w4a "int8"`},
		{"kv dtype", good, Options{KVDType: "fp4"}, `--kv-dtype "fp4"`},
		{"reserve", good, Options{Reserve: "lots"}, `--reserve "lots"`},
		{"mtp without an extra layer", good, Options{MTP: true}, "no module sits past num_hidden_layers 2"},
		{"bad hf_quant_config", good, Options{}, ""},
	}
	for _, c := range cases {
		r := Repo{Source: "x", Config: []byte(c.config)}
		if c.name == "bad hf_quant_config" {
			r.HFQuant = []byte(`[1,2`)
			c.want = "hf_quant_config.json"
		}
		_, err := Estimate(r, c.o)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one naming %q", c.name, err, c.want)
		}
	}
}

func TestParseGPU(t *testing.T) {
	for spec, want := range map[string]GPU{
		"H100": {"H100", 80 * GB}, "h200": {"H200", 141 * GB}, "b200": {"B200", 192 * GB}, "l40s": {"L40S", 48 * GB},
		"RTX 4090": {"RTX 4090", 24 * GB}, "rtx-5090": {"RTX 5090", 32 * GB}, "4090": {"RTX 4090", 24 * GB},
		"A100:80": {"A100", 80 * GB}, "MI300X:192GB": {"MI300X", 192 * GB}, "half:0.5": {"half", GB / 2},
		"A100:80GiB": {"A100", 80 << 30}, "A100:80 gib": {"A100", 80 << 30}, "L4:24gb": {"L4", 24 * GB},
	} {
		g, err := ParseGPU(spec)
		if err != nil || g != want {
			t.Errorf("ParseGPU(%q) = %+v, %v; want %+v", spec, g, err, want)
		}
	}
	for _, bad := range []string{"A100", "X:", "X:-1", ":80", "X:abc", "X:NaN", "X:GiB", "X:80TB", "X:80MiB"} {
		if _, err := ParseGPU(bad); err == nil {
			t.Errorf("ParseGPU(%q) accepted", bad)
		}
	}
}

func TestParseReserve(t *testing.T) {
	for s, want := range map[string][2]float64{"0.1": {0.1, 0}, "10%": {0.1, 0}, "0": {0, 0}, "6GB": {0, 6e9}, "6 GB": {0, 6e9}, "0.5GB": {0, 5e8}, "0.99": {0.99, 0}, "6GiB": {0, 6 << 30}} {
		f, b, err := ParseReserve(s)
		if err != nil || f != want[0] || float64(b) != want[1] {
			t.Errorf("ParseReserve(%q) = %v, %v, %v; want %v", s, f, b, err, want)
		}
	}
	for _, bad := range []string{"", "-1", "100%", "x", "1e9", "1", "1.0", "6"} {
		if _, _, err := ParseReserve(bad); err == nil {
			t.Errorf("ParseReserve(%q) accepted", bad)
		}
	}
	// A fixed reserve is taken from each GPU.
	rep, err := Estimate(Repo{Config: []byte(`{"num_hidden_layers":1,"num_attention_heads":1,"hidden_size":8,"max_position_embeddings":10}`)},
		Options{Reserve: "1GB", GPUs: []GPU{{"g", 5 * GB}, {"tiny", GB / 2}}})
	if err != nil || rep.GPUs[0].UsableBytes != 4*GB || rep.GPUs[1].UsableBytes != 0 || rep.GPUs[1].Count != 0 || rep.GPUs[1].MaxContext != 0 {
		t.Errorf("reserve 1GB: %v %+v", err, rep)
	}
}

// A hostile config.json is refused, not looped over or allocated for.
func TestConfigBounds(t *testing.T) {
	for _, c := range []struct{ config, want string }{
		{`{"num_hidden_layers":1000000000,"num_attention_heads":8,"hidden_size":512}`, "field num_hidden_layers: rule fit-config"},
		{`{"num_hidden_layers":2,"num_attention_heads":-8,"hidden_size":512}`, "field num_attention_heads"},
		{`{"num_hidden_layers":2,"num_attention_heads":8,"head_dim":1000000000}`, "field head_dim"},
		{`{"num_hidden_layers":2,"kv_lora_rank":512,"qk_rope_head_dim":-1}`, "field qk_rope_head_dim"},
	} {
		if _, err := Estimate(Repo{Source: "x", Config: []byte(c.config)}, Options{}); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error naming %q", c.config, err, c.want)
		}
	}
	// The largest model shapes allowed, at the largest context and batch:
	// the cache saturates instead of wrapping round to a small number.
	rep, err := Estimate(Repo{Config: []byte(`{"num_hidden_layers":4096,"num_attention_heads":65536,"head_dim":65536,"torch_dtype":"float32"}`)},
		Options{Context: 1 << 26, Batch: 1 << 20, GPUs: []GPU{{"g", 80 * GB}}})
	if err != nil || rep.KVBytes != math.MaxUint64 || rep.GPUs[0].Fits || rep.GPUs[0].MaxContext != 0 {
		t.Errorf("saturation: %v %+v", err, rep)
	}
}

// The KV dtype is read from config.json's quantization_config first, as
// vLLM reads it (and as inspect reads the scheme); hf_quant_config.json's
// kv_cache_quant_algo counts where config.json declares none.
func TestKVDeclaredPrecedence(t *testing.T) {
	cfg := func(qc string) []byte {
		return []byte(`{"num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,"hidden_size":64,"torch_dtype":"bfloat16","max_position_embeddings":100,"quantization_config":` + qc + `}`)
	}
	hf := []byte(`{"quantization":{"quant_algo":"FP8","kv_cache_quant_algo":"INT8"}}`)
	for _, c := range []struct {
		qc, want string
	}{
		{`{"quant_method":"modelopt","quant_algo":"FP8","kv_cache_quant_algo":"FP8"}`, "fp8"}, // config.json's, over hf_quant_config.json's INT8
		{`{"quant_method":"modelopt","quant_algo":"FP8"}`, "int8"},                            // none in config.json: hf_quant_config.json's
		{`null`, "int8"},
	} {
		rep, err := Estimate(Repo{Config: cfg(c.qc), HFQuant: hf}, Options{})
		if err != nil || rep.KVDType != c.want {
			t.Errorf("quantization_config %s: kv %q (%v), want %q", c.qc, rep.KVDType, err, c.want)
		}
	}
}

// Two GPUs of one name (H100 and H100:80GiB) would give two rows nobody
// could tell apart: refused, with a name that tells them apart suggested;
// names are compared as --gpu reads them (case, spaces and dashes aside).
func TestGPUNamesDistinct(t *testing.T) {
	h100, _ := ParseGPU("H100")
	binary, _ := ParseGPU("H100:80GiB")
	custom, _ := ParseGPU("h-100:94")
	for _, c := range []struct {
		gpus []GPU
		want string
	}{
		{[]GPU{h100, binary}, `--gpu "H100": a second GPU of that name (80.00 GB and 85.90 GB): its rows would not be told apart; name it otherwise, e.g. H100-80GiB:80GiB`},
		{[]GPU{h100, custom}, `--gpu "h-100": a second GPU of that name (80.00 GB and 94.00 GB): its rows would not be told apart; name it otherwise, e.g. h-100-94GB:94GB`},
		{[]GPU{h100, {"H100 SXM", 80 * GB}}, ""},
	} {
		o := Options{GPUs: c.gpus}
		err := o.Check()
		if (err == nil) != (c.want == "") || err != nil && err.Error() != c.want {
			t.Errorf("%v: %v; want %q", c.gpus, err, c.want)
		}
	}
}
