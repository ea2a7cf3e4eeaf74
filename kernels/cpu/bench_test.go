package cpu

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/quantscope/quantscope/kernels"
)

// Quantization speed against a memmove of the same bytes measured in the
// same run: SetBytes counts the float32 input (4 bytes a weight), and the
// paired benchmarks time the kernel and a copy of its input in alternation,
// reporting the kernel's bandwidth as a percentage of memmove's (%memmove).

func benchWeights(n int) []float32 {
	r := rand.New(rand.NewPCG(1, 2))
	w := make([]float32, n)
	for i := range w {
		w[i] = float32(r.NormFloat64() * 0.02)
	}
	return w
}

// Input sizes: 4 MiB (1 Mi weights, mostly in cache) and 64 MiB (a
// 4096×4096 projection, far past the caches).
var quantBenchSizes = []int{1 << 20, 16 << 20}

func BenchmarkRatioQuantizeNVFP4Max(b *testing.B) {
	for _, workers := range []int{1, 2} {
		for _, n := range quantBenchSizes {
			b.Run(fmt.Sprintf("cores=%d/in=%dMiB", workers, 4*n>>20), func(b *testing.B) {
				cols := 4096
				w := kernels.Matrix{Rows: n / cols, Cols: cols, Data: benchWeights(n)}
				dst := make([]float32, n)
				be := &Backend{Workers: workers}
				ctx := context.Background()
				// warm up: the copy's destination pages and the allocator
				copy(dst, w.Data)
				if _, err := be.QuantizeNVFP4(ctx, w, kernels.NVFP4Options{Recipe: kernels.RecipeMax}, nil); err != nil {
					b.Fatal(err)
				}
				var tMove, tQ, cMove, cQ time.Duration
				b.SetBytes(4 * int64(n))
				for b.Loop() {
					c0, t0 := procCPU(), time.Now()
					copy(dst, w.Data)
					c1, t1 := procCPU(), time.Now()
					if _, err := be.QuantizeNVFP4(ctx, w, kernels.NVFP4Options{Recipe: kernels.RecipeMax}, nil); err != nil {
						b.Fatal(err)
					}
					c2, t2 := procCPU(), time.Now()
					tMove += t1.Sub(t0)
					tQ += t2.Sub(t1)
					cMove += c1 - c0
					cQ += c2 - c1
				}
				b.ReportMetric(100*float64(tMove)/float64(tQ), "%memmove")
				// by the process's CPU time: a core's share, whatever the
				// machine's other load takes from the wall clock
				b.ReportMetric(100*float64(cMove)/float64(cQ), "%memmove-cpu")
			})
		}
	}
}

// BenchmarkMSESweep is ModelOpt's benchmark shape: 8192×4096 weights,
// 2 Mi blocks × 126 candidate scales. evals/s counts one block × one
// candidate as one evaluation (the sweep stops early once a candidate rounds
// every value of the block to zero, since every larger one then ties and
// cannot win: those candidates are counted as evaluated, as their result is
// known exactly).
func BenchmarkMSESweep(b *testing.B) {
	const rows, cols = 8192, 4096
	w := kernels.Matrix{Rows: rows, Cols: cols, Data: benchWeights(rows * cols)}
	for _, workers := range []int{1, 2} {
		b.Run(fmt.Sprintf("cores=%d", workers), func(b *testing.B) {
			be := &Backend{Workers: workers}
			b.SetBytes(4 * rows * cols)
			start := time.Now()
			for b.Loop() {
				if _, err := be.QuantizeNVFP4(context.Background(), w, kernels.NVFP4Options{Recipe: kernels.RecipeMSE}, nil); err != nil {
					b.Fatal(err)
				}
			}
			per := time.Since(start).Seconds() / float64(b.N)
			b.ReportMetric(float64(rows*cols/16*126)/per, "evals/s")
		})
	}
}
