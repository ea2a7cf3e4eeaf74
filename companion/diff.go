package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"sync"

	"github.com/quantscope/quantscope/formats/checkpoint"
	"github.com/quantscope/quantscope/formats/compare"
	"github.com/quantscope/quantscope/formats/hub"
)

// cmdDiff sets two repos side by side, read from their headers (both loaded
// at once): by anatomy kind and format, the totals with and without extra
// layers, and the modules whose stored format changed.
func cmdDiff(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("diff", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print the comparison as one JSON object")
	var sf sourceFlags
	sf.register(fs, false, true)
	pos, err := parseFlags(fs, args, 2, "SOURCE_A SOURCE_B")
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var cs [2]*checkpoint.Checkpoint
	var errs [2]error
	var wg sync.WaitGroup
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cs[i], errs[i] = loadCheckpoint(ctx, pos[i], sf)
			if errs[i] != nil {
				cancel() // the other one is of no use now
			}
		}()
	}
	wg.Wait()
	for _, c := range cs {
		if c != nil {
			defer c.Close()
		}
	}
	// The error that stopped the other load, not the cancellation it caused.
	for _, e := range errs {
		if e != nil && !errors.Is(e, context.Canceled) {
			return e
		}
	}
	if err := cmp.Or(errs[0], errs[1]); err != nil {
		return err
	}
	d := compare.New(compare.FromCheckpoint(cs[0]), compare.FromCheckpoint(cs[1]))
	if *asJSON {
		enc := json.NewEncoder(stdout)
		return enc.Encode(d)
	}
	_, err = io.WriteString(stdout, diffText(d))
	return err
}

// decimalUnit picks GB, MB or kB (powers of 1000, as model cards and the
// ledgers people write use) for the larger of two sizes.
func decimalUnit(n uint64) (string, float64) {
	switch {
	case n >= 1e9:
		return "GB", 1e9
	case n >= 1e6:
		return "MB", 1e6
	}
	return "kB", 1e3
}

func ratio(a, b uint64) string {
	switch {
	case a == 0 && b == 0:
		return ""
	case a == 0:
		return "new"
	}
	return fmt.Sprintf("%.2f×", float64(b)/float64(a))
}

func bitsText(bytes, params uint64) string {
	if params == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", 8*float64(bytes)/float64(params))
}

// formatsText lists a side's formats, largest first, with their sizes.
func formatsText(m map[string]uint64, div float64) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(x, y string) int {
		if m[x] != m[y] {
			if m[x] > m[y] {
				return -1
			}
			return 1
		}
		return strings.Compare(x, y)
	})
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %.2f", k, float64(m[k])/div)
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, " + ")
}

func diffText(d *compare.Diff) string {
	unit, div := decimalUnit(max(d.A.Bytes, d.B.Bytes))
	var b strings.Builder
	for _, s := range []struct {
		tag  string
		side compare.Side
	}{{"A", d.A}, {"B", d.B}} {
		commit := ""
		if s.side.Commit != "" {
			commit = " (commit " + hub.ShortCommit(s.side.Commit) + ")"
		}
		fmt.Fprintf(&b, "%s  %s%s\n   %.2f %s, %s parameters, %.2f bits per weight", s.tag, s.side.Source, commit,
			float64(s.side.Bytes)/div, unit, humanCount(s.side.Parameters), s.side.BitsPerWeight)
		if s.side.Bytes != s.side.BytesWithoutExtra { // only a repo with layers past num_hidden_layers
			fmt.Fprintf(&b, " (%.2f without extra layers)", s.side.BitsPerWeightWithoutExtra)
		}
		b.WriteString("\n")
	}
	fmt.Fprintf(&b, "\n  %-15s %10s %9s %5s %9s %5s %9s %7s\n", "kind", "parameters", "A "+unit, "bits", "B "+unit, "bits", "change", "×")
	row := func(name string, params, ab, bb, ap, bp uint64) {
		change := (float64(bb) - float64(ab)) / div
		if math.Abs(change) < 0.005 {
			change = 0 // no "-0.00"
		}
		fmt.Fprintf(&b, "  %-15s %10s %9.2f %5s %9.2f %5s %+9.2f %7s\n", name, humanCount(params), float64(ab)/div, bitsText(ab, ap),
			float64(bb)/div, bitsText(bb, bp), change, ratio(ab, bb))
	}
	for _, k := range d.Kinds {
		row(k.Kind, max(k.AParameters, k.BParameters), k.ABytes, k.BBytes, k.AParameters, k.BParameters)
		line := "    " + formatsText(k.AFormats, div) + " → " + formatsText(k.BFormats, div)
		if k.AParameters != k.BParameters {
			line += fmt.Sprintf("  (parameters %s → %s)", humanCount(k.AParameters), humanCount(k.BParameters))
		}
		b.WriteString(line + "\n")
	}
	row("total", max(d.A.Parameters, d.B.Parameters), d.A.Bytes, d.B.Bytes, d.A.Parameters, d.B.Parameters)
	if d.A.Parameters != d.B.Parameters { // each side's bits are over its own parameters
		fmt.Fprintf(&b, "    (parameters %s → %s)\n", humanCount(d.A.Parameters), humanCount(d.B.Parameters))
	}
	if d.A.Bytes != d.A.BytesWithoutExtra || d.B.Bytes != d.B.BytesWithoutExtra {
		row("without extra", max(d.A.ParametersWithoutExtra, d.B.ParametersWithoutExtra), d.A.BytesWithoutExtra, d.B.BytesWithoutExtra,
			d.A.ParametersWithoutExtra, d.B.ParametersWithoutExtra)
	}
	if len(d.Changed) == 0 {
		b.WriteString("\n  no module changed its stored format\n")
		return b.String()
	}
	n := 0
	w := 0
	for _, c := range d.Changed {
		n += max(c.Count, 1)
		w = max(w, len(c.Module))
	}
	w = min(w, 64)
	aw := 0
	for _, c := range d.Changed {
		aw = max(aw, len(c.AFormat)+len(c.BFormat))
	}
	fmt.Fprintf(&b, "\n  %s module(s) changed their stored format:\n", thousands(n))
	for _, c := range d.Changed {
		line := fmt.Sprintf("    %-*s  %s → %s", w, c.Module, c.AFormat, c.BFormat)
		if c.Count > 0 {
			line += fmt.Sprintf("%*s× %s", aw-len(c.AFormat)-len(c.BFormat)+2, "", thousands(c.Count))
		}
		b.WriteString(line + "\n")
	}
	return b.String()
}

// thousands writes n with comma separators (45,808).
func thousands(n int) string {
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0 && s[i-1] != '-'; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
