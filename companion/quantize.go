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
	"sync"
	"time"

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
	pos, err := parseFlags(fs, args, 2, "SOURCE MODULE")
	if err != nil {
		return err
	}
	if *out == "" {
		return &usageError{"quantize: --out FILE is required"}
	}
	if p.Recipe == kernels.RecipeLocalHessian && p.Data == "" {
		return fmt.Errorf("quantize: rule local-hessian-data: recipe local_hessian needs --data FILE, a little-endian float32 file of [tokens, in] calibration activations")
	}
	p.Out = filepath.Base(*out)
	params, _ := json.Marshal(p)
	c, err := loadCheckpoint(ctx, pos[0], sf)
	if err != nil {
		return err
	}
	defer c.Close()
	op, _ := ops.Lookup("quantize")
	bar := newQuantBar(stderr, "quantize "+pos[1])
	res, err := op(ctx, ops.Env{Checkpoint: c, Backend: cpu.New(), Progress: bar.update}, pos[1], params)
	bar.finish()
	if err != nil {
		return err
	}
	tmp := *out + ".partial"
	if err := os.WriteFile(tmp, res.Files[0].Data, 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp, *out); err != nil {
		os.Remove(tmp)
		return err
	}
	j := res.JSON.(map[string]any)
	_, err = fmt.Fprintf(stdout, "wrote %s: %s %v (%s, %s naming), %d bytes: %s\n", *out, j["format"], j["shape"], j["recipe"], j["naming"],
		j["bytes"], strings.Join(j["tensors"].([]string), ", "))
	return err
}

// quantBar is a progress bar on stderr, drawn only when stderr is a
// terminal, at most every 100 ms; kernels call update from several goroutines.
type quantBar struct {
	mu    sync.Mutex
	w     io.Writer
	label string
	last  time.Time
	drawn bool
}

func newQuantBar(w io.Writer, label string) *quantBar {
	f, ok := w.(*os.File)
	if !ok {
		return &quantBar{}
	}
	if st, err := f.Stat(); err != nil || st.Mode()&os.ModeCharDevice == 0 {
		return &quantBar{}
	}
	return &quantBar{w: w, label: label}
}

func (b *quantBar) update(done, total int64) {
	if b.w == nil || total <= 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if now := time.Now(); now.Sub(b.last) >= 100*time.Millisecond || done == total {
		b.last = now
		const width = 30
		n := int(width * done / total)
		fmt.Fprintf(b.w, "\r%s [%s%s] %3d%%", b.label, strings.Repeat("=", n), strings.Repeat(" ", width-n), 100*done/total)
		b.drawn = true
	}
}

func (b *quantBar) finish() {
	if b.w != nil && b.drawn {
		fmt.Fprintln(b.w)
	}
}
