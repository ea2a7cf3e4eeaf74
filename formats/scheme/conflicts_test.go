package scheme

import (
	"strings"
	"testing"
)

// Where hf_quant_config.json and config.json's quantization_config say
// different things, Detect says which and what (config.json's is read); the
// same things written twice say nothing.
func TestDetectConflicts(t *testing.T) {
	hf := `{"producer":{"name":"modelopt","version":"0.23.0"},"quantization":{"quant_algo":"FP8","kv_cache_quant_algo":"FP8","exclude_modules":["lm_head"]}}`
	cfg := func(algo, kv, ex string) []byte {
		return []byte(`{"quantization_config":{"quant_method":"modelopt","quant_algo":"` + algo + `","kv_cache_quant_algo":` + kv + `,"group_size":16,"exclude_modules":` + ex + `}}`)
	}
	s, err := Detect(cfg("FP8", `"FP8"`, `["lm_head"]`), []byte(hf))
	if err != nil || len(s.Conflicts) != 0 {
		t.Fatalf("the same twice: %v %q", err, s.Conflicts)
	}
	s, err = Detect(cfg("NVFP4", `null`, `["lm_head","model.layers.0.self_attn*"]`), []byte(hf))
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(s.Conflicts, "\n")
	for _, want := range []string{
		"quant_algo: hf_quant_config.json says FP8, config.json's quantization_config says NVFP4",
		"exclude_modules: hf_quant_config.json lists 1, config.json's quantization_config 2, not the same",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("conflicts lack %q:\n%s", want, got)
		}
	}
	if s.QuantAlgo != "NVFP4" {
		t.Errorf("read %q, want config.json's NVFP4", s.QuantAlgo)
	}
	// a kv_cache_quant_algo only one file states is no disagreement
	if strings.Contains(got, "kv_cache") {
		t.Errorf("a KV algorithm one file leaves out: %s", got)
	}
}
