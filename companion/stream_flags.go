package main

import (
	"flag"
	"fmt"
	"github.com/quantscope/quantscope/companion/ops"
	"io"

	"github.com/quantscope/quantscope/calib"
	"github.com/quantscope/quantscope/model"
)

// streamFlags are forward's and eval's W4A-NVFP4 stream flags.
type streamFlags struct {
	attention, recipe, scales string
}

func (s *streamFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&s.attention, "attention", "", "with --w4a nvfp4: fp8 runs attention as W4A-FP8 and the MLP as NVFP4 (the mixed policy)")
	fs.StringVar(&s.recipe, "recipe", "", "NVFP4 activation recipe: nvidia, four_six, least_squares (default), least_squares_grid")
	fs.StringVar(&s.scales, "scales", "", "a calibrate --pass act_max report: the producers' calibrated NVFP4 global scales")
}

// options builds the model options and says on stderr when the forward is
// not causal (GPT-QModel's dynamic NVFP4 global scales run over every token).
func (s *streamFlags) options(w4a string, stderr io.Writer) (model.Options, *calib.ScalesFile, error) {
	opt := model.Options{W4A: w4a, Attention: s.attention, Recipe: s.recipe}
	if s.recipe != "" && w4a != model.W4ANVFP4 {
		return opt, nil, fmt.Errorf("--recipe %s: an NVFP4 activation recipe, for --w4a nvfp4 (this run is --w4a %s)", s.recipe, w4a)
	}
	var sf *calib.ScalesFile
	if s.scales != "" {
		if w4a != model.W4ANVFP4 {
			return opt, nil, fmt.Errorf("--scales: calibrated NVFP4 global scales need --w4a nvfp4")
		}
		var err error
		if sf, err = calib.ReadScales(s.scales); err != nil {
			return opt, nil, err
		}
		if opt.Recipe == "" {
			opt.Recipe = sf.Recipe
		} else if sf.Recipe != "" && sf.Recipe != opt.Recipe {
			return opt, nil, fmt.Errorf("--scales %s was calibrated with recipe %s (global scale amax/(448·%s)); --recipe %s would misuse it", s.scales, sf.Recipe, map[bool]string{true: "6", false: "4"}[sf.Recipe == "nvidia"], opt.Recipe)
		}
		// Only quantscope's reports name their policy (GPT-QModel's do not):
		// where one does, a mismatch is said plainly; otherwise the model's
		// CheckScales judges the producers the report holds.
		calibrated, asked := policyName(sf.Attention), policyName(opt.Attention)
		if sf.Attention != "" && calibrated != asked {
			return opt, nil, fmt.Errorf("--scales %s was calibrated under %s; this run is %s: its NVFP4 producers differ (calibrate --pass act_max --attention %s)",
				s.scales, calibrated, asked, map[bool]string{true: "fp8", false: "nvfp4"}[opt.Attention == model.W4AFP8])
		}
		opt.Scales = sf.Scales
	}
	if !model.Causal(opt) {
		fmt.Fprintln(stderr, "note: "+ops.NonCausalNote)
	}
	return opt, sf, nil
}

// policyName names a W4A-NVFP4 attention policy.
func policyName(attention string) string {
	if attention == model.W4AFP8 {
		return "the mixed policy (FP8 attention, NVFP4 MLP)"
	}
	return "NVFP4 attention and MLP"
}
