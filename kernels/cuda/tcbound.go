package cuda

import (
	"math"

	"github.com/quantscope/quantscope/formats/numeric"
	"github.com/quantscope/quantscope/kernels"
	"github.com/quantscope/quantscope/kernels/cpu"
)

// W4AFP8TCBound is the tensor-core W4A-FP8 kernel's stated tolerance
// against kernels/cpu: 2^-20 · s_t · Σ_g |scale_ng| · Σ_{i∈g} |a_ti·c_ni|.
// Each group sum is exact, or (its partial sums past FP32's 24 bits) a few
// FP32 roundings of terms bounded by Σ|a·c| off; the group terms and the
// token scale are then rounded as on the CPU.
func W4AFP8TCBound(a *kernels.FP8Tokens, w *kernels.W4AWeight) []float64 {
	T, K, N := a.Rows, a.Cols, w.Out
	groups := K / kernels.W4AGroup
	b := make([]float64, T*N)
	for t := range T {
		for n := range N {
			var s float64
			for g := range groups {
				var ac float64
				for i := g * 128; i < (g+1)*128; i++ {
					ac += math.Abs(float64(numeric.E4M3ToFloat32(a.Codes[t*K+i])) * float64(w.Codes[n*K+i]))
				}
				s += math.Abs(float64(w.Scales[n*groups+g])) * ac
			}
			b[t*N+n] = 0x1p-20 * float64(a.Scales[t]) * s
		}
	}
	return b
}

// W4ANVFP4TCBound is the tensor-core W4A-NVFP4 kernel's stated tolerance:
// 2^-20 · g · Σ_g |scale_ng| · Σ_{i∈g} |a_ti·s_b|·(|low_ni| + 4·|high_ni|).
func W4ANVFP4TCBound(a *kernels.NVFP4Tokens, w *kernels.W4AWeight) []float64 {
	T, K, N := a.Rows, a.Cols, w.Out
	groups := K / kernels.W4AGroup
	high, low := cpu.W4ANVFP4Planes(w.Codes)
	b := make([]float64, T*N)
	for t := range T {
		for n := range N {
			var s float64
			for g := range groups {
				var ac float64
				for i := g * 128; i < (g+1)*128; i++ {
					v := math.Abs(float64(numeric.E2M1ToFloat32(a.Codes[t*K+i]&15)) * float64(numeric.E4M3ToFloat32(a.Scales[(t*K+i)/16])))
					ac += v * (math.Abs(float64(low[n*K+i])) + 4*math.Abs(float64(high[n*K+i])))
				}
				s += math.Abs(float64(w.Scales[n*groups+g])) * ac
			}
			b[t*N+n] = 0x1p-20 * float64(a.Global) * s
		}
	}
	return b
}
