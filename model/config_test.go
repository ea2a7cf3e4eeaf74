package model

import (
	"math"
	"runtime"
	"slices"
	"strings"
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

// transformers 5 writes rope_parameters (theta, type and the type's
// parameters together) instead of rope_theta and rope_scaling: a Llama 3.1
// config in either layout rotates alike, and one holding only
// rope_parameters no longer falls back to theta 10000 without scaling.
func TestConfigRopeParameters(t *testing.T) {
	const sizes = `"model_type":"llama","num_hidden_layers":2,"hidden_size":256,"intermediate_size":512,"num_attention_heads":4,"num_key_value_heads":2,"vocab_size":300`
	const band = `"factor":8.0,"low_freq_factor":1.0,"high_freq_factor":4.0,"original_max_position_embeddings":8192`
	legacy, err := ParseConfig([]byte(`{` + sizes + `,"rope_theta":500000.0,"rope_scaling":{"rope_type":"llama3",` + band + `}}`))
	if err != nil {
		t.Fatal(err)
	}
	for _, cfg := range []string{
		`{` + sizes + `,"rope_parameters":{"rope_type":"llama3","rope_theta":500000.0,` + band + `}}`,
		`{"architectures":["X"],"text_config":{` + sizes + `,"rope_parameters":{"rope_theta":500000.0,"rope_type":"llama3",` + band + `}}}`,
		// both written: rope_parameters is what transformers 5 reads
		`{` + sizes + `,"rope_theta":10000.0,"rope_scaling":null,"rope_parameters":{"rope_type":"llama3","rope_theta":500000.0,` + band + `}}`,
	} {
		c, err := ParseConfig([]byte(cfg))
		if err != nil {
			t.Fatalf("%s: %v", cfg, err)
		}
		if c.RopeTheta != 500000 || c.Scaling == nil || *c.Scaling != *legacy.Scaling || !slices.Equal(c.InvFreq(), legacy.InvFreq()) {
			t.Errorf("%s: theta %g, scaling %+v; want the legacy layout's %g, %+v", cfg, c.RopeTheta, c.Scaling, legacy.RopeTheta, legacy.Scaling)
		}
	}
	c, err := ParseConfig([]byte(`{` + sizes + `,"rope_parameters":{"rope_type":"default","rope_theta":1000000.0}}`))
	if err != nil || c.RopeTheta != 1e6 || c.Scaling != nil {
		t.Errorf("default rope_parameters: %+v, %v", c, err)
	}
	for cfg, want := range map[string]string{
		`{` + sizes + `,"rope_parameters":{"rope_type":"yarn","rope_theta":1e6,"factor":4.0}}`:                                 `rope_parameters type "yarn"`,
		`{` + sizes + `,"rope_parameters":{"full_attention":{"rope_type":"default","rope_theta":1e6},"sliding_attention":{}}}`: "one set a layer type",
	} {
		if _, err := ParseConfig([]byte(cfg)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want an error saying %q", cfg, err, want)
		}
	}
}
