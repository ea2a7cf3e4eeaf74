package calib

import (
	"context"
	"fmt"

	"github.com/quantscope/quantscope/formats/checkpoint"
	"github.com/quantscope/quantscope/formats/scheme"
)

// WeightMax is one module's weight amax and the per-tensor global scales
// it implies: ModelOpt's NVFP4 weight_scale_2 = amax/(448·6) and the direct
// FP8 tensor scale amax/448 (1 for an all-zero weight, as the quantizers
// store it).
type WeightMax struct {
	Module  string  `json:"module"`
	Kind    string  `json:"kind"`
	Shape   [2]int  `json:"shape"`
	Amax    float32 `json:"amax"`
	NVFP4   float32 `json:"nvfp4_global_scale"`
	FP8     float32 `json:"fp8_scale"`
	Storage string  `json:"format"`
}

// WeightMaxes reads every module's weight (norms excepted; every expert
// included: ModelOpt calibrates weights before any data flows, so an expert
// no token reaches has its scales too), a chunk of rows at a time, as the
// values the checkpoint holds. Progress counts modules.
func WeightMaxes(ctx context.Context, c *checkpoint.Checkpoint, progress func(done, total int64)) ([]WeightMax, error) {
	var mods []*scheme.Module
	for _, m := range c.Modules {
		if m.Format == scheme.FormatNone || m.Kind == "norm" {
			continue
		}
		mods = append(mods, m)
	}
	out := make([]WeightMax, 0, len(mods))
	for i, m := range mods {
		rows, cols := m.Matrix2D()
		if rows == 0 || cols == 0 {
			continue
		}
		step := int(max(1, (8<<20)/cols))
		var amax float32
		for lo := 0; lo < int(rows); lo += step {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			v, err := scheme.Dequantize(m, c, lo, min(lo+step, int(rows)))
			if err != nil {
				return nil, fmt.Errorf("weight_max: module %q: %w", m.Name, err)
			}
			for j, x := range v {
				if x != x || x > 3.4028235e38 || x < -3.4028235e38 {
					return nil, fmt.Errorf("weight_max: module %q: rule finite-weights: row %d column %d is %v", m.Name, lo+j/int(cols), j%int(cols), x)
				}
			}
			amax = max(amax, absMax(v))
		}
		w := WeightMax{Module: m.Name, Kind: m.Kind, Shape: [2]int{int(rows), int(cols)}, Amax: amax, NVFP4: 1, FP8: 1, Storage: string(m.Format)}
		if amax > 0 {
			w.NVFP4, w.FP8 = amax/(448*6), amax/448
		}
		out = append(out, w)
		if progress != nil {
			progress(int64(i+1), int64(len(mods)))
		}
	}
	return out, nil
}
