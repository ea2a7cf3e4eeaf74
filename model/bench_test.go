package model

import (
	"context"
	"testing"

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
			for b.Loop() {
				if _, err := m.Forward(context.Background(), tokens, Options{W4A: c.mode}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(len(tokens)*b.N)/b.Elapsed().Seconds(), "tokens/s")
		})
	}
}
