package cpu

import (
	"context"
	"fmt"

	"github.com/quantscope/quantscope/kernels"
)

// The W4A-NVFP4 linear, GPT-QModel's arithmetic with a float32 model dtype
// (activation_floatx.py:170-315, w4a_nvfp4.py:140-227):
//
//	global       g = f32(amax/(448·6)) nvidia, f32(amax/(448·4)) otherwise,
//	             1 for amax 0; amax the calibrated producer's or, without
//	             one, of the whole operand (every token: not causal)
//	block scale  s_b chosen per 16 values by the recipe (gptqmodelBlockAlg)
//	codes        a_i = e2m1(x_i / f32(s_b·g)), nearest, ties to even
//	planes       high = floor((c+2)/4), low = c − 4·high
//	group sums   L_tog = Σ_{i in g} (a_i·s_b)·low_oi, H_tog likewise with
//	             high: each exact (an int32 in units of 2^-10, |sum| < 2^31),
//	             rounded once to float32 (the FP32 accumulator of one
//	             block-scaled MMA per group; exact whenever it fits 24 bits)
//	output       y_to = f32(f32(Σ_g f32(f32(L + f32(4·H))·scale_og)) · g) + bias_o
//
// the group terms added in group order without a fused multiply-add.

// actAlg maps an activation recipe to its block algorithm.
func actAlg(recipe string) (int, error) {
	switch recipe {
	case kernels.ActNvidia:
		return blockNvidia, nil
	case kernels.ActFourSix:
		return blockFourSix, nil
	case kernels.ActLeastSquares, "":
		return blockLeastSquares, nil
	case kernels.ActLeastSquaresGrid:
		return blockLeastSquaresGrid, nil
	}
	return 0, kernels.CheckActRecipe(recipe)
}

// NVFP4ActBlock quantizes one 16-value block with global scale g under the
// recipe's block algorithm: its E4M3 scale code and E2M1 codes. Exported for
// the calibration passes' tests and reports.
func NVFP4ActBlock(codes []byte, x []float32, g float32, recipe string) (byte, error) {
	alg, err := actAlg(recipe)
	if err != nil {
		return 0, err
	}
	return actBlock(codes, x, g, alg), nil
}

func actBlock(codes []byte, x []float32, g float32, alg int) byte {
	x = x[:16]
	var bamax float32
	for _, v := range x {
		bamax = max(bamax, abs32(v))
	}
	sc := gptqmodelBlockAlg(x, bamax, g, alg)
	d := blockDivisor(sc, g)
	for j, v := range x {
		codes[j] = e2m1Code(v / d)
	}
	return sc
}

// W4ANVFP4Quantize implements kernels.W4ANVFP4.
func (b *Backend) W4ANVFP4Quantize(ctx context.Context, x kernels.Matrix, recipe string, global float32) (*kernels.NVFP4Tokens, error) {
	if recipe == "" {
		recipe = kernels.ActLeastSquares
	}
	alg, err := actAlg(recipe)
	if err != nil {
		return nil, err
	}
	if err := checkMatrix("input", x); err != nil {
		return nil, err
	}
	if x.Cols%16 != 0 {
		return nil, fmt.Errorf("rule nvfp4-shape: input width %d is not a multiple of 16", x.Cols)
	}
	if err := checkFinite("w4a input", x); err != nil {
		return nil, err
	}
	T, K := x.Rows, x.Cols
	a := &kernels.NVFP4Tokens{Rows: T, Cols: K, Codes: make([]byte, T*K), Scales: make([]byte, T*K/16), Global: global}
	if !(global > 0) {
		if global != 0 {
			return nil, fmt.Errorf("rule nvfp4-global-scale: calibrated global scale %v must be positive", global)
		}
		var amax float32
		for _, v := range x.Data {
			amax = max(amax, abs32(v))
		}
		if a.Global, err = kernels.NVFP4GlobalScale(amax, recipe); err != nil {
			return nil, err
		}
		a.Dynamic = true
	}
	if float32(e4m3MinScale*a.Global) == 0 {
		return nil, fmt.Errorf("rule nvfp4-global-scale: global scale %g is too small for float32 block divisors", a.Global)
	}
	g := a.Global
	err = b.parallel(ctx, T, func(t int) {
		for n := range K / 16 {
			i := t*K + 16*n
			a.Scales[i/16] = actBlock(a.Codes[i:i+16], x.Data[i:i+16], g, alg)
		}
	})
	return a, err
}

// e2m1Halves is each E2M1 code's signed value times 2: an integer.
var e2m1Halves = func() (t [16]int32) {
	for c := range 16 {
		t[c] = int32(2 * e2m1Value(byte(c)))
	}
	return t
}()

// W4ANVFP4Linear implements kernels.W4ANVFP4.
func (b *Backend) W4ANVFP4Linear(ctx context.Context, a *kernels.NVFP4Tokens, w *kernels.W4AWeight) (kernels.Matrix, error) {
	if a == nil || len(a.Codes) != a.Rows*a.Cols || a.Cols%16 != 0 || len(a.Scales) != a.Rows*a.Cols/16 {
		return kernels.Matrix{}, fmt.Errorf("w4a: malformed NVFP4 activation")
	}
	if err := checkW4AWeight(w); err != nil {
		return kernels.Matrix{}, err
	}
	if a.Rows > 0 && a.Cols != w.In {
		return kernels.Matrix{}, &kernels.W4AError{Module: w.Name, Rule: "w4a-input", Msg: fmt.Sprintf("input has %d columns, the weight takes %d", a.Cols, w.In)}
	}
	T, K, N := a.Rows, a.Cols, w.Out
	y := kernels.Matrix{Rows: T, Cols: N, Data: make([]float32, T*N)}
	if T == 0 {
		return y, nil
	}
	// activation values a_i·s_b in units of 2^-10 (E2M1 halves × E4M3 units of 2^-9)
	units := make([]int32, T*K)
	for i, c := range a.Codes {
		units[i] = e2m1Halves[c&15] * e4m3Units[a.Scales[i/16]]
	}
	high, low := W4ANVFP4Planes(w.Codes)
	groups := K / kernels.W4AGroup
	g := a.Global
	err := b.parallel(ctx, N/w4aPanel, func(p int) {
		for n := p * w4aPanel; n < (p+1)*w4aPanel; n++ {
			hi, lo := high[n*K:(n+1)*K], low[n*K:(n+1)*K]
			for t := range T {
				x := units[t*K : (t+1)*K]
				var acc float32
				for gr := range groups {
					// |a·s_b| ≤ 12·229376 units, planes ≤ 2 in magnitude:
					// a group's sum stays under 128·2^22.4 < 2^31
					var L, H int32
					xg := x[gr*kernels.W4AGroup : (gr+1)*kernels.W4AGroup]
					lg := lo[gr*kernels.W4AGroup : (gr+1)*kernels.W4AGroup]
					hg := hi[gr*kernels.W4AGroup : (gr+1)*kernels.W4AGroup]
					for i, v := range xg {
						L += v * int32(lg[i])
						H += v * int32(hg[i])
					}
					lf := float32(L) * (1.0 / 1024)
					hf := float32(H) * (1.0 / 1024)
					acc += float32(float32(lf+float32(4*hf)) * w.Scales[n*groups+gr])
				}
				v := float32(acc * g)
				if w.Bias != nil {
					v += w.Bias[n]
				}
				y.Data[t*N+n] = v
			}
		}
	})
	return y, err
}
