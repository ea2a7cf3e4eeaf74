package ops

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/quantscope/quantscope/calib"
	"github.com/quantscope/quantscope/model"
)

func init() {
	Register("calibrate", calibrateOp)
}

// CalibrateParams are the "calibrate" op's parameters (`quantscope
// calibrate`'s flags). Data is a path on the companion's machine: token
// ids, one sequence per line.
type CalibrateParams struct {
	Pass       string   `json:"pass"` // weight_max, act_max, percentile, headroom, awq_lite, local_hessian
	Data       string   `json:"data"`
	W4A        string   `json:"w4a"`                  // act_max: nvfp4 (the default); percentile/headroom: the forward's mode
	Recipe     string   `json:"recipe"`               // NVFP4 activation recipe, default least_squares
	Attention  string   `json:"attention"`            // act_max: "" / nvfp4, or fp8 (the mixed policy: the MLP's producers only)
	Percentile *float64 `json:"percentile,omitempty"` // percentile: default 99.99 (0, like any value outside (0, 100], refused)
	Rho        *float64 `json:"rho,omitempty"`        // headroom: default 16384
	// Module, for local_hessian: dump that projection's inputs (the --data
	// file of quantize --recipe local_hessian) instead of the report.
	Module string `json:"module"`
}

// Passes lists the calibration passes.
var Passes = []string{"weight_max", "act_max", "percentile", "headroom", "awq_lite", "local_hessian"}

type dataRef struct {
	Path   string `json:"path"`
	SHA256 string `json:"sha256"`
}

// calibrateOp runs one calibration pass over the whole model (module is
// ignored; local_hessian's dump names its projection in params.module).
// act_max's JSON is GPT-QModel's producer_maximum report; its per-layer
// amax and global scales come as arrays "act_max.amax.KIND" and
// "act_max.global_scale.KIND" [layers] (NaN where a layer has none) for a
// plot over layers.
func calibrateOp(ctx context.Context, env Env, _ string, raw json.RawMessage) (*Result, error) {
	var p CalibrateParams
	if err := DecodeParams("calibrate", raw, &p); err != nil {
		return nil, err
	}
	return Calibrate(ctx, env, p)
}

// Calibrate runs a pass; the CLI and the job share it.
func Calibrate(ctx context.Context, env Env, p CalibrateParams) (*Result, error) {
	known := false
	for _, n := range Passes {
		known = known || n == p.Pass
	}
	if !known {
		return nil, fmt.Errorf("calibrate: --pass %q: want one of weight_max, act_max, percentile, headroom, awq_lite, local_hessian", p.Pass)
	}
	if p.Pass == "weight_max" {
		mods, err := calib.WeightMaxes(ctx, env.Checkpoint, env.Progress)
		if err != nil {
			return nil, err
		}
		return &Result{JSON: map[string]any{"pass": p.Pass, "modules": mods}}, nil
	}
	if p.Data == "" {
		return nil, fmt.Errorf("calibrate: --pass %s needs --data FILE (token ids, one sequence per line)", p.Pass)
	}
	path, err := env.Reads.Path("calibrate", "data", p.Data)
	if err != nil {
		return nil, err
	}
	d, err := calib.ReadData(path)
	if err != nil {
		return nil, err
	}
	m, err := model.New(env.Checkpoint, env.Backend)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", env.Checkpoint.Source.Name(), err)
	}
	o := calib.Options{W4A: p.W4A, Attention: p.Attention, Recipe: p.Recipe, Progress: env.Progress}
	if p.Attention != "" && p.Pass != "act_max" {
		return nil, fmt.Errorf("calibrate: --attention applies to --pass act_max (the producers a mixed-policy forward calibrates)")
	}
	ref := dataRef{d.Path, d.SHA256}
	if p.Module != "" && p.Pass != "local_hessian" {
		return nil, fmt.Errorf("calibrate: --module applies to --pass local_hessian (the input dump)")
	}
	switch p.Pass {
	case "act_max":
		switch p.W4A {
		case "", model.W4ANVFP4:
		case model.W4AFP8:
			return nil, fmt.Errorf("calibrate: act_max with --w4a fp8: W4A-FP8 activations take a per-token dynamic scale, there is no global scale to calibrate; use --w4a nvfp4")
		default:
			return nil, fmt.Errorf("calibrate: act_max: --w4a %q: want nvfp4", p.W4A)
		}
		if why := env.Checkpoint.Forward().W4ARefused; why != "" {
			return nil, fmt.Errorf("calibrate: act_max measures the producers of the W4A-NVFP4 forward (GPT-QModel's producer_maximum), which runs on GPTQ INT4 weights: %s",
				strings.Replace(why, "--w4a needs", "W4A needs", 1))
		}
		rep, err := calib.ActMax(ctx, m, d, o, calib.ActMaxHooks{})
		if err != nil {
			return nil, err
		}
		res := &Result{JSON: rep}
		for _, kind := range []string{"input", "self_attn.o_proj.input", "post_attention_residual", "mlp.down_proj.input", "output"} {
			a, g := rep.PerLayer(kind, m.Config.Layers)
			res.Arrays = append(res.Arrays,
				Array{Name: "act_max.amax." + kind, Shape: []int{len(a)}, F32: a},
				Array{Name: "act_max.global_scale." + kind, Shape: []int{len(g)}, F32: g})
		}
		return res, nil
	case "percentile":
		pc := 99.99
		if p.Percentile != nil {
			pc = *p.Percentile
		}
		r, err := calib.Percentiles(ctx, m, d, o, pc)
		if err != nil {
			return nil, err
		}
		return &Result{JSON: map[string]any{"pass": p.Pass, "percentile": pc, "bins": calib.PercentileBins, "recipe": recipeOr(p.Recipe), "w4a": w4aOr(p.W4A), "producers": r, "data": ref}}, nil
	case "headroom":
		rho := float64(calib.HeadroomRho)
		if p.Rho != nil {
			rho = *p.Rho
		}
		r, err := calib.Headrooms(ctx, m, d, o, rho)
		if err != nil {
			return nil, err
		}
		return &Result{JSON: map[string]any{"pass": p.Pass, "rho": rho, "bins": calib.HeadroomBins, "upper_percentile": 99.99, "anchor_percentile": 1, "w4a": w4aOr(p.W4A), "producers": r, "data": ref}}, nil
	}
	if p.W4A != "" && p.W4A != model.W4ANone {
		return nil, fmt.Errorf("calibrate: %s collects each projection's inputs from the dense forward; --w4a %s does not apply", p.Pass, p.W4A)
	}
	if p.Pass == "awq_lite" {
		r, err := calib.AWQLite(ctx, m, d, o, env.Backend)
		if err != nil {
			return nil, err
		}
		return &Result{JSON: map[string]any{"pass": p.Pass, "weights": "nvfp4 (max)", "alphas": calib.AWQAlphas, "modules": r, "data": ref}}, nil
	}
	if p.Module != "" {
		// the dump: written to WriteDir when the companion has one, else
		// returned as the file's bytes
		mod, err := FindModule(env.Checkpoint, p.Module)
		if err != nil {
			return nil, err
		}
		p.Module = mod.Name
		x, err := calib.Inputs(ctx, m, d, o, p.Module)
		if err != nil {
			return nil, err
		}
		// The module's name is the repo's: a "/" or "\\" in it must not
		// make a path, and the file is written inside the folder only.
		stem := "local_hessian." + strings.NewReplacer("/", "_", "\\", "_").Replace(p.Module)
		f := File{Name: fitName(stem, ".f32"), Data: calib.F32Bytes(x)}
		// calibrate's note beside it, as the command line writes it: it
		// keeps quantize from taking these inputs for another module
		note := File{Name: f.Name + ".json", Data: calib.InputsNote(p.Module, x)}
		if env.WriteDir != "" {
			// The inputs are written whole under a name of their own first;
			// only then does the old note go, the inputs take their name and
			// their note follows: a failed write leaves the old inputs with
			// their own note.
			partial := fitName(stem, ".f32.partial")
			if _, err = writeUnder("calibrate", env.WriteDir, partial, f.Data); err != nil {
				return nil, err
			}
			if err := removeUnder(env.WriteDir, note.Name); err != nil {
				removeUnder(env.WriteDir, partial)
				return nil, fmt.Errorf("calibrate: rule calibrate-path: the old note %q under %s: %w", note.Name, env.WriteDir, err)
			}
			if f.Path, err = renameUnder("calibrate", env.WriteDir, partial, f.Name); err != nil {
				removeUnder(env.WriteDir, partial)
				return nil, err
			}
			if note.Path, err = writeUnder("calibrate", env.WriteDir, note.Name, note.Data); err != nil {
				return nil, err
			}
			f.Data, note.Data = nil, nil
		}
		return &Result{
			JSON:  map[string]any{"pass": p.Pass, "module": p.Module, "tokens": x.Rows, "in": x.Cols, "file": f.Name, "data": ref, "next": "quantscope quantize --format nvfp4 --recipe local_hessian --data " + f.Name + " --out FILE SOURCE " + p.Module},
			Files: []File{f, note},
		}, nil
	}
	r, err := calib.LocalHessians(ctx, m, d, o, env.Backend)
	if err != nil {
		return nil, err
	}
	return &Result{JSON: map[string]any{"pass": p.Pass, "modules": r, "data": ref}}, nil
}

func recipeOr(r string) string {
	if r == "" {
		return "least_squares"
	}
	return r
}

func w4aOr(w string) string {
	if w == "" {
		return model.W4ANone
	}
	return w
}
