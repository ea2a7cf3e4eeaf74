package checkpoint

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/quantscope/quantscope/formats/hub"
	"github.com/quantscope/quantscope/synth"
)

// The bench repo shaped like nvidia/DeepSeek-R1-FP4 reads as the real one
// measures (seed 004: 180,364 tensors, 423,605,060,024 bytes, 684,489,845,504
// parameters, 44,727 quantized linears, 4.95 bits a weight), its 245
// exclude_modules name exactly the BF16 modules, and nothing is flagged.
func TestDeepSeekR1FP4Shape(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "DeepSeek-R1-FP4-shape")
	if _, _, err := synth.WriteDeepSeekR1FP4Shape(dir, 80); err != nil {
		t.Fatal(err)
	}
	c, err := Load(context.Background(), &hub.Dir{Root: dir}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	inv := c.InventoryWithoutTensors()
	s := inv.Summary
	if s.Files != 80 || s.Tensors != 180364 || s.Bytes != 423605060024 || s.Parameters != 684489845504 ||
		s.Modules != 46183 || s.QuantizedModules != 44727 || fmt.Sprintf("%.2f", s.BitsPerWeight) != "4.95" {
		t.Fatalf("summary %+v", s)
	}
	if s.Errors != 0 || s.Warnings != 0 || len(inv.Findings) != 0 {
		t.Fatalf("findings on a consistent repo: %+v", inv.Findings)
	}
	if len(c.Scheme.ExcludeModules) != 245 {
		t.Fatalf("%d exclude_modules", len(c.Scheme.ExcludeModules))
	}
	for _, m := range c.Modules {
		ex := c.Scheme.ExcludedBy(m.Name)
		var layer int
		inLayer, _ := fmt.Sscanf(m.Name, "model.layers.%d.", &layer)
		switch {
		case m.Quantized:
			if ex != "" || m.Format != "nvfp4" {
				t.Fatalf("%s: stored %s, excluded by %q", m.Name, m.Format, ex)
			}
		case inLayer == 1 && layer == 61:
			if ex != "model.layers.61*" {
				t.Fatalf("%s: excluded by %q", m.Name, ex)
			}
		case strings.Contains(m.Name, ".self_attn."):
			if want := fmt.Sprintf("model.layers.%d.self_attn*", layer); ex != want || m.Format != "bf16" {
				t.Fatalf("%s: %s, excluded by %q, want %q", m.Name, m.Format, ex, want)
			}
		case strings.HasSuffix(m.Name, ".mlp.gate.e_score_correction_bias"):
			// the router's F32 bias, a vector: no list speaks of it, and
			// nothing needs to (it is no linear)
			if ex != "" || len(m.WeightShape) != 1 || m.Kind != "router" {
				t.Fatalf("%s %v (%s): excluded by %q", m.Name, m.WeightShape, m.Kind, ex)
			}
		case m.Kind == "router" || m.Kind == "norm" || m.Kind == "embedding" || m.Name == "lm_head":
			if ex != m.Name && !(m.Kind == "norm" && strings.Contains(m.Name, "self_attn")) {
				t.Fatalf("%s (%s): excluded by %q", m.Name, m.Kind, ex)
			}
		default:
			t.Fatalf("%s (%s, %s) is neither quantized nor named by the list", m.Name, m.Kind, m.Format)
		}
	}
}
