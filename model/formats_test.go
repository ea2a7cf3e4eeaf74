package model

import (
	"context"
	"math"
	"strings"
	"testing"

	"github.com/quantscope/quantscope/formats/checkpoint"
	"github.com/quantscope/quantscope/formats/hub"
	"github.com/quantscope/quantscope/formats/scheme"
	"github.com/quantscope/quantscope/kernels/cpu"
	"github.com/quantscope/quantscope/synth"
)

// TestForwardOverEveryFormat runs the forward on each generated Llama-shaped
// demo repo (ModelOpt and compressed-tensors NVFP4, FP8, pack-quantized
// INT4/INT3, GPTQ, AWQ, the mislabeled mix) against the plain float64
// forward of the weights as formats/ dequantizes them.
func TestForwardOverEveryFormat(t *testing.T) {
	seen, folded := 0, 0
	for _, repo := range synth.All() {
		if !strings.Contains(string(repo.Files["config.json"]), `"LlamaForCausalLM"`) {
			continue
		}
		seen++
		t.Run(repo.ID, func(t *testing.T) {
			dir := t.TempDir()
			if err := repo.WriteDir(dir); err != nil {
				t.Fatal(err)
			}
			src, err := hub.OpenLocal(dir)
			if err != nil {
				t.Fatal(err)
			}
			c, err := checkpoint.Load(context.Background(), src, checkpoint.Options{ReadShapeTensors: true})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			m, err := New(c, cpu.New())
			if err != nil {
				t.Fatal(err)
			}
			cfg := m.Config
			s := synth.LlamaSpec{Layers: cfg.Layers, Hidden: cfg.Hidden, Inter: cfg.Inter, Heads: cfg.Heads, KVHeads: cfg.KVHeads, Vocab: cfg.Vocab, RopeTheta: cfg.RopeTheta, Tied: cfg.Tied}
			w := map[string]synth.Matrix{}
			formats := map[string]bool{}
			for name := range repo.Weights {
				mod, ok := c.Module(name)
				if !ok {
					t.Fatalf("no module %s", name)
				}
				rows, cols := mod.Matrix2D()
				v, err := scheme.Dequantize(mod, c, 0, int(rows))
				if err != nil {
					t.Fatal(err)
				}
				// The layer multiplies its input by an AWQ pre_quant_scale:
				// the plain forward meets stored · s, column by column.
				if b, err := c.ReadTensor(name+".pre_quant_scale", 0, 2*int64(cols)); err == nil {
					for i := range v {
						col := i % int(cols)
						v[i] *= math.Float32frombits(uint32(b[2*col])<<16 | uint32(b[2*col+1])<<24) // BF16, as synth writes it
					}
					folded++
				}
				w[name] = synth.Matrix{Shape: []uint64{rows, cols}, Data: v}
				formats[mod.Format] = true
			}
			tokens := []int{3, 200, 17, 255, 0, 9}
			got, err := m.Forward(context.Background(), tokens, Options{})
			if err != nil {
				t.Fatal(err)
			}
			if e := relRMS(got, refForward(s, w, refDense(w), tokens)); e > denseTol {
				t.Fatalf("formats %v: relative RMS error %g against the plain forward", formats, e)
			}
		})
	}
	if folded == 0 {
		t.Error("no generated module has a pre_quant_scale: the forward's fold goes untested")
	}
	if seen < 6 {
		t.Fatalf("only %d Llama-shaped demo repos", seen)
	}
}
