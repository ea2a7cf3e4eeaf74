package cpu

import (
	"math"
	"math/rand/v2"
	"testing"
)

// The AVX-512 moments loop against the Go loop, bit for bit, on values of
// every kind it meets: wide exponents, ±0, subnormals, and bands with NaN
// or ±inf (where only the non-finite flag must agree).
func TestMomentsKernelMatchesGo(t *testing.T) {
	if !hasAVX512 {
		t.Skip("no AVX-512 on this CPU: only the Go loop runs")
	}
	r := rand.New(rand.NewPCG(3, 4))
	for trial := range 200 {
		n := 16 * (1 + r.IntN(300))
		v := make([]float32, n)
		for i := range v {
			switch r.IntN(20) {
			case 0:
				v[i] = float32(math.Copysign(0, r.NormFloat64()))
			case 1:
				v[i] = math.Float32frombits(r.Uint32() & 0x807FFFFF) // subnormal
			case 2:
				v[i] = float32(r.NormFloat64() * 1e30)
			default:
				v[i] = float32(r.NormFloat64()*3 + 1)
			}
		}
		if trial%10 == 9 {
			v[r.IntN(n)] = []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1))}[trial%3]
		}
		k := float64(v[0])
		a, b := newLanes(), newLanes()
		a.add(v, k)
		momentsAVX512(&v[0], n, k, &b)
		if a.nonFinite() != b.nonFinite() {
			t.Fatalf("trial %d: non-finite %v (Go) vs %v (AVX-512)", trial, a.nonFinite(), b.nonFinite())
		}
		if a.nonFinite() {
			continue
		}
		for j := range 16 {
			if math.Float64bits(a.s1[j]) != math.Float64bits(b.s1[j]) || math.Float64bits(a.s2[j]) != math.Float64bits(b.s2[j]) ||
				math.Float32bits(a.lo[j]) != math.Float32bits(b.lo[j]) || math.Float32bits(a.hi[j]) != math.Float32bits(b.hi[j]) {
				t.Fatalf("trial %d lane %d: Go %v %v %v %v, AVX-512 %v %v %v %v", trial, j,
					a.s1[j], a.s2[j], a.lo[j], a.hi[j], b.s1[j], b.s2[j], b.lo[j], b.hi[j])
			}
		}
	}
}

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
		useMomentsAVX512 = simd && hasAVX512
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
			if simd && !hasAVX512 {
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
