package model

import (
	"context"
	"strings"
	"testing"

	"github.com/quantscope/quantscope/formats/scheme"
	"github.com/quantscope/quantscope/kernels"
	"github.com/quantscope/quantscope/synth"
)

// gptqFixture loads the small GPTQ Llama and the plain references' inputs.
func gptqFixture(t *testing.T) (*Model, synth.LlamaSpec, map[string]synth.Matrix, map[string][]int8, map[string][]float64, map[string][2]int) {
	s := synth.SmallLlama()
	w := synth.LlamaWeights(s)
	m := load(t, s, w, "gptq")
	deq := map[string]synth.Matrix{}
	codes, scales, dims := map[string][]int8{}, map[string][]float64{}, map[string][2]int{}
	for name, orig := range w {
		if strings.HasSuffix(name, ".bias") {
			deq[name] = orig
			continue
		}
		mod, _ := m.c.Module(name)
		r, _ := mod.Matrix2D()
		vals, err := scheme.Dequantize(mod, m.c, 0, int(r))
		if err != nil {
			t.Fatal(err)
		}
		deq[name] = synth.Matrix{Shape: orig.Shape, Data: vals}
		if mod.Layout == "gptq" {
			codes[name], scales[name], dims[name] = gptqCentred(t, m, name)
		}
	}
	return m, s, deq, codes, scales, dims
}

func TestW4ANVFP4Forward(t *testing.T) {
	m, s, deq, codes, scales, dims := gptqFixture(t)
	ctx := context.Background()
	dense := refForward(s, deq, refDense(deq), testTokens)
	calibrated := map[string]float32{"model.layers.0.self_attn.o_proj.input": 0.004, "model.layers.1.mlp.down_proj.input": 0.0021}
	attnFP8 := func(n string) bool { return strings.Contains(n, "self_attn") }
	for _, c := range []struct {
		name string
		opt  Options
		fp8  func(string) bool
	}{
		{"least_squares dynamic", Options{W4A: W4ANVFP4}, nil},
		{"nvidia dynamic", Options{W4A: W4ANVFP4, Recipe: "nvidia"}, nil},
		{"four_six calibrated", Options{W4A: W4ANVFP4, Recipe: "four_six", Scales: calibrated}, nil},
		{"mixed policy", Options{W4A: W4ANVFP4, Attention: W4AFP8}, attnFP8},
	} {
		recipe := c.opt.Recipe
		if recipe == "" {
			recipe = "least_squares"
		}
		got, err := m.Forward(ctx, testTokens, c.opt)
		if err != nil {
			t.Fatal(c.name, err)
		}
		want := refForward(s, deq, refW4ANVFP4(codes, scales, dims, recipe, c.opt.Scales, c.fp8), testTokens)
		e := relRMS(got, want)
		effect := relRMS(kernels.Matrix{Rows: len(dense), Cols: s.Vocab, Data: flat(dense)}, want)
		t.Logf("%s: relative RMS against the plain reference %.3g; NVFP4 itself moves the logits by %.3g", c.name, e, effect)
		// float64 upstream in the reference may flip an occasional E2M1
		// rounding (none did here: 3e-7); the tolerance is far below the
		// quantization's effect.
		if effect < 2e-2 || e > 1e-5 {
			t.Fatalf("%s: logits off the plain quantized arithmetic by %g (the quantization's own effect %g)", c.name, e, effect)
		}
	}
	// the calibrated scales are used: a different scale changes the logits
	a, _ := m.Forward(ctx, testTokens, Options{W4A: W4ANVFP4})
	b, _ := m.Forward(ctx, testTokens, Options{W4A: W4ANVFP4, Scales: calibrated})
	if relRMS(a, [][]float64{toF64(b.Data[:s.Vocab])}) == 0 {
		t.Error("calibrated scales left the logits unchanged")
	}
}

func toF64(x []float32) []float64 {
	y := make([]float64, len(x))
	for i, v := range x {
		y[i] = float64(v)
	}
	return y
}

func TestProducersInOrder(t *testing.T) {
	m, _, _, _, _, _ := gptqFixture(t)
	var seen []string
	_, err := m.Forward(context.Background(), testTokens[:5], Options{W4A: W4ANVFP4, Observe: func(p string, x kernels.Matrix) error {
		if x.Rows != 5 {
			t.Errorf("%s: %d rows", p, x.Rows)
		}
		seen = append(seen, p)
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"model.layers.0.input", "model.layers.0.self_attn.o_proj.input", "model.layers.0.post_attention_residual", "model.layers.0.mlp.down_proj.input", "model.layers.0.output",
		"model.layers.1.self_attn.o_proj.input", "model.layers.1.post_attention_residual", "model.layers.1.mlp.down_proj.input", "model.layers.1.output",
	}
	if strings.Join(seen, " ") != strings.Join(want, " ") || strings.Join(Producers(2), " ") != strings.Join(want, " ") {
		t.Fatalf("producers %v\nwant %v", seen, want)
	}
}

func TestStreamOptionsRefused(t *testing.T) {
	m, _, _, _, _, _ := gptqFixture(t)
	ctx := context.Background()
	for _, c := range []struct {
		opt  Options
		want string
	}{
		{Options{W4A: W4ANVFP4, Recipe: "nvidia_headroom"}, "nvfp4-recipe"},
		{Options{W4A: W4AFP8, Attention: W4ANVFP4}, "mixed policy"},
		{Options{Attention: W4AFP8}, "needs --w4a nvfp4"},
		{Options{W4A: W4ANVFP4, Scales: map[string]float32{"model.layers.7.output": 1}}, "does not have"},
		{Options{W4A: W4ANVFP4, Scales: map[string]float32{"model.layers.0.output": -1}}, "positive"},
		{Options{W4A: W4AFP8, Recipe: "nvidia"}, "applies to NVFP4"},
	} {
		if _, err := m.Forward(ctx, []int{1, 2}, c.opt); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: err = %v, want %q", c.opt, err, c.want)
		}
	}
}
