package calib

import (
	"context"
	"fmt"
	"math"

	"github.com/quantscope/quantscope/formats/numeric"
	"github.com/quantscope/quantscope/formats/scheme"
	"github.com/quantscope/quantscope/kernels"
	"github.com/quantscope/quantscope/model"
)

// The passes on each projection's inputs (awq_lite, local_hessian) run the
// dense decoder (dequantized weights, float32) layer by layer, collect the
// inputs of that layer's projections over every sequence, use them, drop
// them, and carry the residual into the next layer.

// projectionNames are a Llama layer's seven projections.
var projectionNames = []string{
	"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
	"mlp.gate_proj", "mlp.up_proj", "mlp.down_proj",
}

// eachLayerInputs calls fn for every projection of every layer (in layer
// order) with its inputs over all sequences stacked [tokens, in], and each
// sequence's row count in the stack; want filters the modules. Progress
// counts layers.
func eachLayerInputs(ctx context.Context, m *model.Model, d *Data, o Options, want func(string) bool, fn func(module string, x kernels.Matrix, seqRows []int) error) error {
	hs, err := carriers(m, d)
	if err != nil {
		return err
	}
	L := m.Config.Layers
	for l := range L {
		got := map[string][]kernels.Matrix{}
		opt := model.Options{Weights: model.NewWeightCache(), LinearInput: func(name string, x kernels.Matrix) {
			if want(name) {
				got[name] = append(got[name], x)
			}
		}}
		for i := range hs {
			if err := m.RunLayer(ctx, l, hs[i], opt); err != nil {
				return fmt.Errorf("layer %d, sequence %d: %w", l, i+1, err)
			}
		}
		for _, p := range projectionNames {
			name := fmt.Sprintf("model.layers.%d.%s", l, p)
			if xs, ok := got[name]; ok {
				x := stack(xs)
				if err := finite(name, x); err != nil {
					return err
				}
				rows := make([]int, len(xs))
				for i, xi := range xs {
					rows[i] = xi.Rows
				}
				if err := fn(name, x, rows); err != nil {
					return err
				}
			}
		}
		o.progress(l+1, L)
	}
	return nil
}

func stack(xs []kernels.Matrix) kernels.Matrix {
	var rows int
	for _, x := range xs {
		rows += x.Rows
	}
	s := kernels.Matrix{Rows: rows, Cols: xs[0].Cols, Data: make([]float32, 0, rows*xs[0].Cols)}
	for _, x := range xs {
		s.Data = append(s.Data, x.Data...)
	}
	return s
}

// weight reads a module's weight as float32 [out, in] (dequantized, the
// way the layer applies it to its input).
func weight(m *model.Model, name string) (kernels.Matrix, error) {
	mod, ok := m.Checkpoint().Module(name)
	if !ok {
		return kernels.Matrix{}, fmt.Errorf("no module %q", name)
	}
	rows, cols := mod.Matrix2D()
	v, err := scheme.Dequantize(mod, m.Checkpoint(), 0, int(rows))
	if err != nil {
		return kernels.Matrix{}, err
	}
	// the weight the raw input meets (an AWQ pre_quant_scale folded in)
	if err := scheme.FoldPreQuantScale(mod, m.Checkpoint(), v); err != nil {
		return kernels.Matrix{}, err
	}
	return kernels.Matrix{Rows: int(rows), Cols: int(cols), Data: v}, nil
}

var e2m1 = [8]float32{0, 0.5, 1, 1.5, 2, 3, 4, 6}

// dequantNVFP4 is the values an NVFP4 result holds:
// e2m1 · f32(f32(scale)·scale_2).
func dequantNVFP4(r *kernels.NVFP4Result) kernels.Matrix {
	out := kernels.Matrix{Rows: r.Rows, Cols: r.Cols, Data: make([]float32, r.Rows*r.Cols)}
	nb := r.Cols / 16
	for i := range out.Data {
		c := r.Packed[i/2] >> (4 * (i & 1)) & 15
		v := e2m1[c&7] * float32(numeric.E4M3ToFloat32(r.Scales[(i/r.Cols)*nb+(i%r.Cols)/16])*r.Scale2)
		if c&8 != 0 {
			v = -v
		}
		out.Data[i] = v
	}
	return out
}

// outputMSE is mean((x·aᵀ − x·bᵀ)²) in float64 over each sequence's rows
// of x (seqRows, in order), averaged over the sequences: ModelOpt's
// awq_lite adds each forward's mean loss, so every sequence counts alike,
// whatever its length (the mean of those sums here, the same argmin).
func outputMSE(x, a, b kernels.Matrix, seqRows []int) float64 {
	var total float64
	t0 := 0
	for _, n := range seqRows {
		var s float64
		for t := t0; t < t0+n; t++ {
			xr := x.Data[t*x.Cols : (t+1)*x.Cols]
			for o := range a.Rows {
				var ya, yb float64
				ar, br := a.Data[o*a.Cols:(o+1)*a.Cols], b.Data[o*b.Cols:(o+1)*b.Cols]
				for i, v := range xr {
					ya += float64(v) * float64(ar[i])
					yb += float64(v) * float64(br[i])
				}
				s += (ya - yb) * (ya - yb)
			}
		}
		if n > 0 {
			total += s / float64(n*a.Rows)
		}
		t0 += n
	}
	return total / float64(len(seqRows))
}

// AWQ is one projection's awq_lite result.
type AWQ struct {
	Module    string    `json:"module"`
	Alpha     float64   `json:"alpha"`
	MSEBefore float64   `json:"mse_before"` // NVFP4 (max) weights, no scaling
	MSEAfter  float64   `json:"mse_after"`  // with the chosen alpha's scales
	MSE       []float64 `json:"mse_by_alpha"`
	Tokens    int       `json:"tokens"`
}

// AWQAlphas are the alphas awq_lite tries: 0, 0.1, …, 1.
var AWQAlphas = []float64{0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1}

// awqStats are the per-input-channel means: x̄_i, the mean over sequences
// of each sequence's mean_t |x_ti| (ModelOpt averages its act_scale over
// forwards, one a sequence here), and w̄_i = mean_o |w_oi| / amax of w_o's
// 16-block holding i (0 for a zero block).
func awqStats(x, w kernels.Matrix, seqRows []int) (xbar, wbar []float64) {
	xbar, wbar = make([]float64, x.Cols), make([]float64, w.Cols)
	seq := make([]float64, x.Cols)
	t0 := 0
	for _, n := range seqRows {
		clear(seq)
		for t := t0; t < t0+n; t++ {
			for i, v := range x.Data[t*x.Cols : (t+1)*x.Cols] {
				seq[i] += math.Abs(float64(v))
			}
		}
		if n > 0 {
			for i := range xbar {
				xbar[i] += seq[i] / float64(n)
			}
		}
		t0 += n
	}
	for i := range xbar {
		xbar[i] /= float64(len(seqRows))
	}
	for o := range w.Rows {
		row := w.Data[o*w.Cols : (o+1)*w.Cols]
		for b := 0; b < w.Cols; b += 16 {
			am := float64(absMax(row[b : b+16]))
			if am == 0 {
				continue
			}
			for i := b; i < b+16; i++ {
				wbar[i] += math.Abs(float64(row[i])) / am
			}
		}
	}
	for i := range wbar {
		wbar[i] /= float64(w.Rows)
	}
	return xbar, wbar
}

// awqScales is s_i = x̄^α / (w̄^(1−α) + float32 tiny), clamped to [1e-4,
// 1e4], divided by sqrt(max s · min s) (ModelOpt's get_scale: a channel
// whose x̄ and w̄ are both 0 gets 0 / tiny = 0, clamped to 1e-4).
func awqScales(xbar, wbar []float64, alpha float64) []float64 {
	s := make([]float64, len(xbar))
	lo, hi := math.Inf(1), math.Inf(-1)
	for i := range s {
		v := math.Pow(xbar[i], alpha) / (math.Pow(wbar[i], 1-alpha) + 0x1p-126)
		v = math.Min(math.Max(v, 1e-4), 1e4)
		s[i] = v
		lo, hi = math.Min(lo, v), math.Max(hi, v)
	}
	n := math.Sqrt(hi * lo)
	for i := range s {
		s[i] /= n
	}
	return s
}

// AWQLite runs ModelOpt's awq_lite search on every projection: for each
// alpha the weight columns are multiplied by s, quantized to NVFP4 (max
// recipe) and the inputs divided by s; the alpha whose output MSE against
// the float32 layer on the collected inputs is least is kept (the first on
// a tie). Nothing is written back: the report is the result.
func AWQLite(ctx context.Context, m *model.Model, d *Data, o Options, be kernels.Quantizer) ([]AWQ, error) {
	var out []AWQ
	err := eachLayerInputs(ctx, m, d, o, func(string) bool { return true }, func(name string, x kernels.Matrix, seqRows []int) error {
		w, err := weight(m, name)
		if err != nil {
			return err
		}
		quant := func(w kernels.Matrix) (kernels.Matrix, error) {
			r, err := be.QuantizeNVFP4(ctx, w, kernels.NVFP4Options{Recipe: kernels.RecipeMax}, nil)
			if err != nil {
				return kernels.Matrix{}, fmt.Errorf("awq_lite: %s: %w", name, err)
			}
			return dequantNVFP4(r), nil
		}
		q, err := quant(w)
		if err != nil {
			return err
		}
		r := AWQ{Module: name, MSEBefore: outputMSE(x, w, q, seqRows), MSEAfter: math.Inf(1), Tokens: x.Rows}
		xbar, wbar := awqStats(x, w, seqRows)
		for _, alpha := range AWQAlphas {
			s := awqScales(xbar, wbar, alpha)
			ws := kernels.Matrix{Rows: w.Rows, Cols: w.Cols, Data: make([]float32, len(w.Data))}
			for i, v := range w.Data {
				ws.Data[i] = float32(float64(v) * s[i%w.Cols])
			}
			qs, err := quant(ws)
			if err != nil {
				return err
			}
			// (x/s)·Q(w·s)ᵀ = x·(Q(w·s)/s)ᵀ: fold 1/s into the quantized weight
			for i := range qs.Data {
				qs.Data[i] = float32(float64(qs.Data[i]) / s[i%w.Cols])
			}
			e := outputMSE(x, w, qs, seqRows)
			r.MSE = append(r.MSE, e)
			if e < r.MSEAfter {
				r.Alpha, r.MSEAfter = alpha, e
			}
		}
		out = append(out, r)
		return nil
	})
	return out, err
}
