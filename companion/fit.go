package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/quantscope/quantscope/formats/fit"
	"github.com/quantscope/quantscope/formats/hub"
)

// gpuFlags collects repeated --gpu values.
type gpuFlags []fit.GPU

func (g *gpuFlags) String() string { return fmt.Sprint(*g) }

func (g *gpuFlags) Set(s string) error {
	v, err := fit.ParseGPU(s)
	if err != nil {
		return err
	}
	*g = append(*g, v)
	return nil
}

func cmdFit(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("fit", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print the estimate as one JSON object")
	var o fit.Options
	fs.IntVar(&o.TP, "tp", 1, "tensor-parallel degree (GPUs a replica)")
	fs.Func("context", "tokens a sequence: 4096, 32k, 128k (k = 1024, as vLLM reads max_model_len); default max_position_embeddings capped at 32768, 8192 when unstated", func(v string) error {
		n, err := parseTokens1024(v)
		if err != nil {
			return fmt.Errorf("--context %q: want a whole number of tokens, or one with k (128k = 131072)", v)
		}
		o.Context = n
		return nil
	})
	fs.IntVar(&o.Batch, "batch", 1, "sequences served at once")
	fs.BoolVar(&o.MTP, "mtp", false, "load the layers past num_hidden_layers (MTP) and cache their KV")
	fs.StringVar(&o.W4A, "w4a", "", "fp8 or nvfp4: add GPT-QModel's W4A staged operands (GPTQ INT4 repos)")
	fs.StringVar(&o.KVDType, "kv-dtype", "", "KV cache dtype instead of the declared one (bf16, fp16, fp32, fp8, int8)")
	fs.StringVar(&o.Reserve, "reserve", "", "held back a GPU for activations: a fraction (0.1, the default), 10% or GB (6GB)")
	var gpus gpuFlags
	fs.Var(&gpus, "gpu", "a GPU to judge, repeatable: a catalog name (H100, H200, B200, L40S, RTX 4090, RTX 5090) or NAME:GB (decimal GB; NAME:80GiB for binary)")
	var sf sourceFlags
	sf.register(fs, true, true)
	pos, err := parseFlags(fs, args, 1, "SOURCE")
	if err != nil {
		return err
	}
	o.GPUs = gpus
	// Check reads 0 as the default: here a 0 is what the user typed.
	var typed error
	fs.Visit(func(f *flag.Flag) {
		if v, ok := map[string]int{"tp": o.TP, "batch": o.Batch, "context": o.Context}[f.Name]; ok && typed == nil {
			typed = fit.CheckCount(f.Name, v)
		}
	})
	if typed == nil {
		typed = o.Check() // before any download
	}
	if typed != nil {
		return &usageError{msg: "fit: " + typed.Error()}
	}
	c, err := loadCheckpoint(ctx, pos[0], sf)
	if err != nil {
		return err
	}
	defer c.Close()
	rep, err := fit.Estimate(fit.FromCheckpoint(c), o)
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	return printFit(stdout, rep)
}

// parseTokens1024 reads a token count: digits, or digits with k (×1024)
// as vLLM reads --max-model-len 128k.
func parseTokens1024(v string) (int, error) {
	v = strings.TrimSpace(strings.ToLower(v))
	mul := 1
	if d, ok := strings.CutSuffix(v, "k"); ok {
		v, mul = d, 1024
	}
	n, err := strconv.Atoi(v)
	if err != nil || n > 1<<40/mul {
		return 0, fmt.Errorf("not a token count")
	}
	return n * mul, nil
}

func printFit(w io.Writer, r *fit.Report) error {
	var b strings.Builder
	gb := fit.HumanGB
	if r.Commit != "" {
		fmt.Fprintf(&b, "%s (commit %s)\n", r.Source, hub.ShortCommit(r.Commit))
	} else {
		fmt.Fprintf(&b, "%s\n", r.Source)
	}
	fmt.Fprintf(&b, "  weights   %s loaded", gb(r.WeightsBytes))
	if r.StoredBytes != r.WeightsBytes {
		fmt.Fprintf(&b, " (%s stored)", gb(r.StoredBytes))
	}
	fmt.Fprintf(&b, "; %s a GPU at tp %d\n", gb(r.PerGPUWeightBytes), r.TP)
	if r.StagedBytes > 0 {
		fmt.Fprintf(&b, "  W4A       %s staged; %s a GPU at tp %d\n", gb(r.StagedBytes), gb(r.PerGPUStagedBytes), r.TP)
	}
	fmt.Fprintf(&b, "  KV cache  %s, %s, %d layers: %s a token", strings.ToUpper(r.Attention), r.KVDType, r.KVLayers, gb(r.KVBytesPerToken))
	if r.SlidingLayers > 0 {
		fmt.Fprintf(&b, " (%d layers capped at %d tokens)", r.SlidingLayers, r.Window)
	}
	fmt.Fprintf(&b, "; %d tokens × %d = %s; %s a GPU at tp %d\n", r.Context, r.Batch, gb(r.KVBytes), gb(r.PerGPUKVBytes), r.TP)
	need := r.GPUs[0].NeedBytes // the same for every GPU: what one of the TP group holds
	fmt.Fprintf(&b, "  need      %s a GPU at tp %d, context %d, batch %d\n", gb(need), r.TP, r.Context, r.Batch)
	if r.TPRefused != "" {
		fmt.Fprintf(&b, "  tp %d cannot run this model: %s (the GPUs column counts the degrees that can)\n", r.TP, r.TPRefused)
	}
	if r.ContextRefused != "" {
		fmt.Fprintf(&b, "  context %d cannot be served: %s (max context: the longest the memory holds, up to it)\n", r.Context, r.ContextRefused)
	}
	b.WriteString("\n")
	fmt.Fprintf(&b, "  %-10s %9s %10s %11s %10s %12s\n", "gpu", "memory", "usable", fmt.Sprintf("fits tp %d", r.TP), "GPUs", "max context")
	for _, v := range r.GPUs {
		fits, count := "no", "> 8"
		if v.Fits {
			fits = "yes"
		} else if r.TPRefused != "" {
			fits = "no (tp)"
		} else if r.ContextRefused != "" {
			fits = "no (context)"
		}
		if v.Count > 0 {
			count = fmt.Sprint(v.Count)
		} else if r.ContextRefused != "" {
			count = "—"
		}
		fmt.Fprintf(&b, "  %-10s %9s %10s %11s %10s %12d\n", v.Name, gb(v.MemoryBytes), gb(v.UsableBytes), fits, count, v.MaxContext)
	}
	fmt.Fprintf(&b, "\n  GPUs: the fewest of 1, 2, 4, 8 (as TP) that fit; max context: at tp %d, batch %d\n", r.TP, r.Batch)
	fmt.Fprintf(&b, "  assumptions:\n")
	for _, a := range r.Assumptions {
		fmt.Fprintf(&b, "  - %s\n", a)
	}
	_, err := io.WriteString(w, b.String())
	return err
}
