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
