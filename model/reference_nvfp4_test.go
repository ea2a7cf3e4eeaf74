package model

import (
	"math"
	"strings"
)

// The test's own W4A-NVFP4 linear, written plainly from
// activation_floatx.py:170-315 and w4a_nvfp4.py:209-227: the operand in
// float32, global scale amax/(448·M) over the whole operand (or the
// calibrated one), per 16-block the recipe's E4M3 scale, E2M1 values, then
// g · Σ_g scale_g · Σ_i value_i·c_i in float64.

func plainE2M1(a float32) float32 { // |a|, nearest, ties to even, saturating
	switch {
	case a <= 0.25:
		return 0
	case a < 0.75:
		return 0.5
	case a <= 1.25:
		return 1
	case a < 1.75:
		return 1.5
	case a <= 2.5:
		return 2
	case a < 3.5:
		return 3
	case a <= 5:
		return 4
	}
	return 6
}

func plainScale(v float32) float32 { // clamp to [2^-9, 448], E4M3
	return float32(plainE4M3(math.Min(math.Max(float64(v), 1.0/512), 448)))
}

func plainBlockSSE(x []float32, s, g float32) float32 {
	d := s * g
	var e float32
	for _, v := range x {
		q := plainE2M1(float32(math.Abs(float64(v/d)))) * d
		diff := float32(math.Abs(float64(v))) - q
		e += float32(diff * diff)
	}
	return e
}

func plainRefine(x []float32, s, g float32) float32 {
	d := s * g
	var den, num float32
	for _, v := range x {
		q := float32(math.Copysign(float64(plainE2M1(float32(math.Abs(float64(v/d))))), float64(v)))
		den += float32(q * q)
		num += float32(v * q)
	}
	if den <= 0 {
		return 1
	}
	return plainScale(num / float32(math.Max(float64(den), 1)) / g)
}

// plainActBlock returns the E4M3 scale (as a value) of one block.
func plainActBlock(x []float32, g float32, recipe string) float32 {
	var amax float32
	for _, v := range x {
		amax = float32(math.Max(float64(amax), math.Abs(float64(v))))
	}
	best, bestE := float32(0), float32(math.Inf(1))
	try := func(s float32) {
		if e := plainBlockSSE(x, s, g); e < bestE {
			best, bestE = s, e
		}
	}
	maxima := []float32{4, 6}
	if recipe == "nvidia" {
		maxima = maxima[1:]
	}
	var seeds []float32
	for _, m := range maxima {
		s := float32(1)
		if amax > 0 {
			s = plainScale(amax / (m * g))
		}
		seeds = append(seeds, s)
		try(s)
	}
	if recipe == "least_squares" {
		for _, s := range seeds {
			try(plainRefine(x, s, g))
		}
		try(plainRefine(x, best, g))
	}
	return best
}

// plainNVFP4Values quantizes an operand and returns its values (q·s_b, the
// global scale left out) and the global scale.
func plainNVFP4Values(x [][]float64, recipe string, global float32) ([][]float64, float32) {
	g := global
	if g == 0 {
		var amax float32
		for _, row := range x {
			for _, v := range row {
				amax = float32(math.Max(float64(amax), math.Abs(float64(float32(v)))))
			}
		}
		den := float32(448 * 4)
		if recipe == "nvidia" {
			den = 448 * 6
		}
		g = amax / den
		if amax == 0 {
			g = 1
		}
	}
	vals := make([][]float64, len(x))
	for t, row := range x {
		vals[t] = make([]float64, len(row))
		for b := 0; b < len(row); b += 16 {
			blk := make([]float32, 16)
			for j := range blk {
				blk[j] = float32(row[b+j])
			}
			s := plainActBlock(blk, g, recipe)
			for j, v := range blk {
				vals[t][b+j] = math.Copysign(float64(plainE2M1(float32(math.Abs(float64(v/(s*g)))))), float64(v)) * float64(s)
			}
		}
	}
	return vals, g
}

// refW4ANVFP4 is the plain NVFP4 linear; scales maps the producers, and
// o_proj / down_proj use theirs (the norm outputs repack dynamically). fp8
// names the projections that run W4A-FP8 instead (the mixed policy).
func refW4ANVFP4(codes map[string][]int8, scales map[string][]float64, dims map[string][2]int, recipe string, producer map[string]float32, fp8 func(string) bool) refLinear {
	fp8Lin := refW4AFP8(codes, scales, dims)
	return func(name string, x [][]float64) [][]float64 {
		if fp8 != nil && fp8(name) {
			return fp8Lin(name, x)
		}
		var g float32
		if strings.HasSuffix(name, "o_proj") || strings.HasSuffix(name, "down_proj") {
			g = producer[name+".input"]
		}
		vals, g := plainNVFP4Values(x, recipe, g)
		c, sc := codes[name], scales[name]
		out, in := dims[name][0], dims[name][1]
		y := make([][]float64, len(x))
		for t := range x {
			y[t] = make([]float64, out)
			for o := range out {
				acc := 0.0
				for gr := range in / 128 {
					p := 0.0
					for i := gr * 128; i < (gr+1)*128; i++ {
						p += vals[t][i] * float64(c[o*in+i])
					}
					acc += p * sc[o*(in/128)+gr]
				}
				y[t][o] = acc * float64(g)
			}
		}
		return y
	}
}
