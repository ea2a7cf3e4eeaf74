package kernels

import (
	"context"
	"fmt"
	"math"
)

// W4A-NVFP4 activation recipes (GPT-QModel activation_floatx.py:14-16; the
// headroom recipes are calibration-only and refused here).
const (
	ActNvidia           = "nvidia"             // seed M = 6; global amax/(448·6)
	ActFourSix          = "four_six"           // seeds M = 4, 6; global amax/(448·4)
	ActLeastSquares     = "least_squares"      // four_six plus least-squares refinement (the default)
	ActLeastSquaresGrid = "least_squares_grid" // least_squares plus E4M3 codes best±8
)

// ActRecipes lists the W4A-NVFP4 activation recipes.
var ActRecipes = []string{ActNvidia, ActFourSix, ActLeastSquares, ActLeastSquaresGrid}

// CheckActRecipe refuses a name that is not an activation recipe.
func CheckActRecipe(r string) error {
	for _, v := range ActRecipes {
		if r == v {
			return nil
		}
	}
	return fmt.Errorf("rule nvfp4-recipe: activation recipe %q: want one of nvidia, four_six, least_squares, least_squares_grid", r)
}

// NVFP4GlobalScale is GPT-QModel's nvfp4_global_scale without grid
// rounding (activation_floatx.py:170-194; the FP32 value act_max stores):
// f32(amax / (448·6)) for nvidia, f32(amax / (448·4)) for the others, 1 when
// amax is 0. A negative or non-finite amax is an error.
func NVFP4GlobalScale(amax float32, recipe string) (float32, error) {
	if err := CheckActRecipe(recipe); err != nil {
		return 0, err
	}
	if !(amax >= 0) || math.IsInf(float64(amax), 1) {
		return 0, fmt.Errorf("rule nvfp4-global-scale: amax %v must be finite and non-negative", amax)
	}
	if amax == 0 {
		return 1, nil
	}
	den := float32(448 * 4)
	if recipe == ActNvidia {
		den = 448 * 6
	}
	return amax / den, nil
}

// NVFP4Tokens is an activation quantized for W4A-NVFP4: an E2M1 code per
// value (sign in bit 3, row-major [Rows, Cols]), an E4M3 local scale code per
// 16-value block along Cols ([Rows, Cols/16]) and one float32 global scale.
type NVFP4Tokens struct {
	Rows, Cols int
	Codes      []byte
	Scales     []byte
	Global     float32
	// Dynamic is true when Global came from this operand's own amax (every
	// token of the call): such a quantization is not causal.
	Dynamic bool
}

// W4ANVFP4 is the W4A-NVFP4 family: GPT-QModel's NVFP4 activations on GPTQ
// INT4 weights held as two exact E2M1 planes.
type W4ANVFP4 interface {
	// W4ANVFP4Quantize quantizes x [T, K] (K % 16 == 0) in 16-value blocks
	// with the recipe; global > 0 is a calibrated global scale, 0 asks for
	// the dynamic one from the amax of all of x.
	W4ANVFP4Quantize(ctx context.Context, x Matrix, recipe string, global float32) (*NVFP4Tokens, error)
	// W4ANVFP4Linear is the grouped two-plane GEMM on a quantized operand,
	// times the global scale, plus the bias.
	W4ANVFP4Linear(ctx context.Context, a *NVFP4Tokens, w *W4AWeight) (Matrix, error)
}
