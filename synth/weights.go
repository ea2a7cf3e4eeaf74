package synth

import (
	"math"
	"math/rand/v2"
)

// randomMatrix draws a weight like a trained linear layer's: a normal bulk of
// standard deviation std, rows of varying scale, and rare outliers of 8–30×,
// which are what make block scaling matter.
func randomMatrix(r *rand.Rand, shape []uint64, std float32) Matrix {
	n := uint64(1)
	for _, d := range shape {
		n *= d
	}
	cols := shape[len(shape)-1]
	data := make([]float32, n)
	var rowScale float32 = 1
	for i := range data {
		if uint64(i)%cols == 0 {
			rowScale = float32(0.5 + r.Float64())
		}
		v := float32(r.NormFloat64()) * std * rowScale
		if r.IntN(512) == 0 {
			v *= float32(8 + 22*r.Float64())
		}
		data[i] = v
	}
	return Matrix{Shape: shape, Data: data}
}

// normWeight is an RMSNorm weight: values near 1.
func normWeight(r *rand.Rand, n uint64) Matrix {
	d := make([]float32, n)
	for i := range d {
		d[i] = float32(1 + 0.1*r.NormFloat64())
	}
	return Matrix{Shape: []uint64{n}, Data: d}
}

func absMax(x []float32) float32 {
	var m float32
	for _, v := range x {
		if a := float32(math.Abs(float64(v))); a > m {
			m = a
		}
	}
	return m
}

func rng(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 0x5eed)) }

// NVFP4SeedTie is a rows × cols weight (cols a multiple of 16) on which
// GPT-QModel's two NVFP4 block seeds tie: global scale 1 (amax 1792), and
// each block's values in {0, ±6, ±12, ±24}·2^k with one ±24·2^k, exact
// under both seeds (block scales 6·2^k for M = 4, 4·2^k for M = 6), so
// they reach error 0 with different codes and M = 4's must win.
func NVFP4SeedTie(rows, cols int, seed uint64) []float32 {
	r := rand.New(rand.NewPCG(seed, 5))
	w := make([]float32, rows*cols)
	for b := range rows * cols / 16 {
		k := r.IntN(16) - 9
		for j := range 16 {
			v := float32([]int{0, 6, 12, 24}[r.IntN(4)]) * float32(math.Ldexp(1, k))
			if j == 0 {
				v = float32(math.Ldexp(24, k))
			}
			if r.IntN(2) == 0 {
				v = -v
			}
			w[16*b+j] = v
		}
	}
	w[0] = 1792
	return w
}
