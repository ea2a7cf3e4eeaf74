package cpu

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
)

// The W4A-FP8 linear against the float32 linear of the same shape, in the
// same run: each reports GFLOP/s (2·T·K·N a call) and SetBytes counts the
// weight bytes it reads (1 a code for W4A as prepared, 4 a float32), so the
// MB/s columns say how fast each streams its weight.
var gemmShapes = []struct{ T, K, N int }{{16, 2048, 2048}, {128, 2048, 2048}}

func gemmName(T, K, N int) string { return fmt.Sprintf("T=%d/K=%d/N=%d", T, K, N) }

func BenchmarkLinearF32(b *testing.B) {
	for _, s := range gemmShapes {
		b.Run(gemmName(s.T, s.K, s.N), func(b *testing.B) {
			r := rand.New(rand.NewPCG(1, 2))
			x, w := randomActs(r, s.T, s.K), randomActs(r, s.N, s.K)
			be := New()
			b.SetBytes(4 * int64(s.K*s.N))
			for b.Loop() {
				if _, err := be.LinearF32(context.Background(), x, w, nil); err != nil {
					b.Fatal(err)
				}
			}
			reportGFLOPs(b, s.T, s.K, s.N)
		})
	}
}

func BenchmarkW4AFP8(b *testing.B) {
	for _, s := range gemmShapes {
		b.Run(gemmName(s.T, s.K, s.N), func(b *testing.B) {
			r := rand.New(rand.NewPCG(1, 2))
			x := randomActs(r, s.T, s.K)
			w := randomWeight(r, "bench", s.K, s.N, false)
			be := New()
			b.SetBytes(int64(s.K * s.N))
			for b.Loop() {
				if _, err := be.W4AFP8(context.Background(), x, w); err != nil {
					b.Fatal(err)
				}
			}
			reportGFLOPs(b, s.T, s.K, s.N)
		})
	}
}

func reportGFLOPs(b *testing.B, T, K, N int) {
	b.ReportMetric(2*float64(T)*float64(K)*float64(N)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
}
