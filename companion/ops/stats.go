package ops

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/quantscope/quantscope/kernels"
)

// StatsParams are the "stats" operation's parameters: {"bins": 64}.
type StatsParams struct {
	Bins int `json:"bins,omitempty"` // value histogram bins (default 64, at most 4096)
}

// StatsDoc is the "stats" result, the JSON `quantscope stats --json` prints
// (DESIGN.md's contract plus counts, sizes and time). Fractions with nothing
// to count (at_max_fraction of a BF16 weight) are null.
type StatsDoc struct {
	Name                   string   `json:"name"`
	Format                 string   `json:"format"`
	Shape                  [2]int   `json:"shape"`
	Min                    Num      `json:"min"`
	Max                    Num      `json:"max"`
	Mean                   Num      `json:"mean"`
	Std                    Num      `json:"std"`
	NaN                    int64    `json:"nan"`
	Inf                    int64    `json:"inf"`
	Histogram              HistJSON `json:"histogram"`
	ScaleHistogram         HistJSON `json:"scale_histogram"`
	AtMaxFraction          Num      `json:"at_max_fraction"`
	Codes                  int64    `json:"codes"`
	Scales                 int64    `json:"scales"`
	ScaleZero              int64    `json:"scale_zero"`
	ScaleE4M3              int64    `json:"scale_e4m3"`
	ScaleAtMaxFraction     Num      `json:"scale_at_max_fraction"`
	ScaleSubnormalFraction Num      `json:"scale_subnormal_fraction"`
	BytesRead              uint64   `json:"bytes_read"`
	Seconds                float64  `json:"seconds"`
	Backend                string   `json:"backend"`
	stats                  *kernels.Stats
}

// HistJSON is a histogram: len(Counts) bins between len(Counts)+1 edges.
type HistJSON struct {
	Edges  []float64 `json:"edges"`
	Counts []int64   `json:"counts"`
}

// Num is a float that marshals NaN and ±inf as null (JSON has no such numbers).
type Num float64

// MarshalJSON writes the number, or null when it is not finite.
func (n Num) MarshalJSON() ([]byte, error) {
	f := float64(n)
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return []byte("null"), nil
	}
	return strconv.AppendFloat(nil, f, 'g', -1, 64), nil
}

// Stats returns the kernels' statistics behind the document.
func (d *StatsDoc) Stats() *kernels.Stats { return d.stats }

func init() { Register("stats", statsOp) }

func statsOp(ctx context.Context, env Env, module string, params json.RawMessage) (*Result, error) {
	var p StatsParams
	if err := DecodeParams("stats", params, &p); err != nil {
		return nil, err
	}
	if p.Bins < 0 || p.Bins > 4096 {
		return nil, fmt.Errorf("stats: parameters: bins %d outside 1..4096", p.Bins)
	}
	doc, err := ModuleStats(ctx, env, module, p)
	if err != nil {
		return nil, err
	}
	return &Result{JSON: doc, Arrays: []Array{
		{Name: "histogram.counts", Shape: []int{len(doc.Histogram.Counts)}, I64: doc.Histogram.Counts},
		{Name: "scale_histogram.counts", Shape: []int{len(doc.ScaleHistogram.Counts)}, I64: doc.ScaleHistogram.Counts},
	}}, nil
}

// ModuleStats streams one module of env.Checkpoint through env.Backend's
// Stats.
func ModuleStats(ctx context.Context, env Env, module string, p StatsParams) (*StatsDoc, error) {
	if env.Checkpoint == nil || env.Backend == nil {
		return nil, errors.New("stats: no checkpoint or backend")
	}
	m, err := FindModule(env.Checkpoint, module)
	if err != nil {
		return nil, err
	}
	src, err := ModuleSource(m, env.Checkpoint)
	if err != nil {
		return nil, err
	}
	t0 := time.Now()
	st, err := env.Backend.Stats(ctx, src, kernels.StatsOptions{Bins: p.Bins, Progress: env.Progress})
	if err != nil {
		return nil, err // decode errors name the module, tensor and rule
	}
	return &StatsDoc{
		Name: m.Name, Format: m.Format, Shape: [2]int{st.Rows, st.Cols},
		Min: Num(st.Min), Max: Num(st.Max), Mean: Num(st.Mean), Std: Num(st.Std), NaN: st.NaN, Inf: st.Inf,
		Histogram:      HistJSON{Edges: st.Histogram.Edges, Counts: st.Histogram.Counts},
		ScaleHistogram: HistJSON{Edges: st.ScaleHistogram.Edges, Counts: st.ScaleHistogram.Counts},
		AtMaxFraction:  Num(st.AtMaxFraction), Codes: st.Codes,
		Scales: st.Scales, ScaleZero: st.ScaleZero, ScaleE4M3: st.ScaleE4M3,
		ScaleAtMaxFraction: Num(st.ScaleAtMaxFraction), ScaleSubnormalFraction: Num(st.ScaleSubnormalFraction),
		BytesRead: m.Bytes, Seconds: time.Since(t0).Seconds(), Backend: env.Backend.Name(), stats: st,
	}, nil
}
