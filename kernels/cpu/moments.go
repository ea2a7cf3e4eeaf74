package cpu

import "math"

// lanes are addMoments' sixteen running sums: value i of a band goes to
// lane i%16, so that no one dependency chain sets the pace and the AVX-512
// kernel (moments_amd64.s) computes the same sums bit for bit, one ZMM
// register of float32 an iteration.
type lanes struct {
	s1, s2 [16]float64 // Σ(x−k), Σ(x−k)²
	lo, hi [16]float32
	exp    [16]uint32 // the largest exponent field seen (0x7F800000: NaN or ±inf)
}

func newLanes() lanes {
	var l lanes
	inf := float32(math.Inf(1))
	for j := range l.lo {
		l.lo[j], l.hi[j] = inf, -inf
	}
	return l
}

// add is the Go loop: len(v) a multiple of 16. It works on copies in
// locals, so the compiler need not reload the sums through l after every
// store, and stops at the first NaN or ±inf (the caller then takes the
// careful loop and drops these sums).
func (l *lanes) add(v []float32, k float64) {
	s1, s2, lo, hi := l.s1, l.s2, l.lo, l.hi
	defer func() { l.s1, l.s2, l.lo, l.hi = s1, s2, lo, hi }()
	for i := 0; i+16 <= len(v); i += 16 {
		q := (*[16]float32)(v[i : i+16])
		for j, x := range q {
			if math.Float32bits(x)&expMask == expMask {
				l.exp[0] = expMask
				return
			}
			if x < lo[j] { // plain compares: the builtins' NaN handling costs
				lo[j] = x
			}
			if x > hi[j] {
				hi[j] = x
			}
			d := float64(x) - k
			s1[j] += d
			s2[j] += d * d
		}
	}
}

// nonFinite says whether any value added was NaN or ±inf.
func (l *lanes) nonFinite() bool {
	for _, e := range l.exp {
		if e == expMask {
			return true
		}
	}
	return false
}

// sums folds the lanes in a fixed order (pairwise).
func (l *lanes) sums() (t1, t2 float64, lo, hi float32) {
	fold := func(s *[16]float64) float64 {
		var h [8]float64
		for j := range h {
			h[j] = s[j] + s[j+8]
		}
		return ((h[0] + h[4]) + (h[2] + h[6])) + ((h[1] + h[5]) + (h[3] + h[7]))
	}
	lo, hi = l.lo[0], l.hi[0]
	for j := 1; j < 16; j++ {
		lo, hi = min(lo, l.lo[j]), max(hi, l.hi[j])
	}
	return fold(&l.s1), fold(&l.s2), lo, hi
}
