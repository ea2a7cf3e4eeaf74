package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"runtime/debug"
	"slices"
	"strings"

	"github.com/quantscope/quantscope/formats/checkpoint"
	"github.com/quantscope/quantscope/formats/hub"
	"github.com/quantscope/quantscope/formats/scheme"
)

// sourceFlags are the flags every command that reads a SOURCE takes.
type sourceFlags struct {
	endpoint, revision, token string
	noCache                   bool
	// fromClient: endpoint is a websocket client's, not typed by the user
	// (envTokenGoesTo).
	fromClient bool
}

func (f *sourceFlags) register(fs *flag.FlagSet, withRevision, withToken bool) {
	// An empty value is a mistake (a script's unset variable), not the
	// default: it is refused rather than read as huggingface.co or main.
	nonEmpty := func(name string, dst *string) func(string) error {
		return func(v string) error {
			if strings.TrimSpace(v) == "" {
				return fmt.Errorf("--%s %q: empty; leave the flag out for the default", name, v)
			}
			*dst = v
			return nil
		}
	}
	fs.Func("endpoint", "hub endpoint `URL` (default $HF_ENDPOINT, else https://huggingface.co)", nonEmpty("endpoint", &f.endpoint))
	if withRevision {
		fs.Func("revision", "`REV`: branch, tag or commit (default main)", nonEmpty("revision", &f.revision))
	}
	if withToken {
		fs.StringVar(&f.token, "token", "", "hub token for gated repos (default $HF_TOKEN)")
	}
	fs.BoolVar(&f.noCache, "no-cache", false, "read ORG/NAME from the hub even when this machine's Hugging Face cache holds it")
}

func cmdInspect(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("inspect", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print the inventory as one JSON object")
	var sf sourceFlags
	sf.register(fs, true, true)
	pos, err := parseFlags(fs, args, 1, "SOURCE")
	if err != nil {
		return err
	}
	// An inventory keeps nearly all it allocates until it is printed, so a
	// collection finds little garbage while it marks hundreds of thousands
	// of names (6% of the CPU on a 180k-tensor repo): none runs unless the
	// heap nears main's memory limit.
	debug.SetGCPercent(-1)
	c, err := loadCheckpoint(ctx, pos[0], sf)
	if err != nil {
		return err
	}
	defer c.Close()
	if *asJSON {
		return c.InventoryStreamed().WriteJSON(stdout)
	}
	return printInventory(stdout, c.InventoryWithoutTensors())
}

func printInventory(w io.Writer, inv *checkpoint.Inventory) error {
	s := inv.Summary
	var b strings.Builder
	if inv.Commit != "" {
		fmt.Fprintf(&b, "%s (commit %s)\n", inv.Source, hub.ShortCommit(inv.Commit))
	} else {
		fmt.Fprintf(&b, "%s\n", inv.Source)
	}
	fmt.Fprintf(&b, "  %d file(s), %d tensors, %s of tensor data (+%s of headers)\n", s.Files, s.Tensors, humanBytes(s.Bytes), humanBytes(s.HeaderBytes))
	fmt.Fprintf(&b, "  scheme: %s\n", describeScheme(inv.Scheme))
	bias := ""
	if s.BiasParameters > 0 {
		bias = fmt.Sprintf(" (%s of them in biases)", humanCount(s.BiasParameters))
	}
	fmt.Fprintf(&b, "  %s parameters%s, %.2f bits per weight, %d modules (%d quantized)\n\n", humanCount(s.Parameters), bias, s.BitsPerWeight, s.Modules, s.QuantizedModules)
	fmt.Fprintf(&b, "  %-10s %14s %7s %12s %7s\n", "format", "parameters", "share", "bytes", "share")
	for _, f := range sortedKeys(s.ParamsByFormat, s.BytesByFormat) {
		fmt.Fprintf(&b, "  %-10s %14s %6.1f%% %12s %6.1f%%\n", f, humanCount(s.ParamsByFormat[f]), pct(s.ParamsByFormat[f], s.Parameters),
			humanBytes(s.BytesByFormat[f]), pct(s.BytesByFormat[f], s.Bytes))
	}
	fmt.Fprintf(&b, "\n  bytes by dtype:")
	for _, d := range sortedKeys(s.BytesByDType, nil) {
		fmt.Fprintf(&b, " %s %s (%.0f%%)", d, humanBytes(s.BytesByDType[d]), pct(s.BytesByDType[d], s.Bytes))
	}
	fmt.Fprintf(&b, "\n\n")
	if lm := layerMapText(inv.Layers); lm != "" {
		b.WriteString(lm + "\n")
	}
	if len(inv.Findings) == 0 {
		fmt.Fprintf(&b, "  no findings: the metadata and the bytes agree\n")
	} else {
		fmt.Fprintf(&b, "  findings: %d error(s), %d warning(s), %d note(s)\n", s.Errors, s.Warnings, len(inv.Findings)-s.Errors-s.Warnings)
		// A broken repo can repeat one rule thousands of times: show the
		// first few of each and count the rest (--json lists them all).
		shown := map[string]int{}
		for _, f := range inv.Findings {
			if shown[f.Rule]++; shown[f.Rule] > findingsPerRule {
				continue
			}
			where := f.Tensor
			if where == "" {
				where = f.Module
			}
			if where != "" {
				where += ": "
			}
			fmt.Fprintf(&b, "  %-7s %s  %s%s\n", f.Severity, f.Rule, where, f.Message)
		}
		for _, f := range inv.Findings {
			if n := shown[f.Rule]; n > findingsPerRule {
				fmt.Fprintf(&b, "  %-7s %s  … and %d more (inspect --json lists every one)\n", f.Severity, f.Rule, n-findingsPerRule)
				shown[f.Rule] = 0
			}
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// findingsPerRule bounds how many findings of one rule the terminal shows.
const findingsPerRule = 8

func describeScheme(s *scheme.Scheme) string {
	if s.Method == "none" {
		return "none declared (no quantization_config, no hf_quant_config.json)"
	}
	parts := []string{s.Method}
	if s.QuantAlgo != "" {
		parts = append(parts, s.QuantAlgo)
	}
	if s.Format != "" {
		parts = append(parts, s.Format)
	}
	parts = append(parts, "family "+s.Family)
	if s.Bits > 0 {
		parts = append(parts, fmt.Sprintf("%d-bit", s.Bits))
	}
	if s.GroupSize > 0 {
		parts = append(parts, fmt.Sprintf("group %d", s.GroupSize))
	}
	if len(s.WeightBlockSize) == 2 {
		parts = append(parts, fmt.Sprintf("blocks %dx%d", s.WeightBlockSize[0], s.WeightBlockSize[1]))
	}
	if s.KVCache != "" {
		parts = append(parts, "kv-cache "+s.KVCache)
	}
	out := strings.Join(parts, ", ")
	if ex := append(slices.Clone(s.ExcludeModules), s.Ignore...); len(ex) > 0 {
		// Hundreds of per-layer entries read as a few patterns (--json lists each).
		var parts []string
		for _, g := range scheme.GroupNames(ex) {
			parts = append(parts, g.String())
		}
		out += "; not quantized: " + strings.Join(parts, ", ")
	}
	if len(s.Dynamic) > 0 {
		var rules []string
		for _, r := range s.Dynamic {
			rules = append(rules, describeDynamic(r))
		}
		out += "; dynamic: " + strings.Join(rules, ", ")
	}
	if len(s.DeclaredIn) > 0 {
		out += " (" + strings.Join(s.DeclaredIn, ", ") + ")"
	}
	return out
}

// describeDynamic is one GPT-QModel dynamic rule: "PATTERN → 8-bit group
// 64", "PATTERN → not quantized".
func describeDynamic(r scheme.DynamicRule) string {
	if r.Skip {
		return r.Pattern + " → not quantized"
	}
	var o []string
	if r.Bits > 0 {
		o = append(o, fmt.Sprintf("%d-bit", r.Bits))
	}
	if r.GroupSize != 0 {
		o = append(o, fmt.Sprintf("group %d", r.GroupSize))
	}
	if r.Symmetric != nil {
		o = append(o, fmt.Sprintf("sym %v", *r.Symmetric))
	}
	if r.DescAct != nil {
		o = append(o, fmt.Sprintf("desc_act %v", *r.DescAct))
	}
	if b := r.WeightBlockSize; len(b) == 2 {
		o = append(o, fmt.Sprintf("blocks %dx%d", b[0], b[1]))
	}
	if len(o) == 0 {
		o = append(o, "base config")
	}
	return r.Pattern + " → " + strings.Join(o, " ")
}

func sortedKeys(a, b map[string]uint64) []string {
	seen := map[string]bool{}
	var out []string
	for _, m := range []map[string]uint64{a, b} {
		for k := range m {
			if !seen[k] {
				seen[k] = true
				out = append(out, k)
			}
		}
	}
	slices.SortFunc(out, func(x, y string) int {
		if a[x] != a[y] {
			if a[x] > a[y] {
				return -1
			}
			return 1
		}
		return strings.Compare(x, y)
	})
	return out
}

func pct(a, b uint64) float64 {
	if b == 0 {
		return 0
	}
	return 100 * float64(a) / float64(b)
}

func humanBytes(n uint64) string {
	// Decimal units, as the hub's file list, diff and fit write sizes.
	const unit = 1000
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	v, i := float64(n), -1
	for v >= unit && i < 5 {
		v /= unit
		i++
	}
	return fmt.Sprintf("%.1f %cB", v, "kMGTPE"[i])
}

func humanCount(n uint64) string {
	switch {
	case n >= 1e12:
		return fmt.Sprintf("%.2f T", float64(n)/1e12)
	case n >= 1e9:
		return fmt.Sprintf("%.2f B", float64(n)/1e9)
	case n >= 1e6:
		return fmt.Sprintf("%.2f M", float64(n)/1e6)
	case n >= 1e3:
		return fmt.Sprintf("%.1f K", float64(n)/1e3)
	}
	return fmt.Sprint(n)
}
