package cpu

// Deliberately plain references, written from the producers' formulas
// (NUMERICS.md part 1) without the kernels' helpers: casts by searching every
// code for the nearest value, sums in the order written.

import (
	"math"
	"math/rand/v2"
)

// refMinifloat decodes a positive code of an FP8 format from its fields.
func refMinifloat(c byte, manBits, bias int) float64 {
	e := int(c) >> manBits
	m := int(c) & (1<<manBits - 1)
	if e == 0 {
		return float64(m) * math.Pow(2, float64(1-bias-manBits))
	}
	return (1 + float64(m)/math.Pow(2, float64(manBits))) * math.Pow(2, float64(e-bias))
}

// refCast is torch's RNE cast of an in-range float32 (callers clamp first):
// the nearest of every finite positive code, ties to the even code, the sign
// bit copied from x.
func refCast(x float32, manBits, bias int, maxCode byte) byte {
	a := math.Abs(float64(x))
	best, bestD := byte(0), math.Inf(1)
	for c := 0; c <= int(maxCode); c++ {
		d := math.Abs(refMinifloat(byte(c), manBits, bias) - a)
		if d < bestD || (d == bestD && c%2 == 0) {
			best, bestD = byte(c), d
		}
	}
	if math.Signbit(float64(x)) {
		best |= 0x80
	}
	return best
}

func refE4M3(x float32) byte          { return refCast(x, 3, 7, 0x7E) }
func refE5M2(x float32) byte          { return refCast(x, 2, 15, 0x7B) }
func refE4M3Value(c byte) float32     { return float32(refMinifloat(c&0x7F, 3, 7)) }
func refE2M1Magnitude(i byte) float32 { return []float32{0, 0.5, 1, 1.5, 2, 3, 4, 6}[i] }

// refCastFP4 is ModelOpt's _cast_fp4 as written: sign = x < 0; ord =
// searchsorted(bounds, |x|) (bounds strictly below) + (|x| in {.75, 1.75, 3.5}).
func refCastFP4(x float32) byte {
	bounds := []float32{0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5}
	a := float32(math.Abs(float64(x)))
	ord := byte(0)
	for _, b := range bounds {
		if b < a {
			ord++
		}
	}
	if a == 0.75 || a == 1.75 || a == 3.5 {
		ord++
	}
	if x < 0 {
		return 8 + ord
	}
	return ord
}

// refNVFP4Max is ModelOpt's max recipe: scale_2 = amax / 2688, block scale
// amax_b / f32(6·scale_2), 0 → 1, clamp, e4m3; elements w / f32(f32(scale)·scale_2).
func refNVFP4Max(w []float32, rows, cols int) (codes, scales []byte, scale2 float32) {
	var amax float32
	for _, x := range w {
		amax = float32(math.Max(float64(amax), math.Abs(float64(x))))
	}
	scale2 = amax / 2688
	codes = make([]byte, len(w))
	scales = make([]byte, len(w)/16)
	for blk := range scales {
		x := w[16*blk : 16*blk+16]
		var bamax float32
		for _, v := range x {
			bamax = float32(math.Max(float64(bamax), math.Abs(float64(v))))
		}
		six := float32(6) * scale2
		s := bamax / six
		if s == 0 {
			s = 1
		}
		s = float32(math.Min(math.Max(float64(s), 1.0/512), 448))
		scales[blk] = refE4M3(s)
		den := refE4M3Value(scales[blk]) * scale2
		for j, v := range x {
			codes[16*blk+j] = refCastFP4(v / den)
		}
	}
	return codes, scales, scale2
}

// refValues dequantizes codes with a block scale code and global scale.
func refBlockSSE(x []float32, code byte, scale2 float32) float32 {
	den := float32(refE4M3Value(code) * scale2)
	var e float32
	for _, v := range x {
		q := refCastFP4(v / den)
		val := refE2M1Magnitude(q&7) * den
		if q&8 != 0 {
			val = -val
		}
		d := float32(v - val)
		e = float32(e + float32(d*d))
	}
	return e
}

// refSweep is the plain 126-code sweep: lowest code at the minimum.
func refSweep(x []float32, scale2 float32) byte {
	best, bestE := byte(0), float32(math.Inf(1))
	for c := byte(1); c <= 0x7E; c++ {
		if e := refBlockSSE(x, c, scale2); e < bestE {
			best, bestE = c, e
		}
	}
	return best
}

// refSeed is GPT-QModel's seed of maximum m: where(amax>0, clamp(amax/(m·g)), 1), e4m3.
func refSeed(x []float32, m, g float32) byte {
	var bamax float32
	for _, v := range x {
		bamax = float32(math.Max(float64(bamax), math.Abs(float64(v))))
	}
	if bamax == 0 {
		return refE4M3(1)
	}
	inv := bamax / float32(m*g)
	return refE4M3(float32(math.Min(math.Max(float64(inv), 1.0/512), 448)))
}

// testWeights is N(0, σ) weights per row with σ varying over four decades,
// and the awkward cases planted: zero blocks, -0, tiny rows, exact ties.
func testWeights(rows, cols int, seed uint64) []float32 {
	r := rand.New(rand.NewPCG(seed, 7))
	w := make([]float32, rows*cols)
	for i := range rows {
		sigma := math.Pow(10, -2+4*r.Float64())
		for j := range cols {
			w[i*cols+j] = float32(r.NormFloat64() * sigma)
		}
	}
	if rows >= 4 && cols >= 32 {
		for j := range 16 {
			w[j] = 0 // an all-zero block
		}
		w[16] = float32(math.Copysign(0, -1)) // -0
		w[17] = -1e-30                        // a negative that rounds to zero
		for j := range cols {
			w[cols+j] = float32(r.NormFloat64() * 1e-12) // a tiny row: subnormal block scales
		}
		for j := range cols { // exact E2M1 ties once scaled: k·(amax/12)
			w[2*cols+j] = float32([]float64{0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5, 6}[j%8]) * float32(1-2*(j/8%2))
		}
	}
	return w
}

// refRefine is GPT-QModel's refine(values) for the values the block takes
// with scale code c: opt = Σx·v / max(Σv², 1), inverse = opt / g, clamp, e4m3.
func refRefine(x []float32, c byte, g float32) byte {
	den := float32(refE4M3Value(c) * g)
	var sv2, sxv float32
	for _, w := range x {
		q := refCastFP4(w / den)
		v := refE2M1Magnitude(q & 7)
		if w < 0 {
			v = -v
		}
		sv2 = float32(sv2 + float32(v*v))
		sxv = float32(sxv + float32(w*v))
	}
	if sv2 <= 0 {
		return refE4M3(1)
	}
	opt := sxv / float32(math.Max(float64(sv2), 1))
	inv := opt / g
	return refE4M3(float32(math.Min(math.Max(float64(inv), 1.0/512), 448)))
}

// refFourSix is GPT-QModel's four_six recipe for one block: the seed of
// M = 4, then of M = 6, each kept when its error is below the best so far,
// which starts at code 1.0 (0x38) with error +Inf.
func refFourSix(x []float32, g float32) byte {
	best, bestE := byte(0x38), float32(math.Inf(1))
	for _, m := range []float32{4, 6} {
		c := refSeed(x, m, g)
		if e := refBlockSSE(x, c, g); e < bestE {
			best, bestE = c, e
		}
	}
	return best
}

// refLeastSquares is GPT-QModel's least_squares recipe for one block.
func refLeastSquares(x []float32, g float32) byte {
	best, bestE := byte(0x38), float32(math.Inf(1)) // GPT-QModel's best_local starts at 1.0
	var seeds []byte
	for _, m := range []float32{4, 6} {
		c := refSeed(x, m, g)
		seeds = append(seeds, c)
		if e := refBlockSSE(x, c, g); e < bestE {
			best, bestE = c, e
		}
	}
	for _, s := range seeds {
		c := refRefine(x, s, g)
		if e := refBlockSSE(x, c, g); e < bestE {
			best, bestE = c, e
		}
	}
	c := refRefine(x, best, g)
	if e := refBlockSSE(x, c, g); e < bestE {
		best = c
	}
	return best
}
