package numeric

import "math"

// E8M0 (float8_e8m0fnu), the MX block scale: the value 2^(e−127), no sign,
// no zero, 0xFF is NaN.

var e8m0Table = func() (t [256]float32) {
	for c := range 256 {
		t[c] = E8M0ToFloat32(byte(c))
	}
	return t
}()

// E8M0ToFloat32 decodes one e8m0fnu code.
func E8M0ToFloat32(c byte) float32 {
	if c == 0xFF {
		return float32(math.NaN())
	}
	return float32(math.Ldexp(1, int(c)-127))
}

// Float32ToE8M0 rounds x to the nearest power of two (a mantissa of 1.5 or
// more rounds up, which is round-to-nearest-even with no mantissa bits), saturating to [2^-127, 2^127]. NaN, negative numbers and zero have no
// e8m0 code: NaN and negatives give the NaN code 0xFF, zero the smallest code.
func Float32ToE8M0(x float32) byte {
	if x != x || x < 0 {
		return 0xFF
	}
	if x == 0 {
		return 0
	}
	frac, e := math.Frexp(float64(x)) // x = frac·2^e, frac in [0.5, 1)
	exp := e - 1
	if frac*2 >= 1.5 { // mantissa in [1,2): 1.5 and above round up (1.5 ties to 2, the even code)
		exp++
	}
	exp = min(max(exp, -127), 127)
	return byte(exp + 127)
}

// DecodeE8M0 decodes len(src) codes into dst[:len(src)].
func DecodeE8M0(dst []float32, src []byte) { decodeTable(&e8m0Table, dst, src) }
