package model

import (
	"context"
	"testing"

	"github.com/quantscope/quantscope/synth"
)

// BenchmarkForward1BShape: a 16-token forward of a Llama-3.2-1B-shaped
// checkpoint (sparse: real headers, zero weights, read and computed like any
// other), dense BF16 and GPTQ INT4 with W4A-FP8. tokens/s is prefill
// throughput with every layer's weights read and dequantized from the files
// each forward; peak-heap-MiB is one forward's peak live heap above the loaded
// checkpoint, measured once before the timed loop.
func BenchmarkForward1BShape(b *testing.B) {
	s := synth.Llama1BShape()
	tokens := make([]int, 16)
	for i := range tokens {
		tokens[i] = (i*7919 + 128000) % s.Vocab
	}
	for _, c := range []struct{ storage, mode string }{{"bf16", W4ANone}, {"gptq", W4AFP8}} {
		b.Run(c.storage+"-"+c.mode, func(b *testing.B) {
			m := loadSparse(b, s, c.storage)
			forward := func() error {
				_, err := m.Forward(context.Background(), tokens, Options{W4A: c.mode})
				return err
			}
			peak, err := peakHeap(forward)
			if err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				if err := forward(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(len(tokens)*b.N)/b.Elapsed().Seconds(), "tokens/s")
			b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MiB")
			b.ReportMetric(float64(m.MemoryBound(len(tokens)))/(1<<20), "bound-MiB")
		})
	}
}
