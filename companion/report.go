package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/quantscope/quantscope/companion/ops"
	"github.com/quantscope/quantscope/kernels/cpu"
)

func cmdReport(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("report", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, `print {"module","shape","recipes":[...]}`)
	var p ops.ReportParams
	fs.StringVar(&p.Format, "format", "nvfp4", "the format whose recipes are compared (nvfp4)")
	fs.StringVar(&p.Data, "data", "", "also run local_hessian on this little-endian float32 [tokens, in] file")
	var sf sourceFlags
	sf.register(fs, true, true)
	only := indexShardsFlag(fs)
	pos, err := parseFlags(fs, args, 2, "SOURCE MODULE")
	if err != nil {
		return err
	}
	if p.Data != "" {
		p.Recipes = []string{"max", "mse", "four_six", "least_squares", "local_hessian"}
	}
	params, _ := json.Marshal(p)
	c, err := loadStreaming(ctx, pos[0], sf, only.modules(pos[1])...)
	if err != nil {
		return err
	}
	defer c.Close()
	op, _ := ops.Lookup("report")
	bar := newProgressBar(stderr, "report "+pos[1])
	res, err := op(ctx, ops.Env{Checkpoint: c, Backend: cpu.New(), Progress: bar.Report}, pos[1], params)
	bar.Done()
	if err != nil {
		return err
	}
	rep := res.JSON.(ops.ReportJSON)
	if *asJSON {
		b, err := json.Marshal(rep)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(stdout, "%s\n", b)
		return err
	}
	fmt.Fprintf(stdout, "%s [%d, %d] nvfp4 block-scale recipes\n", rep.Module, rep.Shape[0], rep.Shape[1])
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "recipe\tmse\tsqnr dB\tmax abs err\tblocks changed\t")
	for _, r := range rep.Recipes {
		sq := "exact"
		if r.SQNRdB != nil {
			sq = fmt.Sprintf("%.2f", *r.SQNRdB)
		}
		fmt.Fprintf(tw, "%s\t%.4g\t%s\t%.4g\t%.1f%%\t\n", r.Recipe, r.MSE, sq, r.MaxAbsErr, 100*r.BlocksChanged)
	}
	return tw.Flush()
}
