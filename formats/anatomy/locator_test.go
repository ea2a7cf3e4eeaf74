package anatomy

import (
	"fmt"
	"testing"
)

// The Locator places every name exactly as Locate does, sharing lookups
// between names that differ only in numbers after the layer's.
func TestLocatorAgreesWithLocate(t *testing.T) {
	names := []string{"model.embed_tokens", "lm_head", "model.norm", "something.else", "transformer.h.2.attn.c_attn",
		"model.layers.61.eh_proj", "model.layers.61.shared_head.head", "model.layers.5.mlp.experts.17",
		"a.layers.x.layers.4.b.7.c", "Model.Layers.2.Block.3.Q_Proj", "model.layers.3.mlp.experts.0.gate_up_proj.7",
		"model.vision_tower.encoder.layers.12.self_attn.k_proj", "model.layers.+3.mlp.experts.1.w2", "layers.7",
		"visual.blocks.70.attn.qkv", "mtp.layers.0.mlp.experts.5.up_proj", "mtp.fc"}
	for l := range 63 {
		for e := range 4 {
			for _, p := range []string{"gate_proj", "up_proj", "down_proj"} {
				names = append(names, fmt.Sprintf("model.layers.%d.mlp.experts.%d.%s", l, e, p))
			}
		}
		names = append(names, fmt.Sprintf("model.layers.%d.self_attn.kv_a_proj_with_mqa", l), fmt.Sprintf("model.layers.%d.mlp.gate.e_score_correction_bias", l))
	}
	for _, n := range []int{0, 61} {
		loc := NewLocator(n)
		for _, name := range append(names, names...) { // the second time from the cache
			if got, want := loc.Locate(name), Locate(name, n); got != want {
				t.Errorf("Locator(%d).Locate(%q) = %+v, Locate says %+v", n, name, got, want)
			}
		}
		if len(loc.cache) >= len(names)/2 {
			t.Errorf("%d lookups cached for %d names: the expert numbers were not shared", len(loc.cache), len(names))
		}
	}
	for name, want := range map[string]string{
		"model.layers.5.mlp.experts.17.gate_proj":     "model.layers.5.mlp.experts.*.gate_proj",
		"model.layers.5.self_attn.q_proj":             "model.layers.5.self_attn.q_proj",
		"model.embed_tokens":                          "model.embed_tokens",
		"a.layers.x.layers.4.b.7.c":                   "a.layers.x.layers.4.b.*.c",
		"model.layers.3.mlp.experts.0.gate_up_proj.7": "model.layers.3.mlp.experts.*.gate_up_proj.*",
	} {
		if got := Shape(name); got != want {
			t.Errorf("Shape(%q) = %q, want %q", name, got, want)
		}
	}
}
