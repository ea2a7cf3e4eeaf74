package cpu

import (
	"math"
)

// Fast paths that give the same codes as the plain float32 arithmetic.
//
// E2M1 index of f32(a / d): the seven decision points (.25, .75, 1.25,
// 1.75, 2.5, 3.5, 5) have at most three significant bits, so the top 12
// bits of a non-negative float32 (exponent and three mantissa bits) name an
// interval whose interior has one index, a decision point sitting only on
// an interval's left edge. q' = a · f32(1/d) is within 2 ulps of f32(a / d);
// when q' lies more than 4 ulps from every interval edge (nearly always),
// both fall in the same interval's interior and a table lookup gives the
// index; otherwise the exact division decides.

// e2m1ByTop12 is the index of each interval's interior.
var e2m1ByTop12 = func() (t [1 << 11]byte) {
	for k := range t {
		t[k] = e2m1Index(math.Float32frombits(uint32(k)<<20 | 1<<19))
	}
	return t
}()

// fastDiv reports whether the reciprocal path is sound for divisor d: a
// normal d whose reciprocal is finite.
func fastDiv(d float32) (r float32, ok bool) {
	if !(d >= 0x1p-126) {
		return 0, false
	}
	r = 1 / d
	return r, r <= math.MaxFloat32
}

// e2m1IndexFast is e2m1Index(a / d) for a ≥ 0, given r = f32(1/d) from fastDiv.
func e2m1IndexFast(a, d, r float32) byte {
	bits := math.Float32bits(a * r)
	if bits < 0x00800000 || (bits+4)&0xFFFFF < 8 {
		return e2m1Index(a / d)
	}
	return e2m1ByTop12[bits>>20]
}

// e2m1CodeFast is e2m1Code(w / d) (ModelOpt's sign rule) on the fast path.
// On the table path q' is a normal float32, so f32(w / d) is nonzero and a
// negative w keeps its sign bit; -0 and underflow take the exact path.
func e2m1CodeFast(w, d, r float32) byte {
	bits := math.Float32bits(abs32(w) * r)
	if bits < 0x00800000 || (bits+4)&0xFFFFF < 8 {
		return e2m1Code(w / d)
	}
	i := e2m1ByTop12[bits>>20]
	if w < 0 {
		i |= 8
	}
	return i
}

// e4m3Scale is numeric.Float32ToE4M3 for s in [2^-9, 448] (castScale's
// clamped range): round to nearest even on the float32 bits.
func e4m3Scale(s float32) byte {
	if s < 0x1p-6 { // subnormal codes: multiples of 2^-9
		return byte(math.RoundToEven(float64(s) * 512))
	}
	bits := math.Float32bits(s)
	e := int(bits>>23) - 127
	m := bits & 0x7FFFFF
	keep := m >> 20
	rem := m & 0xFFFFF
	code := uint32(e+7)<<3 | keep
	if rem > 0x80000 || (rem == 0x80000 && keep&1 == 1) {
		code++ // a carry into the exponent is the right code too
	}
	return byte(min(code, 0x7E))
}
