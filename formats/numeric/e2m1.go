package numeric

import "math"

// E2M1 (FP4): a 4-bit code sign<<3 | index, magnitudes 0, .5, 1, 1.5, 2, 3, 4, 6.
// Two codes share a byte, the even element in the low nibble.

var e2m1Magnitudes = [8]float32{0, 0.5, 1, 1.5, 2, 3, 4, 6}

// E2M1Max is the largest E2M1 magnitude.
const E2M1Max = 6

// E2M1ToFloat32 decodes the low 4 bits of c.
func E2M1ToFloat32(c byte) float32 {
	v := e2m1Magnitudes[c&7]
	if c&8 != 0 {
		return -v
	}
	return v
}

// e2m1Bounds are the decision points between neighbouring magnitudes.
var e2m1Bounds = [7]float32{0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5}

// Float32ToE2M1 encodes as ModelOpt's _cast_fp4 does: the index is the number
// of bounds below |x|, plus one when |x| is exactly 0.75, 1.75 or 3.5 (those
// ties go to the even mantissa; 0.25, 1.25, 2.5 and 5 tie downwards to an
// even code already). Saturates at 6. The sign is x < 0, as there: a
// negative value that rounds to zero gets code 8 (−0), while −0 itself and
// NaN get code 0.
func Float32ToE2M1(x float32) byte {
	if x != x {
		return 0
	}
	a := float32(math.Abs(float64(x)))
	var idx byte
	for _, b := range e2m1Bounds {
		if a > b {
			idx++
		}
	}
	if a == 0.75 || a == 1.75 || a == 3.5 {
		idx++
	}
	if x < 0 {
		return 8 | idx
	}
	return idx
}

// e2m1Pairs maps a packed byte to its two values, low nibble first.
var e2m1Pairs = func() (t [256][2]float32) {
	for b := range 256 {
		t[b] = [2]float32{E2M1ToFloat32(byte(b)), E2M1ToFloat32(byte(b) >> 4)}
	}
	return t
}()

// DecodeE2M1 decodes packed nibble pairs: dst[2i], dst[2i+1] from src[i]
// (one 8-byte table load and store a byte). dst must hold 2·len(src).
func DecodeE2M1(dst []float32, src []byte) {
	dst = dst[:2*len(src)]
	n := len(src) &^ 3
	for i := 0; i < n; i += 4 {
		s := (*[4]byte)(src[i : i+4])
		d := (*[8]float32)(dst[2*i : 2*i+8])
		*(*[2]float32)(d[0:2]) = e2m1Pairs[s[0]]
		*(*[2]float32)(d[2:4]) = e2m1Pairs[s[1]]
		*(*[2]float32)(d[4:6]) = e2m1Pairs[s[2]]
		*(*[2]float32)(d[6:8]) = e2m1Pairs[s[3]]
	}
	for i := n; i < len(src); i++ {
		*(*[2]float32)(dst[2*i:]) = e2m1Pairs[src[i]]
	}
}

// DecodeE2M1Blocks decodes packed nibble pairs and multiplies each run of
// block values by its scale: element k gets scales[k/block]. block must be
// even; dst must hold 2·len(src) values and scales ceil(2·len(src)/block).
func DecodeE2M1Blocks(dst []float32, src []byte, scales []float32, block int) {
	dst = dst[:2*len(src)]
	if block == 16 {
		decodeE2M1Blocks16(dst, src, scales)
		return
	}
	half := block / 2
	for s, scale := range scales {
		lo := s * half
		if lo >= len(src) {
			break
		}
		hi := min(lo+half, len(src))
		out := dst[2*lo : 2*hi]
		for i, b := range src[lo:hi] {
			p := &e2m1Pairs[b]
			o := (*[2]float32)(out[2*i:])
			o[0] = p[0] * scale
			o[1] = p[1] * scale
		}
	}
}

// decodeE2M1Blocks16 is the NVFP4 case: eight bytes and one scale a block,
// unrolled so each block is sixteen multiplies and no inner loop (pairs of
// blocks on AVX-512 where the CPU has it).
func decodeE2M1Blocks16(dst []float32, src []byte, scales []float32) {
	full := min(len(src)/8, len(scales))
	for k := e2m1Blocks16SIMD(dst, src[:8*full], scales[:full]); k < full; k++ {
		s := scales[k]
		in := (*[8]byte)(src[8*k : 8*k+8])
		o := (*[16]float32)(dst[16*k : 16*k+16])
		p0, p1, p2, p3 := &e2m1Pairs[in[0]], &e2m1Pairs[in[1]], &e2m1Pairs[in[2]], &e2m1Pairs[in[3]]
		p4, p5, p6, p7 := &e2m1Pairs[in[4]], &e2m1Pairs[in[5]], &e2m1Pairs[in[6]], &e2m1Pairs[in[7]]
		o[0], o[1], o[2], o[3] = p0[0]*s, p0[1]*s, p1[0]*s, p1[1]*s
		o[4], o[5], o[6], o[7] = p2[0]*s, p2[1]*s, p3[0]*s, p3[1]*s
		o[8], o[9], o[10], o[11] = p4[0]*s, p4[1]*s, p5[0]*s, p5[1]*s
		o[12], o[13], o[14], o[15] = p6[0]*s, p6[1]*s, p7[0]*s, p7[1]*s
	}
	if full < len(scales) && 8*full < len(src) {
		s := scales[full]
		for i := 8 * full; i < len(src); i++ {
			p := &e2m1Pairs[src[i]]
			dst[2*i] = p[0] * s
			dst[2*i+1] = p[1] * s
		}
	}
}

// PackE2M1 packs codes two a byte, the even element in the low nibble. An odd
// count leaves the last high nibble zero.
func PackE2M1(dst []byte, codes []byte) {
	dst = dst[:(len(codes)+1)/2]
	for i := range dst {
		lo := codes[2*i] & 0xF
		var hi byte
		if 2*i+1 < len(codes) {
			hi = codes[2*i+1] & 0xF
		}
		dst[i] = lo | hi<<4
	}
}
