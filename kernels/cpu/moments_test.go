package cpu

import (
	"math"
	"math/rand/v2"
	"testing"
)

// The band statistics of both paths agree exactly, and with a plain
// two-pass float64 mean and standard deviation.
func TestAddMomentsBothPaths(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	v := make([]float32, 100_003)
	for i := range v {
		v[i] = float32(r.NormFloat64()*0.02 + 0.001)
	}
	run := func(simd bool) *acc {
		defer func(old bool) { useMomentsAVX512 = old }(useMomentsAVX512)
		useMomentsAVX512 = simd && hasMomentsKernel
		a := newAcc(false)
		for i := 0; i < len(v); i += 8191 {
			a.addMoments(v[i:min(i+8191, len(v))])
		}
		return a
	}
	g, s := run(false), run(true)
	if g.n != s.n || g.mean != s.mean || g.m2 != s.m2 || g.min != s.min || g.max != s.max {
		t.Fatalf("Go %+v vs SIMD %+v", *g, *s)
	}
	var sum float64
	lo, hi := v[0], v[0]
	for _, x := range v {
		sum += float64(x)
		lo, hi = min(lo, x), max(hi, x)
	}
	mean := sum / float64(len(v))
	var m2 float64
	for _, x := range v {
		d := float64(x) - mean
		m2 += d * d
	}
	if g.n != int64(len(v)) || g.min != lo || g.max != hi || math.Abs(g.mean-mean) > 1e-15 || math.Abs(g.m2-m2) > 1e-12*m2 {
		t.Fatalf("got n %d min %v max %v mean %v m2 %v, plain %v %v %v %v", g.n, g.min, g.max, g.mean, g.m2, lo, hi, mean, m2)
	}
}

// BenchmarkAddMoments: one 512 KiB band in cache, Go loop and AVX-512.
func BenchmarkAddMoments(b *testing.B) {
	v := make([]float32, 128<<10)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range v {
		v[i] = float32(r.NormFloat64())
	}
	for _, simd := range []bool{false, true} {
		name := map[bool]string{false: "go", true: "avx512"}[simd]
		b.Run(name, func(b *testing.B) {
			if simd && !hasMomentsKernel {
				b.Skip("no AVX-512")
			}
			defer func(old bool) { useMomentsAVX512 = old }(useMomentsAVX512)
			useMomentsAVX512 = simd
			b.SetBytes(4 * int64(len(v)))
			for b.Loop() {
				newAcc(false).addMoments(v)
			}
		})
	}
}
