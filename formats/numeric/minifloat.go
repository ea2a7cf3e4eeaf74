// Package numeric decodes and encodes the element types of quantized
// checkpoints: the IEEE floats (F32, F64, F16, BF16), the five FP8 variants
// (e4m3fn, e5m2, e4m3fnuz, e5m2fnuz, e8m0fnu), E2M1 (FP4) and integers.
//
// Each codec has a scalar decoder written from the format's definition, a
// bulk decoder on a lookup table built from that scalar decoder, and an
// encoder from float32 with round-to-nearest-even and finite saturation.
// Nothing here knows about files or quantization schemes; see packing and
// scheme for those.
package numeric

import "math"

// minifloat describes a signed 8-bit float with the given field widths.
type minifloat struct {
	expBits, manBits uint
	bias             int
	style            style
	maxCode          byte // largest finite positive code
	nanCode          byte // the code an encoder writes for NaN
}

type style uint8

const (
	styleIEEE style = iota // all-ones exponent: inf (m = 0) or NaN
	styleFN                // no inf; only all-ones exponent and mantissa is NaN
	styleFNUZ              // no inf, no negative zero; 0x80 is the only NaN
)

func (m *minifloat) decode(c byte) float32 {
	if m.style == styleFNUZ && c == 0x80 {
		return float32(math.NaN())
	}
	neg := c&0x80 != 0
	expMax := (1 << m.expBits) - 1
	e := int(c>>m.manBits) & expMax
	man := int(c) & (1<<m.manBits - 1)
	var v float64
	switch {
	case m.style == styleIEEE && e == expMax && man == 0:
		v = math.Inf(1)
	case m.style == styleIEEE && e == expMax:
		return float32(math.NaN())
	case m.style == styleFN && e == expMax && man == 1<<m.manBits-1:
		return float32(math.NaN())
	case e == 0:
		v = math.Ldexp(float64(man), 1-m.bias-int(m.manBits))
	default:
		v = math.Ldexp(float64(man|1<<m.manBits), e-m.bias-int(m.manBits))
	}
	if neg {
		v = -v
	}
	return float32(v)
}

func (m *minifloat) encode(x float32) byte {
	if x != x {
		return m.nanCode
	}
	var sign byte
	if math.Signbit(float64(x)) {
		sign = 0x80
	}
	a := math.Abs(float64(x))
	maxVal := float64(m.decode(m.maxCode))
	if a >= maxVal { // includes +inf: finite saturation
		return sign | m.maxCode
	}
	minExp := 1 - m.bias
	_, e := math.Frexp(a)
	exp := max(e-1, minExp)
	q := uint64(math.RoundToEven(math.Ldexp(a, int(m.manBits)-exp)))
	if q == 0 {
		if m.style == styleFNUZ {
			return 0
		}
		return sign
	}
	if q == 1<<(m.manBits+1) { // rounded up into the next binade
		q >>= 1
		exp++
	}
	var code uint64
	if q < 1<<m.manBits { // subnormal: exp is minExp, the exponent field 0
		code = q
	} else {
		code = uint64(exp+m.bias)<<m.manBits | (q - 1<<m.manBits)
	}
	if code > uint64(m.maxCode) {
		code = uint64(m.maxCode)
	}
	return sign | byte(code)
}

func (m *minifloat) table() (t [256]float32) {
	for c := range 256 {
		t[c] = m.decode(byte(c))
	}
	return t
}

// decodeTable is the shared bulk loop of every 8-bit code: one table load per
// element, eight elements per iteration so the loop overhead and bounds checks
// are paid once per 8 bytes.
func decodeTable(t *[256]float32, dst []float32, src []byte) {
	dst = dst[:len(src)]
	n := len(src) &^ 7
	for i := 0; i < n; i += 8 {
		s := (*[8]byte)(src[i : i+8])
		d := (*[8]float32)(dst[i : i+8])
		d[0], d[1], d[2], d[3] = t[s[0]], t[s[1]], t[s[2]], t[s[3]]
		d[4], d[5], d[6], d[7] = t[s[4]], t[s[5]], t[s[6]], t[s[7]]
	}
	for i := n; i < len(src); i++ {
		dst[i] = t[src[i]]
	}
}
