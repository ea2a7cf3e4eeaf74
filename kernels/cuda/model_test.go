package cuda

import (
	"context"
	"math"
	"testing"

	"github.com/quantscope/quantscope/formats/checkpoint"
	"github.com/quantscope/quantscope/formats/hub"
	"github.com/quantscope/quantscope/kernels"
	"github.com/quantscope/quantscope/kernels/cpu"
	"github.com/quantscope/quantscope/model"
	"github.com/quantscope/quantscope/synth"
)

// The model's forward with the CUDA backend: its Llama ops (and W4A
// linears) go to the worker, the dense linears stay on the CPU.

func loadModel(tb testing.TB, s synth.LlamaSpec, storage string, sparse bool, be interface{}) *model.Model {
	tb.Helper()
	dir := tb.TempDir()
	if sparse {
		if err := synth.WriteLlamaSparse(dir, s, storage); err != nil {
			tb.Fatal(err)
		}
	} else {
		repo, err := synth.LlamaRepo(s, synth.LlamaWeights(s), storage)
		if err != nil {
			tb.Fatal(err)
		}
		if err := repo.WriteDir(dir); err != nil {
			tb.Fatal(err)
		}
	}
	src, err := hub.OpenLocal(dir)
	if err != nil {
		tb.Fatal(err)
	}
	c, err := checkpoint.Load(context.Background(), src, checkpoint.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	var m *model.Model
	switch b := be.(type) {
	case *Backend:
		m, err = model.New(c, b)
	case *cpu.Backend:
		m, err = model.New(c, b)
	}
	if err != nil {
		tb.Fatal(err)
	}
	return m
}

var modelTokens = []int{1, 17, 300, 511, 0, 42, 42, 7, 128, 255, 3, 99}

// TestFakeWorkerModelForward: the forward through the client and the wire
// (the fake worker computes on the CPU) gives the CPU's logits bit for bit,
// dense and W4A-FP8, and nothing falls back.
func TestFakeWorkerModelForward(t *testing.T) {
	b, l := openFake(t, "cpu")
	s := synth.SmallLlama()
	for _, mode := range []string{model.W4ANone, model.W4AFP8} {
		got, want := forwardBoth(t, s, b, mode)
		sameF32(t, "logits "+mode, got.Data, want.Data)
	}
	if l.n() != 0 {
		t.Fatalf("fell back to the CPU: %s", l.all())
	}
}

// TestGPUModelForward: on a GPU the dense logits stay within 1e-5 of the
// logits' RMS of the CPU's (the Llama ops' stated bounds, through two
// layers); the W4A modes within 1e-2, as an activation an ulp away from the
// CPU's may round to the neighbouring FP8 or E2M1 code.
func TestGPUModelForward(t *testing.T) {
	b := gpuBackend(t)
	s := synth.SmallLlama()
	for _, mode := range []string{model.W4ANone, model.W4AFP8, model.W4ANVFP4} {
		got, want := forwardBoth(t, s, b, mode)
		var d, n float64
		for i := range want.Data {
			e := float64(got.Data[i]) - float64(want.Data[i])
			d, n = d+e*e, n+float64(want.Data[i])*float64(want.Data[i])
		}
		tol := 1e-5
		if mode != model.W4ANone {
			tol = 1e-2
		}
		if r := math.Sqrt(d / n); !(r <= tol) {
			t.Fatalf("%s: logits' relative RMS difference from the CPU's %g", mode, r)
		}
	}
}

// BenchmarkGPUForward1BShape is model's BenchmarkForward1BShape (16 tokens,
// GPTQ INT4 with W4A-FP8) on the CUDA backend: W4A linears and Llama ops on
// the GPU, the embedding and the dense head on the CPU.
func BenchmarkGPUForward1BShape(b *testing.B) {
	be := gpuBackend(b)
	m := loadModel(b, synth.Llama1BShape(), "gptq", true, be)
	tokens := make([]int, 16)
	for i := range tokens {
		tokens[i] = (i*7919 + 128000) % m.Config.Vocab
	}
	for b.Loop() {
		if _, err := m.Forward(context.Background(), tokens, model.Options{W4A: model.W4AFP8}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(tokens)*b.N)/b.Elapsed().Seconds(), "tokens/s")
}

// forwardBoth runs the synthetic GPTQ Llama's forward on b and on the CPU
// backend.
func forwardBoth(t *testing.T, s synth.LlamaSpec, b *Backend, mode string) (got, want kernels.Matrix) {
	t.Helper()
	got, err := loadModel(t, s, "gptq", false, b).Forward(context.Background(), modelTokens, model.Options{W4A: mode})
	if err != nil {
		t.Fatal(err)
	}
	if want, err = loadModel(t, s, "gptq", false, cpu.New()).Forward(context.Background(), modelTokens, model.Options{W4A: mode}); err != nil {
		t.Fatal(err)
	}
	return got, want
}
