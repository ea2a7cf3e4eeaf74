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
	recipes := opt.Recipes
	if len(recipes) == 0 {
		recipes = kernels.Recipes
	}
	if !slices.Contains(recipes, kernels.RecipeMax) {
		recipes = append([]string{kernels.RecipeMax}, recipes...) // blocks_changed compares with max
	}
	amax, err := b.globalAmax(ctx, w)
	if err != nil {
		return nil, err
	}
	total := int64(len(recipes)) * int64(w.Rows)
	rep := &kernels.Report{Rows: w.Rows, Cols: w.Cols}
	results := make([]*kernels.NVFP4Result, len(recipes))
	for k, rc := range recipes {
		plan, err := b.plan(ctx, w, amax, kernels.NVFP4Options{Recipe: rc, Activations: opt.Activations})
		if err != nil {
			return nil, err
		}
		base := int64(k) * int64(w.Rows)
		res, err := b.runPlan(ctx, w, plan, func(done, _ int64) {
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
