package cpu

import (
	"context"
	"math"
	"slices"

	"github.com/quantscope/quantscope/kernels"
)

// RecipeReport implements kernels.Quantizer: each recipe's NVFP4
// quantization of w, dequantized as a reader would, against w. Errors are
// summed in float64.
func (b *Backend) RecipeReport(ctx context.Context, w kernels.Matrix, opt kernels.ReportOptions, p kernels.Progress) (*kernels.Report, error) {
	if err := checkNVFP4(w); err != nil {
		return nil, err
	}
	amax, err := b.globalAmax(ctx, w)
	if err != nil {
		return nil, err
	}
	return ReportOf(ctx, w, opt, p, func(ctx context.Context, recipe string, p kernels.Progress) (*kernels.NVFP4Result, error) {
		plan, err := b.plan(ctx, w, amax, kernels.NVFP4Options{Recipe: recipe, Activations: opt.Activations})
		if err != nil {
			return nil, err
		}
		return b.runPlan(ctx, w, plan, p)
	})
}

// ReportOf is RecipeReport with each recipe's quantization made by
// quantize (the CPU's, or another backend's): opt's recipes (every one by
// default, max always, since blocks_changed compares with it) in turn,
// progress across all of them, and each line's error statistics on the CPU.
func ReportOf(ctx context.Context, w kernels.Matrix, opt kernels.ReportOptions, p kernels.Progress,
	quantize func(ctx context.Context, recipe string, p kernels.Progress) (*kernels.NVFP4Result, error)) (*kernels.Report, error) {
	recipes := opt.Recipes
	if len(recipes) == 0 {
		recipes = kernels.Recipes
	}
	if !slices.Contains(recipes, kernels.RecipeMax) {
		recipes = append([]string{kernels.RecipeMax}, recipes...)
	}
	total := int64(len(recipes)) * int64(w.Rows)
	results := make([]*kernels.NVFP4Result, len(recipes))
	for k, rc := range recipes {
		base := int64(k) * int64(w.Rows)
		res, err := quantize(ctx, rc, func(done, _ int64) {
			if p != nil {
				p(base+done, total)
			}
		})
		if err != nil {
			return nil, err
		}
		results[k] = res
	}
	maxRes := results[slices.Index(recipes, kernels.RecipeMax)]
	rep := &kernels.Report{Rows: w.Rows, Cols: w.Cols}
	for k, rc := range recipes {
		rep.Recipes = append(rep.Recipes, errorStats(rc, w, results[k], maxRes))
	}
	return rep, nil
}

func errorStats(recipe string, w kernels.Matrix, r, maxRes *kernels.NVFP4Result) kernels.RecipeStats {
	deq := dequantNVFP4(r)
	var sig, noise, maxErr float64
	for i, x := range w.Data {
		d := float64(x) - float64(deq[i])
		sig += float64(x) * float64(x)
		noise += d * d
		maxErr = max(maxErr, math.Abs(d))
	}
	st := kernels.RecipeStats{
		Recipe:    recipe,
		MSE:       noise / float64(len(w.Data)),
		MaxAbsErr: maxErr,
		Changed:   make([]byte, len(r.Scales)),
	}
	switch {
	case noise > 0:
		st.SQNRdB = 10 * math.Log10(sig/noise)
	default:
		st.SQNRdB = math.Inf(1)
	}
	changed := 0
	for i, c := range r.Scales {
		if c != maxRes.Scales[i] {
			st.Changed[i] = 1
			changed++
		}
	}
	st.BlocksChanged = float64(changed) / float64(len(r.Scales))
	return st
}
