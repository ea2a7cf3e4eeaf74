package cuda

import (
	"context"
	"fmt"
	"math"

	"github.com/quantscope/quantscope/kernels"
	"github.com/quantscope/quantscope/kernels/cpu"
	"github.com/quantscope/quantscope/kernels/cuda/wire"
)

// finiteAmax is the largest |v| of data, and false when a value is NaN or
// infinite (the CPU backend then gives the error that names it).
func finiteAmax(data []float32) (float32, bool) {
	var amax float32
	for _, v := range data {
		a := float32(math.Abs(float64(v)))
		if !(a <= math.MaxFloat32) {
			return 0, false
		}
		amax = max(amax, a)
	}
	return amax, true
}

// momentsMayOverflow: second moments Σ x xᵀ over tokens rows of values up
// to amax might leave float32's range. Such input runs on the CPU, which
// computes them the same way and names the block that overflows.
func momentsMayOverflow(amax float32, tokens int) bool {
	a := float64(amax)
	return a*a*float64(tokens) > math.MaxFloat32/2
}

// lossesMayOverflow: local_hessian's weighted block errors, for moments of
// values up to xamax (each at most xamax²) and a weight up to wamax, might
// leave float32's range (the CPU's lossesFit bound, with a factor of two
// to spare for the CPU's float32 moments rounding above xamax²); such input
// runs on the CPU, which refuses it by its own bound.
func lossesMayOverflow(xamax, wamax float32) bool {
	x, w := float64(xamax), 2*float64(wamax)
	return 256*x*x*w*w > math.MaxFloat32/4
}

// QuantizeFP8 runs FP8 quantization on the GPU (ptx/fp8_quant.cu): e4m3 or
// e5m2, tensor, row or block scales, inverse or direct, with the codes and
// scales of the CPU backend bit for bit. Input the CPU refuses runs there,
// for its error, and so does a direct scale divided in 16 bits
// (FP8Options.Half); without a usable GPU everything runs there.
func (b *Backend) QuantizeFP8(ctx context.Context, w kernels.Matrix, opt kernels.FP8Options, p kernels.Progress) (*kernels.FP8Result, error) {
	cpuRun := func() (*kernels.FP8Result, error) { return b.Backend.QuantizeFP8(ctx, w, opt, p) }
	rows, cols := w.Rows, w.Cols
	if rows <= 0 || cols <= 0 || len(w.Data) != rows*cols {
		return cpuRun()
	}
	if opt.Half != "" && !opt.Inverse {
		// the 16-bit quotient (FP8Options.Half) has no kernel here: the CPU's
		return cpuRun()
	}
	var e5 bool
	switch opt.Format {
	case kernels.FP8E4M3:
	case kernels.FP8E5M2:
		e5 = true
	default:
		return cpuRun()
	}
	var R, C int
	var shape []int
	switch opt.Scale {
	case kernels.ScaleTensor:
		R, C, shape = rows, cols, []int{}
	case kernels.ScaleRow, "":
		R, C, shape = 1, cols, []int{rows}
	case kernels.ScaleBlock:
		R, C = opt.Block[0], opt.Block[1]
		if R <= 0 || C <= 0 || rows%R != 0 || cols%C != 0 {
			return cpuRun()
		}
		shape = []int{rows / R, cols / C}
	default:
		return cpuRun()
	}
	if _, ok := finiteAmax(w.Data); !ok {
		return cpuRun()
	}
	n, ns := len(w.Data), rows/R*(cols/C)
	req := wire.Request{Op: wire.OpQuantFP8, Rows: int64(rows), Cols: int64(cols), R: int64(R), C: int64(C), Inv: opt.Inverse, E5M2: e5}
	r, out, err := b.call(ctx, int64(5*n+4*ns+4*rows*(cols/C)), req, f32Bytes(w.Data))
	if err != nil {
		if _, ok := err.(*errFallback); ok {
			return cpuRun()
		}
		return nil, err
	}
	if len(out) != 2 || len(out[0]) != n {
		return nil, fmt.Errorf("cuda quant_fp8: the worker returned parts %v, want %d codes and %d scales", r.Parts, n, ns)
	}
	scales, err := bytesF32(out, 1, ns, r)
	if err != nil {
		return nil, err
	}
	if p != nil {
		p(int64(rows), int64(rows))
	}
	return &kernels.FP8Result{Codes: out[0], Scales: scales, ScaleShape: shape}, nil
}

// quantizeNVFP4Recipe runs four_six, least_squares (GPT-QModel's block
// algorithms, global scale f32(amax / 1792)) and local_hessian (ModelOpt's
// sweep weighted by each input block's second moment, global scale
// f32(amax / 2688)) on the GPU (ptx/nvfp4_recipes.cu); any other recipe,
// and input the CPU refuses, on the CPU.
func (b *Backend) quantizeNVFP4Recipe(ctx context.Context, w kernels.Matrix, opt kernels.NVFP4Options, p kernels.Progress, recipe string) (*kernels.NVFP4Result, error) {
	cpuRun := func() (*kernels.NVFP4Result, error) { return b.Backend.QuantizeNVFP4(ctx, w, opt, p) }
	if recipe != kernels.RecipeFourSix && recipe != kernels.RecipeLeastSquares && recipe != kernels.RecipeLocalHessian {
		return cpuRun()
	}
	if w.Rows <= 0 || w.Cols <= 0 || w.Cols%16 != 0 || len(w.Data) != w.Rows*w.Cols {
		return cpuRun() // its error names the rule
	}
	amax, ok := finiteAmax(w.Data)
	if !ok {
		return cpuRun()
	}
	den := float32(6 * 448)
	if recipe != kernels.RecipeLocalHessian {
		den = 4 * 448
	}
	// the global scale; 1 for an all-zero weight (both producers' guard)
	g := float32(1)
	if amax != 0 {
		g = amax / den
		if float32(0x1p-9*g) == 0 {
			return cpuRun() // the CPU's nvfp4-global-scale error
		}
	}
	n := len(w.Data)
	req := wire.Request{Op: wire.OpQuantNVFP4GPTQ, Rows: int64(w.Rows), Cols: int64(w.Cols), Recipe: recipe, Global: g}
	parts := [][]byte{f32Bytes(w.Data)}
	need := int64(4*n + n/2 + n/16)
	if recipe == kernels.RecipeLocalHessian {
		x := opt.Activations
		if x == nil || x.Cols != w.Cols || x.Rows <= 0 || len(x.Data) != x.Rows*x.Cols || int64(w.Cols) > wire.QuantLHMaxCols {
			return cpuRun()
		}
		if xa, ok := finiteAmax(x.Data); !ok || momentsMayOverflow(xa, x.Rows) || lossesMayOverflow(xa, amax) {
			return cpuRun()
		}
		req.Op, req.Recipe, req.T = wire.OpQuantNVFP4LH, "", int64(x.Rows)
		parts = append(parts, f32Bytes(x.Data))
		need += int64(4*len(x.Data) + 64*w.Cols)
	}
	r, out, err := b.call(ctx, need, req, parts...)
	if err != nil {
		if _, ok := err.(*errFallback); ok {
			return cpuRun()
		}
		return nil, err
	}
	if len(out) != 2 || len(out[0]) != n/2 || len(out[1]) != n/16 {
		return nil, fmt.Errorf("cuda %s: the worker returned parts %v, want %d packed bytes and %d scales", req.Op, r.Parts, n/2, n/16)
	}
	if p != nil {
		p(int64(w.Rows), int64(w.Rows))
	}
	return &kernels.NVFP4Result{Packed: out[0], Scales: out[1], Scale2: g, Rows: w.Rows, Cols: w.Cols}, nil
}

// RecipeReport implements kernels.Quantizer with each recipe's quantization
// on the GPU (each falling back to the CPU on its own) and the error
// statistics on the CPU, as the CPU backend computes them; input the CPU
// refuses gets its error.
func (b *Backend) RecipeReport(ctx context.Context, w kernels.Matrix, opt kernels.ReportOptions, p kernels.Progress) (*kernels.Report, error) {
	if w.Rows <= 0 || w.Cols <= 0 || w.Cols%16 != 0 || len(w.Data) != w.Rows*w.Cols {
		return b.Backend.RecipeReport(ctx, w, opt, p)
	}
	if _, ok := finiteAmax(w.Data); !ok {
		return b.Backend.RecipeReport(ctx, w, opt, p)
	}
	return cpu.ReportOf(ctx, w, opt, p, func(ctx context.Context, recipe string, p kernels.Progress) (*kernels.NVFP4Result, error) {
		return b.QuantizeNVFP4(ctx, w, kernels.NVFP4Options{Recipe: recipe, Activations: opt.Activations}, p)
	})
}
