package model

import (
	"math"
	"runtime"
	"testing"

	"github.com/quantscope/quantscope/kernels/cpu"
	"github.com/quantscope/quantscope/synth"
)

// TestNewStopsAtFirstMissingModule: a one-layer checkpoint whose config
// claims 65,536 layers is refused at layer 1's first module, without
// allocating anything the size of num_hidden_layers; of several missing
// modules the error names the first in forward order (the lowest layer).
func TestNewStopsAtFirstMissingModule(t *testing.T) {
	s := synth.SmallLlama()
	s.Layers = 1
	repo := editRepo(t, llamaRepo(t, s, synth.LlamaWeights(s), "bf16"), repoEdit{config: map[string]any{"num_hidden_layers": 1 << 16}})
	c := loadRepo(t, repo)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := New(c, cpu.New())
	runtime.ReadMemStats(&after)
	wantErr(t, err, `"model.layers.1.input_layernorm"`, "num_hidden_layers 65536")
	if a := after.TotalAlloc - before.TotalAlloc; a > 1<<20 {
		t.Fatalf("New allocated %d bytes before refusing a config of 65536 layers over a 1-layer checkpoint", a)
	}

	s = synth.SmallLlama()
	gone := map[string]bool{"model.layers.1.self_attn.q_proj.weight": true, "model.layers.0.mlp.down_proj.weight": true, "model.layers.1.input_layernorm.weight": true}
	repo = editRepo(t, llamaRepo(t, s, synth.LlamaWeights(s), "bf16"), repoEdit{drop: func(n string) bool { return gone[n] }})
	for range 5 { // map order would vary from run to run
		_, err = New(loadRepo(t, repo), cpu.New())
		wantErr(t, err, `no weight for module "model.layers.0.mlp.down_proj"`, "layer 0 of num_hidden_layers 2")
	}
}

// TestConfigRefusesNonFiniteNumerics: values that pass the sign checks but
// make an inverse frequency or float32(rms_norm_eps) infinite or zero are
// refused, naming config.json, the field and the rule; the model's own
// values still load.
func TestConfigRefusesNonFiniteNumerics(t *testing.T) {
	s := synth.SmallLlama()
	repo := llamaRepo(t, s, synth.LlamaWeights(s), "bf16")
	llama3 := func(factor float64) map[string]any {
		return map[string]any{"rope_type": "llama3", "factor": factor, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 2048}
	}
	for _, c := range []struct {
		name string
		set  map[string]any
		want []string
	}{
		{"rope_theta 1e-50", map[string]any{"rope_theta": 1e-50}, []string{"config.json", "rope_theta 1e-50", "+Inf", "finite and positive"}},
		{"rope_theta 1e300", map[string]any{"rope_theta": 1e300, "rope_scaling": nil}, []string{"config.json", "rope_theta 1e+300", "finite and positive"}},
		{"llama3 factor 1e-300", map[string]any{"rope_scaling": llama3(1e-300)}, []string{"config.json", "rope_scaling llama3", "factor 1e-300", "+Inf", "finite and positive"}},
		{"rms_norm_eps 1e39", map[string]any{"rms_norm_eps": 1e39}, []string{"config.json", "rms_norm_eps 1e+39", "+Inf as float32", "finite and positive"}},
		{"rms_norm_eps 1e-50", map[string]any{"rms_norm_eps": 1e-50}, []string{"config.json", "rms_norm_eps 1e-50", "0 as float32", "finite and positive"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseConfig(editRepo(t, repo, repoEdit{config: c.set}).Files["config.json"])
			wantErr(t, err, c.want...)
			_, err = openRepo(t, editRepo(t, repo, repoEdit{config: c.set}))
			wantErr(t, err, c.want...)
		})
	}
	cfg, err := ParseConfig(editRepo(t, repo, repoEdit{config: map[string]any{"rope_scaling": llama3(8), "rms_norm_eps": 1e-6}}).Files["config.json"])
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range cfg.InvFreq() {
		if !(v > 0) || math.IsInf(float64(v), 1) {
			t.Fatalf("inverse frequency %d of the model's own config: %v", i, v)
		}
	}
}
