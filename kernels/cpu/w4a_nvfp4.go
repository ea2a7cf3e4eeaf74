package cpu

import (
	"github.com/quantscope/quantscope/kernels"
)

// The weight side of W4A-NVFP4 (W4ANVFP4Linear.post_init and forward,
// w4a_nvfp4.py:140-153, :209-227). The centred INT4 codes c ∈ [−8, 7] do not
// fit E2M1, so GPT-QModel stores two planes that do, exactly:
//
//	high = floor((c+2)/4) ∈ [−2, 2],  low = c − 4·high ∈ [−2, 1]
//
// and per 128-input group accumulates (low_partial + 4·high_partial)·scale.
// The activation side (NVFP4 blocks, recipes, global scale) is the block
// quantizer's; W4APlanesGEMM takes the activation already as values
// (E2M1 code × E4M3 block scale, the global scale applied by the caller).

// W4ANVFP4Planes splits centred codes into the high and low planes.
func W4ANVFP4Planes(c []int8) (high, low []int8) {
	high, low = make([]int8, len(c)), make([]int8, len(c))
	for i, v := range c {
		h := floorDiv(int(v)+2, 4)
		high[i], low[i] = int8(h), int8(int(v)-4*h)
	}
	return high, low
}

func floorDiv(a, b int) int {
	q := a / b
	if (a%b != 0) && (a < 0) != (b < 0) {
		q--
	}
	return q
}

// W4APlanesGEMM returns, for activation values a [T, In], the two-plane
// product y_to = Σ_g f32(f32(L + f32(4·H)) · scale_og), where L and H are the
// group's float32 sums (input order) of a·low and a·high. With exact partial
// sums it equals the direct product Σ_g f32(f32(Σ a·c) · scale_og) bit for bit.
func W4APlanesGEMM(a kernels.Matrix, w *kernels.W4AWeight, high, low []int8) []float32 {
	T, K, N := a.Rows, a.Cols, w.Out
	groups := K / kernels.W4AGroup
	y := make([]float32, T*N)
	for t := range T {
		x := a.Data[t*K : (t+1)*K]
		for n := range N {
			var acc float32
			for g := range groups {
				lo, hi := g*kernels.W4AGroup, (g+1)*kernels.W4AGroup
				var L, H float32
				for i := lo; i < hi; i++ {
					L += float32(x[i] * float32(low[n*K+i]))
					H += float32(x[i] * float32(high[n*K+i]))
				}
				acc += float32(float32(L+float32(4*H)) * w.Scales[n*groups+g])
			}
			y[t*N+n] = acc
		}
	}
	return y
}
