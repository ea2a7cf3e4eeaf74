package kernels

import "context"

// Quantizer is the family of FP8 / NVFP4 weight quantization operations and
// their scale recipes, with the arithmetic of the producers that write those
// checkpoints (NUMERICS.md part 1): GPT-QModel and ModelOpt FP8, ModelOpt
// NVFP4 max / mse / local_hessian, GPT-QModel NVFP4 four_six / least_squares.
//
// Weights are row-major float32 [out, in] (a torch nn.Linear weight). Every
// operation refuses non-finite weights and shapes its layout cannot hold,
// with an error that names the rule.
type Quantizer interface {
	// QuantizeFP8 quantizes w to e4m3 or e5m2 with tensor, row or block scales.
	QuantizeFP8(ctx context.Context, w Matrix, opt FP8Options, p Progress) (*FP8Result, error)
	// QuantizeNVFP4 quantizes w to NVFP4 (16-value blocks along the input
	// dimension) with one block-scale recipe.
	QuantizeNVFP4(ctx context.Context, w Matrix, opt NVFP4Options, p Progress) (*NVFP4Result, error)
	// RecipeReport quantizes w with each recipe and measures the error of
	// the values each would store, against the max recipe's block scales.
	RecipeReport(ctx context.Context, w Matrix, opt ReportOptions, p Progress) (*Report, error)
}

// FP8 element formats.
const (
	FP8E4M3 = "e4m3" // float8_e4m3fn, max 448
	FP8E5M2 = "e5m2" // float8_e5m2, max 57344
)

// FP8 scale granularities.
const (
	ScaleTensor = "tensor" // one scale for the whole matrix
	ScaleRow    = "row"    // one scale per output row
	ScaleBlock  = "block"  // one scale per R×C block
)

// FP8Options chooses an FP8 quantization.
type FP8Options struct {
	Format string // FP8E4M3 or FP8E5M2
	Scale  string // ScaleTensor, ScaleRow or ScaleBlock
	Block  [2]int // R, C for ScaleBlock; both must divide the matrix
	// Inverse stores GPT-QModel's weight_scale_inv = f32(fp8_max / amax) and
	// q = cast(clamp(f32(w·scale_inv))), read back as w = q / scale_inv.
	// Otherwise the scale is direct (ModelOpt, compressed-tensors):
	// scale = f32(amax / fp8_max), q = cast(clamp(f32(w / scale))), w = q · scale.
	Inverse bool
	// Half is the 16-bit dtype (HalfBF16 or HalfF16) a producer divides a
	// direct scale in, "" for float32. PyTorch keeps a 16-bit weight's dtype
	// when it divides it by a 0-dim float32 scale (ModelOpt's per-tensor
	// export) or by a scale of its own dtype (compressed-tensors): the
	// scale is rounded to Half, w / scale computed in float32 and rounded to
	// Half, then cast to FP8 — two roundings, which move a few percent of
	// the codes. Not used with Inverse (GPT-QModel divides in float32).
	Half string
	// HalfScale computes and stores the scale itself in Half, Half(amax /
	// fp8_max): compressed-tensors' observer works in the weight's dtype.
	HalfScale bool
}

// The 16-bit dtypes of FP8Options.Half.
const (
	HalfBF16 = "bf16"
	HalfF16  = "f16"
)

// FP8Result is an FP8-quantized matrix.
type FP8Result struct {
	Codes []byte // [Rows, Cols] FP8 codes, row-major
	// Scales as stored: inverse or direct as FP8Options.Inverse says.
	// ScaleShape is [] (tensor), [Rows] (row) or [Rows/R, Cols/C] (block).
	Scales     []float32
	ScaleShape []int
}

// NVFP4 block-scale recipes.
const (
	RecipeMax          = "max"           // ModelOpt: block amax / 6, global amax / (6·448)
	RecipeMSE          = "mse"           // ModelOpt's 126-code FP8 scale sweep, same global scale
	RecipeFourSix      = "four_six"      // GPT-QModel: seeds M=4, M=6; global amax / (4·448)
	RecipeLeastSquares = "least_squares" // GPT-QModel: four_six plus least-squares refinement
	RecipeLocalHessian = "local_hessian" // ModelOpt: the sweep weighted by the input second moment
)

// Recipes lists the recipes a report runs (local_hessian needs calibration data).
var Recipes = []string{RecipeMax, RecipeMSE, RecipeFourSix, RecipeLeastSquares}

// NVFP4Options chooses an NVFP4 recipe.
type NVFP4Options struct {
	Recipe string
	// Activations are calibration inputs [tokens, in] for local_hessian:
	// each 16-wide input block's normalised second moment H_n = XᵀX/tokens
	// weights the block error dwᵀ H_n dw.
	Activations *Matrix
}

// NVFP4Result is an NVFP4-quantized matrix: w = e2m1 · f32(scale) · Scale2.
type NVFP4Result struct {
	Packed []byte // [Rows, Cols/2], element 2j in the low nibble of byte j
	Scales []byte // [Rows, Cols/16] E4M3 block-scale codes
	// Scale2 is the global scale as ModelOpt stores it (weight_scale_2, a
	// multiplier); compressed-tensors stores 1/Scale2 as weight_global_scale.
	Scale2     float32
	Rows, Cols int
}

// ReportOptions chooses what a recipe report compares.
type ReportOptions struct {
	Recipes     []string // default Recipes
	Activations *Matrix  // for local_hessian
}

// Report is a recipe comparison over one matrix.
type Report struct {
	Rows, Cols int
	Recipes    []RecipeStats
}

// RecipeStats is one recipe's error.
type RecipeStats struct {
	Recipe    string  `json:"recipe"`
	MSE       float64 `json:"mse"`
	SQNRdB    float64 `json:"sqnr_db"` // 10·log10(Σw² / Σ(w−ŵ)²); +Inf when exact
	MaxAbsErr float64 `json:"max_abs_err"`
	// BlocksChanged is the share of 16-blocks whose scale code differs from max's.
	BlocksChanged float64 `json:"blocks_changed"`
	// Changed marks those blocks, [Rows, Cols/16] (1 = differs).
	Changed []byte `json:"-"`
}
