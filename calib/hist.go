package calib

import (
	"context"
	"fmt"
	"math"

	"github.com/quantscope/quantscope/kernels"
	"github.com/quantscope/quantscope/model"
)

// The histogram passes observe every producer in one forward per sequence
// (the W4A mode of Options, uncalibrated: NVFP4 operands take their dynamic
// scales), not producer by producer as act_max does.

// PercentileBins is the percentile pass's histogram size.
const PercentileBins = 2048

// Percentile is one producer's percentile calibration.
type Percentile struct {
	Producer    string  `json:"producer"`
	Max         float32 `json:"max"`          // the largest |x| seen
	Amax        float32 `json:"amax"`         // the percentile's value
	GlobalScale float32 `json:"global_scale"` // NVFP4 global scale of Amax under the recipe
	Tokens      int     `json:"tokens"`
}

// ordered keeps per-producer state in first-seen order.
type ordered[T any] struct {
	names []string
	byKey map[string]*T
}

func (o *ordered[T]) get(name string) *T {
	if o.byKey == nil {
		o.byKey = map[string]*T{}
	}
	v, ok := o.byKey[name]
	if !ok {
		v = new(T)
		o.byKey[name] = v
		o.names = append(o.names, name)
	}
	return v
}

// Percentiles builds, per producer, a 2,048-bin histogram of |x| over
// [0, max] (a first pass finds max) and reports the value at percentile p:
// the upper edge of the first bin whose cumulative count reaches p/100 of
// all values (p = 100 is the max itself). Progress counts layers over both
// passes.
func Percentiles(ctx context.Context, m *model.Model, d *Data, o Options, p float64) ([]Percentile, error) {
	if !(p > 0 && p <= 100) {
		return nil, fmt.Errorf("percentile: --percentile %v must be in (0, 100]", p)
	}
	recipe := o.recipe()
	if err := kernels.CheckActRecipe(recipe); err != nil {
		return nil, err
	}
	type acc struct {
		max    float32
		tokens int
		hist   []int64
	}
	var st ordered[acc]
	L := m.Config.Layers
	inner := o
	inner.Progress = func(done, _ int64) { o.progress(int(done), 2*L) }
	err := observeAll(ctx, m, d, inner, func(name string, x kernels.Matrix) {
		a := st.get(name)
		a.max = max(a.max, absMax(x.Data))
		a.tokens += x.Rows
	}, model.Options{})
	if err != nil {
		return nil, err
	}
	inner.Progress = func(done, _ int64) { o.progress(L+int(done), 2*L) }
	err = observeAll(ctx, m, d, inner, func(name string, x kernels.Matrix) {
		a := st.get(name)
		if a.hist == nil {
			a.hist = make([]int64, PercentileBins)
		}
		if a.max == 0 {
			a.hist[0] += int64(len(x.Data))
			return
		}
		for _, v := range x.Data {
			b := int(float64(abs(v)) / float64(a.max) * PercentileBins)
			a.hist[min(b, PercentileBins-1)]++
		}
	}, model.Options{})
	if err != nil {
		return nil, err
	}
	var out []Percentile
	for _, name := range st.names {
		a := st.byKey[name]
		r := Percentile{Producer: name, Max: a.max, Amax: a.max, Tokens: a.tokens}
		if p < 100 {
			var total int64
			for _, c := range a.hist {
				total += c
			}
			target := p / 100 * float64(total)
			var cum int64
			for b, c := range a.hist {
				cum += c
				if float64(cum) >= target {
					r.Amax = float32(float64(b+1) / PercentileBins * float64(a.max))
					break
				}
			}
		}
		if r.GlobalScale, err = kernels.NVFP4GlobalScale(r.Amax, recipe); err != nil {
			return nil, fmt.Errorf("percentile: %s: %w", name, err)
		}
		out = append(out, r)
	}
	return out, nil
}

func abs(v float32) float32 {
	if v < 0 {
		return -v
	}
	return v
}

// Headroom constants (GPT-QModel's NVFP4ActivationHeadroom,
// activation_floatx.py:50-154, a port of ModelOpt's nvfp4_act_headroom.py).
const (
	HeadroomBins     = 512
	headroomLo       = -40.0
	headroomHi       = 40.0
	HeadroomRho      = 16384
	headroomRhoLimit = 28672 // 448 / 2^-6
)

// Headroom is one producer's NVFP4 activation headroom calibration.
type Headroom struct {
	Producer    string  `json:"producer"`
	Upper       float64 `json:"upper"`        // the 99.99th percentile of the block maxima
	Anchor      float64 `json:"anchor"`       // the 1st, ignoring bins below upper/1e6
	Amax        float64 `json:"amax"`         // max(rho·anchor, upper)
	GlobalScale float32 `json:"global_scale"` // amax/(448·6): headroom recipes use 6
	Blocks      int64   `json:"blocks"`
	Warning     string  `json:"warning,omitempty"`
}

// Headrooms histograms, per producer, the log2 of every 16-value block's
// amax on 512 bins over [-40, 40) (values outside land in the end bins; an
// all-zero block in the first), and sets amax = rho·anchor, or upper with a
// warning when that headroom does not exceed upper. A percentile is the
// centre of the first bin whose cumulative count reaches p/100 of the
// counted blocks; upper at p = 100 is the running max.
func Headrooms(ctx context.Context, m *model.Model, d *Data, o Options, rho float64) ([]Headroom, error) {
	if !(rho > 0 && rho < headroomRhoLimit) {
		return nil, fmt.Errorf("headroom: rho %v must be in (0, %d) (448 / 2^-6)", rho, headroomRhoLimit)
	}
	type acc struct {
		hist [HeadroomBins]int64
	}
	var st ordered[acc]
	width := (headroomHi - headroomLo) / HeadroomBins
	err := observeAll(ctx, m, d, o, func(name string, x kernels.Matrix) {
		a := st.get(name)
		for b := 0; b+16 <= len(x.Data); b += 16 {
			bm := absMax(x.Data[b : b+16])
			i := 0
			if bm > 0 {
				i = int(math.Floor((math.Log2(float64(bm)) - headroomLo) / width))
			}
			a.hist[min(max(i, 0), HeadroomBins-1)]++
		}
	}, model.Options{})
	if err != nil {
		return nil, err
	}
	centre := func(b int) float64 { return math.Exp2(headroomLo + (float64(b)+0.5)*width) }
	percentile := func(h *[HeadroomBins]int64, p, floor float64) float64 {
		var total int64
		for b, c := range h {
			if centre(b) >= floor {
				total += c
			}
		}
		var cum int64
		for b, c := range h {
			if centre(b) < floor {
				continue
			}
			cum += c
			if float64(cum) >= p/100*float64(total) && cum > 0 {
				return centre(b)
			}
		}
		return 0
	}
	var out []Headroom
	for _, name := range st.names {
		a := st.byKey[name]
		r := Headroom{Producer: name}
		for _, c := range a.hist {
			r.Blocks += c
		}
		r.Upper = percentile(&a.hist, 99.99, 0)
		r.Anchor = percentile(&a.hist, 1, r.Upper/1e6)
		r.Amax = rho * r.Anchor
		if r.Amax <= r.Upper {
			r.Warning = fmt.Sprintf("headroom rho·anchor = %g does not exceed the upper value %g; using upper", r.Amax, r.Upper)
			r.Amax = r.Upper
		}
		g, err := kernels.NVFP4GlobalScale(float32(r.Amax), kernels.ActNvidia)
		if err != nil {
			return nil, fmt.Errorf("headroom: %s: %w", name, err)
		}
		r.GlobalScale = g
		out = append(out, r)
	}
	return out, nil
}
