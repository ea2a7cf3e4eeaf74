package cpu

import (
	"math"
	"math/rand/v2"
	"testing"
)

// The AVX-512 and AVX2 moments loops against the Go loop, bit for bit, on values of
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
		a, b, c := newLanes(), newLanes(), newLanes()
		a.add(v, k)
		momentsAVX512(&v[0], n, k, &b)
		momentsAVX2(&v[0], n, k, &c)
		if a.nonFinite() != b.nonFinite() || a.nonFinite() != c.nonFinite() {
			t.Fatalf("trial %d: non-finite %v (Go) vs %v (AVX-512), %v (AVX2)", trial, a.nonFinite(), b.nonFinite(), c.nonFinite())
		}
		if a.nonFinite() {
			continue
		}
		if b.s1 != c.s1 || b.s2 != c.s2 || b.lo != c.lo || b.hi != c.hi {
			t.Fatalf("trial %d: AVX2 %+v differs from AVX-512 %+v", trial, c, b)
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

// The three loops alone on one 512 KiB band in cache.
func BenchmarkMomentsLoops(b *testing.B) {
	v := make([]float32, 128<<10)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range v {
		v[i] = float32(r.NormFloat64())
	}
	loops := []struct {
		name string
		ok   bool
		f    func(l *lanes)
	}{
		{"go", true, func(l *lanes) { l.add(v, 0) }},
		{"avx2", hasAVX2, func(l *lanes) { momentsAVX2(&v[0], len(v), 0, l) }},
		{"avx512", hasAVX512, func(l *lanes) { momentsAVX512(&v[0], len(v), 0, l) }},
	}
	for _, lp := range loops {
		b.Run(lp.name, func(b *testing.B) {
			if !lp.ok {
				b.Skip("not on this CPU")
			}
			b.SetBytes(4 * int64(len(v)))
			for b.Loop() {
				l := newLanes()
				lp.f(&l)
			}
		})
	}
}
