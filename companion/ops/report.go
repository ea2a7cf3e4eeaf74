package ops

import (
	"context"
	"encoding/json"
	"fmt"
	"math"

	"github.com/quantscope/quantscope/kernels"
)

func init() {
	Register("report", reportOp)
}

// ReportParams are the "report" op's parameters.
type ReportParams struct {
	Format  string   `json:"format"`  // nvfp4 (the only one today)
	Recipes []string `json:"recipes"` // default max, mse, four_six, least_squares
	Data    string   `json:"data"`    // activations for local_hessian
}

// ReportJSON is what `quantscope report --json` prints.
type ReportJSON struct {
	Module  string        `json:"module"`
	Shape   []int         `json:"shape"`
	Recipes []RecipeEntry `json:"recipes"`
}

// RecipeEntry is one recipe's row; SQNRdB is null when the recipe is exact.
type RecipeEntry struct {
	Recipe        string   `json:"recipe"`
	MSE           float64  `json:"mse"`
	SQNRdB        *float64 `json:"sqnr_db"`
	MaxAbsErr     float64  `json:"max_abs_err"`
	BlocksChanged float64  `json:"blocks_changed"`
}

func reportOp(ctx context.Context, env Env, module string, raw json.RawMessage) (*Result, error) {
	var p ReportParams
	if err := DecodeParams("report", raw, &p); err != nil {
		return nil, err
	}
	if p.Format != "" && p.Format != "nvfp4" {
		return nil, fmt.Errorf("report: rule report-format: the recipe report compares NVFP4 block-scale recipes; format %q has none", p.Format)
	}
	m, w, progress, err := moduleWeight(ctx, env, module)
	if err != nil {
		return nil, err
	}
	module = m.Name // the name given may be its weight tensor's
	opt := kernels.ReportOptions{Recipes: p.Recipes}
	if p.Data != "" {
		path, err := env.Reads.Path("report", "data", p.Data)
		if err != nil {
			return nil, err
		}
		if opt.Activations, err = ReadActivations(path, m.Name, w.Cols); err != nil {
			return nil, err
		}
	}
	rep, err := env.Backend.RecipeReport(ctx, w, opt, progress)
	if err != nil {
		return nil, fmt.Errorf("module %q: %w", module, err)
	}
	out := ReportJSON{Module: module, Shape: []int{w.Rows, w.Cols}}
	res := &Result{}
	for _, r := range rep.Recipes {
		e := RecipeEntry{Recipe: r.Recipe, MSE: r.MSE, MaxAbsErr: r.MaxAbsErr, BlocksChanged: r.BlocksChanged}
		if !math.IsInf(r.SQNRdB, 0) && !math.IsNaN(r.SQNRdB) {
			s := r.SQNRdB
			e.SQNRdB = &s
		}
		out.Recipes = append(out.Recipes, e)
		m, mr, mc := BlockMap(r.Changed, w.Rows, w.Cols/16)
		res.Arrays = append(res.Arrays, Array{Name: "blocks_changed." + r.Recipe, Shape: []int{mr, mc}, U8: m})
	}
	res.JSON = out
	return res, nil
}
