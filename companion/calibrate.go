package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"text/tabwriter"

	"github.com/quantscope/quantscope/calib"
	"github.com/quantscope/quantscope/companion/ops"
	"github.com/quantscope/quantscope/kernels/cpu"
	"github.com/quantscope/quantscope/model"
)

// cmdCalibrate is `quantscope calibrate`: one pass of companion/ops'
// "calibrate" op (the same function a page's job runs) on the CPU backend.
func cmdCalibrate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("calibrate", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print the report as JSON (act_max: GPT-QModel's producer_maximum report)")
	out := fs.String("out", "", "write the JSON report to FILE (local_hessian --module: the inputs as little-endian float32 [tokens, in])")
	var p ops.CalibrateParams
	fs.StringVar(&p.Pass, "pass", "", "weight_max, act_max, percentile, headroom, awq_lite or local_hessian")
	fs.StringVar(&p.Data, "data", "", "calibration token ids, one sequence per line")
	fs.StringVar(&p.W4A, "w4a", "", "act_max: nvfp4 (default); percentile/headroom: the forward's mode while data flows (none, fp8, nvfp4)")
	fs.StringVar(&p.Recipe, "recipe", "", "NVFP4 activation recipe: nvidia, four_six, least_squares (default), least_squares_grid")
	fs.StringVar(&p.Attention, "attention", "", "act_max: fp8 calibrates the mixed policy (FP8 attention, NVFP4 MLP: the MLP's producers only), for forward/eval --attention fp8")
	pc := fs.Float64("percentile", 99.99, "percentile: the percentile of |x|")
	rho := fs.Float64("rho", calib.HeadroomRho, "headroom: rho, in (0, 28672)")
	p.Percentile, p.Rho = pc, rho
	fs.StringVar(&p.Module, "module", "", "local_hessian: dump this projection's inputs to --out (quantize --recipe local_hessian --data reads them)")
	var sf sourceFlags
	sf.register(fs, true, true)
	pos, err := parseFlags(fs, args, 1, "SOURCE")
	if err != nil {
		return err
	}
	if p.Pass == "" {
		return &usageError{msg: "calibrate: --pass is required"}
	}
	if p.Module != "" && *out == "" {
		return &usageError{msg: "calibrate: --module needs --out FILE (the activations file)"}
	}
	if *out != "" {
		if err := checkOut(*out); err != nil { // before the passes run
			return err
		}
	}
	c, err := loadStreaming(ctx, pos[0], sf)
	if err != nil {
		return err
	}
	defer c.Close()
	progress := progressLine(stderr, "calibrate "+p.Pass, "steps")
	if p.Module != "" {
		mod, err := ops.FindModule(c, p.Module) // a misspelt name gets the nearest ones
		if err != nil {
			return err
		}
		p.Module = mod.Name
		// the dump goes where --out says; the op would pick a folder itself
		if p.Pass != "local_hessian" {
			return &usageError{msg: "calibrate: --module applies to --pass local_hessian"}
		}
		d, err := calib.ReadData(p.Data)
		if err != nil {
			return err
		}
		m, err := model.New(c, cpu.New())
		if err != nil {
			return fmt.Errorf("%s: %w", c.Source.Name(), err)
		}
		x, err := calib.Inputs(ctx, m, d, calib.Options{Progress: progress}, p.Module)
		if err != nil {
			return err
		}
		// The inputs are written whole first (not yet under their name);
		// only then does the old note go, the inputs take the name and their
		// note follows. A failed write leaves the old inputs with their own
		// note; no note ever stands beside inputs it does not describe.
		o, err := createOut(*out)
		if err != nil {
			return err
		}
		if _, err := o.f.Write(calib.F32Bytes(x)); err != nil {
			o.abort()
			return o.wrap(err)
		}
		if err := os.Remove(*out + ".json"); err != nil && !errors.Is(err, os.ErrNotExist) {
			o.abort()
			return fmt.Errorf("--out %s: the old note beside it: %w", *out, err)
		}
		if err := o.commit(); err != nil {
			return err
		}
		note := calib.InputsNote(p.Module, x)
		if err := writeOut(*out+".json", func(f *os.File) error { _, err := f.Write(note); return err }); err != nil {
			return err
		}
		_, err = fmt.Fprintf(stdout, "%s: %d tokens × %d inputs written to %s (little-endian float32)\nnext: quantscope quantize --format nvfp4 --recipe local_hessian --data %s --out FILE %s %s\n", p.Module, x.Rows, x.Cols, *out, *out, pos[0], p.Module)
		return err
	}
	res, err := ops.Calibrate(ctx, ops.Env{Checkpoint: c, Backend: cpu.New(), Progress: progress}, p)
	if err != nil {
		return err
	}
	b, err := json.Marshal(res.JSON)
	if err != nil {
		return err
	}
	if *out != "" {
		if err := writeOut(*out, func(f *os.File) error { _, err := f.Write(append(b, '\n')); return err }); err != nil {
			return err
		}
	}
	if *asJSON {
		_, err = fmt.Fprintf(stdout, "%s\n", b)
		return err
	}
	return printCalibration(stdout, p.Pass, res.JSON)
}

// printCalibration prints a pass's report as a table.
func printCalibration(w io.Writer, pass string, report any) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	switch r := report.(type) {
	case *calib.ActMaxReport:
		fmt.Fprintf(tw, "producer_maximum, recipe %s, calibrated on %s (sha256 %.12s…)\n", r.Recipe, r.Data.Path, r.Data.SHA256)
		fmt.Fprintln(tw, "producer\tamax\tglobal scale\ttokens\tsamples")
		for _, b := range r.Boundaries {
			fmt.Fprintf(tw, "%s\t%.6g\t%.6g\t%d\t%d\n", b.Name, b.Amax, b.GlobalScale, b.Tokens, b.Samples)
		}
	case map[string]any:
		switch v := r["modules"].(type) {
		case []calib.WeightMax:
			fmt.Fprintln(tw, "module\tshape\tamax\tnvfp4 global scale\tfp8 scale")
			for _, m := range v {
				fmt.Fprintf(tw, "%s\t%dx%d\t%.6g\t%.6g\t%.6g\n", m.Module, m.Shape[0], m.Shape[1], m.Amax, m.NVFP4, m.FP8)
			}
		case []calib.AWQ:
			fmt.Fprintln(tw, "module\talpha\tmse before\tmse after")
			for _, m := range v {
				fmt.Fprintf(tw, "%s\t%.1f\t%.4g\t%.4g\n", m.Module, m.Alpha, m.MSEBefore, m.MSEAfter)
			}
		case []calib.LocalHessian:
			fmt.Fprintln(tw, "module\ttokens\toutput mse (max)\toutput mse (local_hessian)")
			for _, m := range v {
				fmt.Fprintf(tw, "%s\t%d\t%.4g\t%.4g\n", m.Module, m.Tokens, m.MSEMax, m.MSELocalHessian)
			}
		}
		switch v := r["producers"].(type) {
		case []calib.Percentile:
			fmt.Fprintf(tw, "percentile %v of |x| (%d bins)\n", r["percentile"], calib.PercentileBins)
			fmt.Fprintln(tw, "producer\tmax\tamax\tglobal scale\ttokens")
			for _, p := range v {
				fmt.Fprintf(tw, "%s\t%.6g\t%.6g\t%.6g\t%d\n", p.Producer, p.Max, p.Amax, p.GlobalScale, p.Tokens)
			}
		case []calib.Headroom:
			fmt.Fprintf(tw, "NVFP4 activation headroom, rho %v\n", r["rho"])
			fmt.Fprintln(tw, "producer\tupper\tanchor\tamax\tglobal scale\tblocks")
			for _, p := range v {
				fmt.Fprintf(tw, "%s\t%.6g\t%.6g\t%.6g\t%.6g\t%d\n", p.Producer, p.Upper, p.Anchor, p.Amax, p.GlobalScale, p.Blocks)
			}
			for _, p := range v {
				if p.Warning != "" {
					fmt.Fprintf(tw, "warning: %s: %s\n", p.Producer, p.Warning)
				}
			}
		}
	default:
		return fmt.Errorf("calibrate: %s: no table for this report", pass)
	}
	return tw.Flush()
}
