package model

import (
	"context"
	"os"
	"strconv"
	"testing"

	"github.com/quantscope/quantscope/formats/checkpoint"
	"github.com/quantscope/quantscope/formats/hub"
	"github.com/quantscope/quantscope/kernels/cpu"
	"github.com/quantscope/quantscope/synth"
)

// Decoder throughput on the test model (2 layers, hidden 256, vocab 512),
// one 64-token sequence a forward, weights read from the local files each
// time: tokens/s is prefill throughput, layer streaming included.
func BenchmarkForward(b *testing.B) {
	s := synth.SmallLlama()
	w := synth.LlamaWeights(s)
	tokens := make([]int, 64)
	for i := range tokens {
		tokens[i] = (i * 91) % s.Vocab
	}
	for _, c := range []struct{ name, storage, mode string }{
		{"bf16", "bf16", W4ANone}, {"gptq-dense", "gptq", W4ANone}, {"gptq-w4a-fp8", "gptq", W4AFP8},
	} {
		b.Run(c.name, func(b *testing.B) {
			m := load(b, s, w, c.storage)
			peak, err := peakHeap(func() error {
				_, err := m.Forward(context.Background(), tokens, Options{W4A: c.mode})
				return err
			})
			if err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				if _, err := m.Forward(context.Background(), tokens, Options{W4A: c.mode}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(len(tokens)*b.N)/b.Elapsed().Seconds(), "tokens/s")
			b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MiB") // one forward, measured before the loop
		})
	}
}

// BenchmarkForward70BShape measures a forward's peak heap on a sparse
// checkpoint of Llama 3.1 70B's shape (real headers, zero weights), dense
// BF16 and GPTQ with W4A-FP8, 4 tokens. It reads and computes every weight
// (minutes on 2 cores), so it runs only when QUANTSCOPE_70B gives the number
// of decoder layers (80 for the whole model; the peak does not depend on it).
func BenchmarkForward70BShape(b *testing.B) {
	layers, _ := strconv.Atoi(os.Getenv("QUANTSCOPE_70B"))
	if layers <= 0 {
		b.Skip("set QUANTSCOPE_70B=LAYERS to run (80 for the whole model)")
	}
	s := synth.Llama70BShape(layers)
	for _, c := range []struct{ storage, mode string }{{"bf16", W4ANone}, {"gptq", W4AFP8}} {
		b.Run(c.storage+"-"+c.mode, func(b *testing.B) {
			m := loadSparse(b, s, c.storage)
			tokens := []int{1, 128000, 5, 9}
			var peak int64
			for b.Loop() {
				p, err := peakHeap(func() error {
					_, err := m.Forward(context.Background(), tokens, Options{W4A: c.mode})
					return err
				})
				if err != nil {
					b.Fatal(err)
				}
				peak = max(peak, p)
			}
			b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MiB")
			b.ReportMetric(float64(m.MemoryBound(len(tokens)))/(1<<20), "bound-MiB")
			b.ReportMetric(b.Elapsed().Seconds()/float64(b.N), "s/forward")
		})
	}
}

// loadSparse writes a Llama of a real model's shape as sparse files (its
// weights read as zeros) and loads it on the CPU backend.
func loadSparse(b *testing.B, s synth.LlamaSpec, storage string) *Model {
	b.Helper()
	dir := b.TempDir()
	if err := synth.WriteLlamaSparse(dir, s, storage); err != nil {
		b.Fatal(err)
	}
	src, err := hub.OpenLocal(dir)
	if err != nil {
		b.Fatal(err)
	}
	ck, err := checkpoint.Load(context.Background(), src, checkpoint.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ck.Close() })
	m, err := New(ck, cpu.New())
	if err != nil {
		b.Fatal(err)
	}
	return m
}
