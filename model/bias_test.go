package model

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/quantscope/quantscope/synth"
)

// biasedWeights is the small Llama's weights with a bias stored for every
// projection and for the head (lm_head.bias, or the tied embedding's).
func biasedWeights(s synth.LlamaSpec) map[string]synth.Matrix {
	s.AttentionBias = true
	w := synth.LlamaWeights(s) // q/k/v/o_proj.bias
	vec := func(n, seed int) synth.Matrix {
		d := make([]float32, n)
		for i := range d {
			d[i] = float32(0.1 * math.Sin(float64(7*i+seed)))
		}
		return synth.Matrix{Shape: []uint64{uint64(n)}, Data: d}
	}
	for l := range s.Layers {
		p := fmt.Sprintf("model.layers.%d.mlp.", l)
		w[p+"gate_proj.bias"] = vec(s.Inter, 3*l)
		w[p+"up_proj.bias"] = vec(s.Inter, 3*l+1)
		w[p+"down_proj.bias"] = vec(s.Hidden, 3*l+2)
	}
	head := "lm_head"
	if s.Tied {
		head = "model.embed_tokens"
	}
	w[head+".bias"] = vec(s.Vocab, 99)
	return w
}

// without is w less the biases used does not keep.
func without(w map[string]synth.Matrix, used func(name string) bool) map[string]synth.Matrix {
	out := map[string]synth.Matrix{}
	for k, v := range w {
		if !strings.HasSuffix(k, ".bias") || used(k) {
			out[k] = v
		}
	}
	return out
}

// TestBiasesFollowTheArchitecture: a projection has a bias exactly when
// Hugging Face's model class gives it one (Llama: attention_bias for
// q/k/v/o_proj, mlp_bias for the MLP; Qwen2: q/k/v_proj; Mistral: none;
// the LM head and a tied embedding never); any other stored bias is not
// used. The logits equal the plain float64 forward of the weights with
// only the architecture's biases, and are far from the one with them all.
func TestBiasesFollowTheArchitecture(t *testing.T) {
	attn := func(n string) bool { return strings.Contains(n, "self_attn.") }
	mlp := func(n string) bool { return strings.Contains(n, ".mlp.") }
	qkv := func(n string) bool { return attn(n) && !strings.Contains(n, "o_proj") }
	for _, c := range []struct {
		name   string
		tied   bool
		config map[string]any
		used   func(string) bool
	}{
		{"llama, attention_bias false", false, map[string]any{"attention_bias": false, "mlp_bias": false}, func(string) bool { return false }},
		{"llama tied, no bias fields", true, map[string]any{"attention_bias": nil, "mlp_bias": nil}, func(string) bool { return false }},
		{"llama, attention_bias and mlp_bias true", false, map[string]any{"attention_bias": true, "mlp_bias": true}, func(n string) bool { return attn(n) || mlp(n) }},
		{"llama, mlp_bias true", true, map[string]any{"attention_bias": false, "mlp_bias": true}, mlp},
		{"qwen2", false, map[string]any{"model_type": "qwen2", "attention_bias": nil, "mlp_bias": true}, qkv},
		{"mistral, attention_bias true", false, map[string]any{"model_type": "mistral", "attention_bias": true}, func(string) bool { return false }},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := synth.SmallLlama()
			s.Tied = c.tied
			stored := biasedWeights(s)
			m, err := openRepo(t, editRepo(t, llamaRepo(t, s, stored, "f32"), repoEdit{config: c.config}))
			if err != nil {
				t.Fatal(err)
			}
			got, err := m.Forward(context.Background(), testTokens, Options{})
			if err != nil {
				t.Fatal(err)
			}
			w := without(stored, c.used)
			e := relRMS(got, refForward(s, w, refDense(w), testTokens))
			all := relRMS(got, refForward(s, stored, refDense(stored), testTokens))
			t.Logf("%d of %d biases used: relative RMS %.3g against their plain forward, %.3g against all of them", biases(w), biases(stored), e, all)
			if e > denseTol {
				t.Fatalf("relative RMS error %g against the plain forward of the architecture's biases, want ≤ %g", e, denseTol)
			}
			if all < 100*denseTol {
				t.Fatalf("the forward with every stored bias is only %g off: the test does not tell them apart", all)
			}
		})
	}
}

// TestMissingBiasRefused: a bias the architecture has but the checkpoint
// lacks (Hugging Face would initialise it at random) is refused by New,
// naming the tensor and the rule.
func TestMissingBiasRefused(t *testing.T) {
	s := synth.SmallLlama()
	stored := biasedWeights(s)
	for _, c := range []struct {
		name   string
		config map[string]any
		drop   func(string) bool
		want   []string
	}{
		{"attention_bias true", map[string]any{"attention_bias": true}, func(n string) bool { return n == "model.layers.1.self_attn.k_proj.bias" },
			[]string{`no tensor "model.layers.1.self_attn.k_proj.bias"`, "attention_bias is true"}},
		{"mlp_bias true", map[string]any{"mlp_bias": true}, func(n string) bool { return strings.Contains(n, "mlp.") && strings.HasSuffix(n, ".bias") },
			[]string{`no tensor "model.layers.0.mlp.gate_proj.bias"`, "mlp_bias is true"}},
		{"qwen2", map[string]any{"model_type": "qwen2"}, func(n string) bool { return strings.HasSuffix(n, "v_proj.bias") },
			[]string{`no tensor "model.layers.0.self_attn.v_proj.bias"`, "model_type qwen2"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := openRepo(t, editRepo(t, llamaRepo(t, s, stored, "bf16"), repoEdit{config: c.config, drop: c.drop}))
			wantErr(t, err, c.want...)
		})
	}
}

func biases(w map[string]synth.Matrix) int {
	n := 0
	for k := range w {
		if strings.HasSuffix(k, ".bias") {
			n++
		}
	}
	return n
}
