package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/quantscope/quantscope/companion/ops"
	"github.com/quantscope/quantscope/kernels"
	"github.com/quantscope/quantscope/kernels/cpu"
)

func cmdQuantize(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("quantize", flag.ContinueOnError)
	var p ops.QuantizeParams
	fs.StringVar(&p.Format, "format", "", "nvfp4, fp8_e4m3 or fp8_e5m2")
	fs.StringVar(&p.Recipe, "recipe", "", "NVFP4 block scales: max, mse, four_six, least_squares or local_hessian (default max)")
	fs.StringVar(&p.Scale, "scale", "", "FP8 scales: tensor, row or block (default row)")
	fs.StringVar(&p.Block, "block", "", "FP8 block R,C (both must divide the weight; default 128,128)")
	fs.StringVar(&p.Naming, "naming", "", "modelopt, compressed-tensors or gptqmodel")
	fs.StringVar(&p.Data, "data", "", "local_hessian: little-endian float32 file of [tokens, in] activations")
	out := fs.String("out", "", "the .safetensors file to write")
	var sf sourceFlags
	sf.register(fs, true, true)
	only := indexShardsFlag(fs)
	pos, err := parseFlags(fs, args, 2, "SOURCE MODULE")
	if err != nil {
		return err
	}
	if *out == "" {
		return &usageError{msg: "quantize: --out FILE is required"}
	}
	if err := checkOut(*out); err != nil { // before reading or computing anything
		return err
	}
	if p.Data != "" && p.Recipe != kernels.RecipeLocalHessian {
		r := p.Recipe
		if r == "" {
			r = "max, the default,"
		}
		return &usageError{msg: fmt.Sprintf("quantize: --data is the activations of --recipe local_hessian; recipe %s reads none", r)}
	}
	if p.Recipe == kernels.RecipeLocalHessian && p.Data == "" {
		return fmt.Errorf("quantize: rule local-hessian-data: recipe local_hessian needs --data FILE, a little-endian float32 file of [tokens, in] calibration activations")
	}
	p.Out = filepath.Base(*out)
	params, _ := json.Marshal(p)
	c, err := loadStreaming(ctx, pos[0], sf, only.modules(pos[1])...)
	if err != nil {
		return err
	}
	defer c.Close()
	op, _ := ops.Lookup("quantize")
	bar := newProgressBar(stderr, "quantize "+pos[1])
	res, err := op(ctx, ops.Env{Checkpoint: c, Backend: cpu.New(), Progress: bar.Report}, pos[1], params)
	bar.Done()
	if err != nil {
		return err
	}
	if err := writeOut(*out, func(f *os.File) error {
		_, err := f.Write(res.Files[0].Data)
		return err
	}); err != nil {
		return err
	}
	j := res.JSON.(map[string]any)
	_, err = fmt.Fprintf(stdout, "wrote %s: %s %v (%s, %s naming), %d bytes: %s\n", *out, j["format"], j["shape"], j["recipe"], j["naming"],
		j["bytes"], strings.Join(j["tensors"].([]string), ", "))
	return err
}
