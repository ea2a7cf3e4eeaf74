package calib

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/quantscope/quantscope/kernels"
	"github.com/quantscope/quantscope/model"
)

// Boundary is one producer's BoundaryMaximum (activation_calibration.py:44-61):
// the largest |value| over every call, the rows seen, the calls.
type Boundary struct {
	Name        string
	Amax        float32
	GlobalScale float32
	Tokens      int
	Samples     int
}

// ActMaxReport is GPT-QModel's producer_maximum report, producers in
// calibration order.
type ActMaxReport struct {
	Recipe     string
	Attention  string // "" (NVFP4) or model.W4AFP8: the policy calibrated under
	Boundaries []Boundary
	Data       *Data
}

// ActMaxHooks instrument act_max (tests): Observed is called at each
// observation of a producer with the producers frozen at that moment;
// Frozen after a producer's scale is set, with every frozen producer.
type ActMaxHooks struct {
	Observed func(producer string, frozen []string)
	Frozen   func(producer string, frozen []string)
}

// ActMax is GPT-QModel's calibrate_nvfp4_producers
// (activation_calibration.py:93-196) on the W4A-NVFP4 stream: layer by
// layer, producers in order; for each, every sample runs through the layer
// from its calibrated carrier with every earlier producer frozen, and the
// value is observed before quantization (the layer stops there); then the
// layer runs fully and its calibrated output carries into the next.
// Progress counts producers.
func ActMax(ctx context.Context, m *model.Model, d *Data, o Options, hooks ActMaxHooks) (*ActMaxReport, error) {
	recipe := o.recipe()
	if err := kernels.CheckActRecipe(recipe); err != nil {
		return nil, err
	}
	hs, err := carriers(m, d)
	if err != nil {
		return nil, err
	}
	switch o.Attention {
	case "", model.W4ANVFP4:
		o.Attention = ""
	case model.W4AFP8:
	default:
		return nil, fmt.Errorf("act_max: --attention %q: want fp8 (the mixed policy) or nvfp4", o.Attention)
	}
	L := m.Config.Layers
	// Only NVFP4 carriers own a global scale: under the mixed policy the
	// MLP's producers (GPT-QModel's nvfp4_producer_specs).
	all := model.NVFP4Producers(L, o.Attention)
	rep := &ActMaxReport{Recipe: recipe, Attention: o.Attention, Data: d}
	scales := map[string]float32{}
	var frozen []string
	opt := model.Options{W4A: model.W4ANVFP4, Attention: o.Attention, Recipe: recipe, Scales: scales}
	for l := range L {
		pre := fmt.Sprintf("model.layers.%d.", l)
		opt.Weights = model.NewWeightCache() // this layer's weights, read once
		for _, name := range all {
			if !strings.HasPrefix(name, pre) {
				continue
			}
			b := Boundary{Name: name}
			for i := range hs {
				h := clone(hs[i])
				opt.Observe = func(p string, x kernels.Matrix) error {
					if p != name {
						return nil
					}
					if err := finite(p, x); err != nil {
						return err
					}
					if hooks.Observed != nil {
						hooks.Observed(p, append([]string(nil), frozen...))
					}
					b.Amax = max(b.Amax, absMax(x.Data))
					b.Tokens += x.Rows
					b.Samples++
					return model.ErrStop
				}
				if err := m.RunLayer(ctx, l, h, opt); err != nil {
					return nil, fmt.Errorf("act_max: %s, sequence %d: %w", name, i+1, err)
				}
			}
			if b.GlobalScale, err = kernels.NVFP4GlobalScale(b.Amax, recipe); err != nil {
				return nil, fmt.Errorf("act_max: %s: %w", name, err)
			}
			scales[name] = b.GlobalScale
			frozen = append(frozen, name)
			rep.Boundaries = append(rep.Boundaries, b)
			if hooks.Frozen != nil {
				hooks.Frozen(name, append([]string(nil), frozen...))
			}
			o.progress(len(frozen), len(all))
		}
		opt.Observe = nil
		for i := range hs {
			if err := m.RunLayer(ctx, l, hs[i], opt); err != nil {
				return nil, fmt.Errorf("act_max: layer %d, sequence %d: %w", l, i+1, err)
			}
		}
		opt.Weights = nil
	}
	return rep, nil
}

// Scales returns the global scales by producer (forward's --scales).
func (r *ActMaxReport) Scales() map[string]float32 {
	s := map[string]float32{}
	for _, b := range r.Boundaries {
		s[b.Name] = b.GlobalScale
	}
	return s
}

// MarshalJSON writes the report exactly as GPT-QModel's
// (activation_calibration.py:194-196), keys in calibration order, float32
// values in their shortest form; then "attention" under the mixed policy
// and "data", which GPT-QModel's lacks: the file it was calibrated on (path
// and sha256), so that eval can refuse it.
func (r *ActMaxReport) MarshalJSON() ([]byte, error) {
	var b []byte
	f := func(x float32) { b = strconv.AppendFloat(b, float64(x), 'g', -1, 32) }
	b = append(b, `{"algorithm":"producer_maximum","recipe":`...)
	b = strconv.AppendQuote(b, r.Recipe)
	b = append(b, `,"global_scales":{`...)
	for i, x := range r.Boundaries {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendQuote(b, x.Name)
		b = append(b, ':')
		f(x.GlobalScale)
	}
	b = append(b, `},"boundaries":{`...)
	for i, x := range r.Boundaries {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendQuote(b, x.Name)
		b = append(b, `:{"amax":`...)
		f(x.Amax)
		b = append(b, `,"global_scale":`...)
		f(x.GlobalScale)
		b = append(b, `,"tokens":`...)
		b = strconv.AppendInt(b, int64(x.Tokens), 10)
		b = append(b, `,"samples":`...)
		b = strconv.AppendInt(b, int64(x.Samples), 10)
		b = append(b, '}')
	}
	b = append(b, `},"upstream_activations":"calibrated_encoded_carriers","weight_updates":0`...)
	if r.Attention != "" {
		// not in GPT-QModel's report: the policy, so that forward and eval
		// can say why a mixed-policy report does not fit an NVFP4 run
		b = append(b, `,"attention":`...)
		b = strconv.AppendQuote(b, r.Attention)
	}
	if r.Data != nil {
		b = append(b, `,"data":{"path":`...)
		b = strconv.AppendQuote(b, r.Data.Path)
		b = append(b, `,"sha256":`...)
		b = strconv.AppendQuote(b, r.Data.SHA256)
		b = append(b, '}')
	}
	return append(b, '}'), nil
}

// PerLayer returns amax and global scale of one producer kind over layers
// (kind: "self_attn.o_proj.input", "mlp.down_proj.input", "output", ...),
// NaN where a layer has none: what a page plots.
func (r *ActMaxReport) PerLayer(kind string, layers int) (amax, scale []float32) {
	amax, scale = make([]float32, layers), make([]float32, layers)
	for l := range layers {
		amax[l], scale[l] = float32(math.NaN()), float32(math.NaN())
	}
	for _, b := range r.Boundaries {
		var l int
		var k string
		if _, err := fmt.Sscanf(b.Name, "model.layers.%d.", &l); err != nil || l < 0 || l >= layers {
			continue
		}
		k = strings.TrimPrefix(b.Name, fmt.Sprintf("model.layers.%d.", l))
		if k == kind {
			amax[l], scale[l] = b.Amax, b.GlobalScale
		}
	}
	return amax, scale
}
