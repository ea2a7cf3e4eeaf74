package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"strings"

	"github.com/quantscope/quantscope/companion/ops"
)

func cmdStats(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("stats", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print the statistics as one JSON object")
	bins := fs.Int("bins", 64, "value histogram bins")
	backend := fs.String("backend", "cpu", backendUsage)
	var sf sourceFlags
	sf.register(fs, true, true)
	only := indexShardsFlag(fs)
	pos, err := parseFlags(fs, args, 2, "SOURCE MODULE")
	if err != nil {
		return err
	}
	if *bins < 1 || *bins > 4096 {
		return &usageError{msg: fmt.Sprintf("stats: --bins %d outside 1..4096", *bins)}
	}
	be, closeBackend, err := backendNamed(*backend, stderr)
	if err != nil {
		return err
	}
	defer closeBackend()
	c, err := loadStreaming(ctx, pos[0], sf, only.modules(pos[1])...)
	if err != nil {
		return err
	}
	defer c.Close()
	bar := newProgressBar(stderr, "stats "+pos[1])
	doc, err := ops.ModuleStats(ctx, ops.Env{Checkpoint: c, Backend: be, Progress: bar.Report}, pos[1], ops.StatsParams{Bins: *bins})
	bar.Done()
	if err != nil {
		return err
	}
	if *asJSON {
		b, err := json.Marshal(doc)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(stdout, "%s\n", b)
		return err
	}
	return printStats(stdout, doc)
}

func printStats(w io.Writer, d *ops.StatsDoc) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%s  [%d, %d]  %s\n", d.Name, d.Shape[0], d.Shape[1], d.Format)
	fmt.Fprintf(&b, "min=%g max=%g mean=%g std=%g nan=%d inf=%d\n", float64(d.Min), float64(d.Max), float64(d.Mean), float64(d.Std), d.NaN, d.Inf)
	if d.Codes > 0 {
		fmt.Fprintf(&b, "at the format's largest code: %.4f%% of %d codes\n", 100*float64(d.AtMaxFraction), d.Codes)
	}
	if d.Scales > 0 {
		fmt.Fprintf(&b, "scales: %d (%d zero)", d.Scales, d.ScaleZero)
		if d.ScaleE4M3 > 0 {
			fmt.Fprintf(&b, "; of the E4M3 ones %.4f%% at 448, %.4f%% subnormal", 100*float64(d.ScaleAtMaxFraction), 100*float64(d.ScaleSubnormalFraction))
		}
		b.WriteString("\n")
	}
	fmt.Fprintf(&b, "%.3f s, %s read, %s\n", d.Seconds, humanBytes(d.BytesRead), d.Backend)
	writeHist(&b, "values", d.Histogram, func(x float64) string { return fmt.Sprintf("%.4g", x) })
	writeHist(&b, "scales (log2 bins)", d.ScaleHistogram, func(x float64) string {
		_, e := math.Frexp(x)
		return fmt.Sprintf("2^%d", e-1)
	})
	_, err := io.WriteString(w, b.String())
	return err
}

func writeHist(b *strings.Builder, title string, h ops.HistJSON, label func(float64) string) {
	if len(h.Counts) == 0 {
		return
	}
	var top int64
	for _, c := range h.Counts {
		top = max(top, c)
	}
	fmt.Fprintf(b, "%s:\n", title)
	for i, c := range h.Counts {
		bar := strings.Repeat("#", int(40*c/max(top, 1)))
		fmt.Fprintf(b, "  %11s .. %-11s %12d %s\n", label(h.Edges[i]), label(h.Edges[i+1]), c, bar)
	}
}
