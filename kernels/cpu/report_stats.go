package cpu

import "github.com/quantscope/quantscope/kernels"

// RecipeStatsOf is one line of RecipeReport for a quantization r of w made
// elsewhere (the CUDA backend's): the error of the values r stores, and the
// blocks whose scale code differs from maxRes's (the max recipe's).
func RecipeStatsOf(recipe string, w kernels.Matrix, r, maxRes *kernels.NVFP4Result) kernels.RecipeStats {
	return errorStats(recipe, w, r, maxRes)
}
