package ptx

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/quantscope/quantscope/kernels"
	"github.com/quantscope/quantscope/kernels/cpu"
)

// The forward-pass kernels' sources compiled for the CPU
// (testdata/host_fwd.cpp) against kernels/cpu and model/'s arithmetic.

func hostFwdKernels(t *testing.T) string {
	return buildHost(t, "host_fwd", "c++17", []string{"w4a_nvfp4.cu", "llama.cu", "calib.cu"})
}

// nibbles packs one 4-bit code a byte into two a byte, element 2j low.
func nibbles(c []byte) []byte {
	p := make([]byte, len(c)/2)
	for i := range p {
		p[i] = c[2*i]&15 | c[2*i+1]<<4
	}
	return p
}

// w4aQ packs centred INT4 codes as uncentred nibbles q = c + 8.
// w4aActs draws T×K activations, normal values scaled by 2^e with e
// uniform in [-spread/2, spread/2).
func w4aActs(r *rand.Rand, T, K, spread int) kernels.Matrix {
	x := kernels.Matrix{Rows: T, Cols: K, Data: make([]float32, T*K)}
	for i := range x.Data {
		x.Data[i] = float32(r.NormFloat64() * math.Pow(2, float64(r.IntN(spread)-spread/2)))
	}
	return x
}

// w4aWeight draws an N×K INT4 weight: codes in [-8, 7], a scale a group of
// 128 in [2^-11·0.5, 1.5).
func w4aWeight(r *rand.Rand, K, N int) *kernels.W4AWeight {
	w := &kernels.W4AWeight{Name: "m", In: K, Out: N, Codes: make([]int8, N*K), Scales: make([]float32, N*K/128)}
	for i := range w.Codes {
		w.Codes[i] = int8(r.IntN(16) - 8)
	}
	for i := range w.Scales {
		w.Scales[i] = float32(math.Ldexp(r.Float64()+0.5, -r.IntN(12)))
	}
	return w
}

func w4aQ(c []int8) []byte {
	q := make([]byte, len(c)/2)
	for i := range q {
		q[i] = byte(c[2*i]+8) | byte(c[2*i+1]+8)<<4
	}
	return q
}

func TestHostKernelsW4ANVFP4(t *testing.T) {
	bin := hostFwdKernels(t)
	r := rand.New(rand.NewPCG(7, 8))
	be := cpu.New()
	ctx := context.Background()
	for _, s := range []struct {
		T, K, N int
		recipe  string
		spread  int
	}{{1, 128, 32, kernels.ActNvidia, 4}, {5, 512, 64, kernels.ActLeastSquares, 20}, {3, 1024, 96, kernels.ActFourSix, 40}} {
		x := kernels.Matrix{Rows: s.T, Cols: s.K, Data: make([]float32, s.T*s.K)}
		for i := range x.Data {
			x.Data[i] = float32(r.NormFloat64() * math.Pow(2, float64(r.IntN(s.spread)-s.spread/2)))
			if r.IntN(17) == 0 {
				x.Data[i] = 0
			}
		}
		w := w4aWeight(r, s.K, s.N)
		a, err := be.W4ANVFP4Quantize(ctx, x, s.recipe, 0)
		if err != nil {
			t.Fatal(err)
		}
		want, err := be.W4ANVFP4Linear(ctx, a, w)
		if err != nil {
			t.Fatal(err)
		}
		in := append(append(append(nibbles(a.Codes), a.Scales...), w4aQ(w.Codes)...), f32b(w.Scales)...)
		got := runHost(t, bin, in, "w4a_nvfp4", fmt.Sprint(s.T), fmt.Sprint(s.K), fmt.Sprint(s.N), fmt.Sprintf("%.9g", a.Global))
		sameBits(t, fmt.Sprintf("w4a_nvfp4 %+v", s), got, want.Data)
	}
}
