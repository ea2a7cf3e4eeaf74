package checkpoint

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/quantscope/quantscope/formats/hub"
	"github.com/quantscope/quantscope/formats/safetensors"
	"github.com/quantscope/quantscope/formats/scheme"
	"github.com/quantscope/quantscope/synth"
)

func load(t *testing.T, r *synth.Repo) *Checkpoint {
	t.Helper()
	dir := filepath.Join(t.TempDir(), filepath.FromSlash(r.ID))
	if err := r.WriteDir(dir); err != nil {
		t.Fatal(err)
	}
	c, err := Load(context.Background(), &hub.Dir{Root: dir}, Options{ReadShapeTensors: true})
	if err != nil {
		t.Fatalf("%s: %v", r.ID, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// Each format's error bound: the largest normalised RMS error of
// dequantize(quantize(w)) that its step size allows, with margin.
var nrmseBound = map[string]float64{
	"nvfp4": 0.16, "mxfp4": 0.25, "fp8": 0.05, "int4": 0.26, "int3": 0.36, "int8": 0.02, "bf16": 0.005,
}

func TestRoundTripEveryFormat(t *testing.T) {
	folds := 0
	for _, r := range synth.All() {
		t.Run(strings.TrimPrefix(r.ID, synth.Org+"/"), func(t *testing.T) {
			c := load(t, r)
			for name, w := range r.Weights {
				m, ok := c.Module(name)
				if !ok {
					t.Fatalf("module %s not found", name)
				}
				if m.Format != r.Formats[name] {
					t.Fatalf("%s: format %s, generator wrote %s", name, m.Format, r.Formats[name])
				}
				if !equalShape(m.WeightShape, w.Shape) {
					t.Fatalf("%s: logical shape %v, want %v", name, m.WeightShape, w.Shape)
				}
				rows, _ := m.Matrix2D()
				got, err := scheme.Dequantize(m, c, 0, int(rows))
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				if len(got) != len(w.Data) {
					t.Fatalf("%s: %d values, want %d", name, len(got), len(w.Data))
				}
				// The generator's weight is the one the raw input meets: an
				// AWQ layer's stored values times its pre_quant_scale.
				stored := got
				if pqs := plainPreQuantScale(t, c, name); pqs != nil {
					got = slices.Clone(stored)
					folded := slices.Clone(stored)
					for i := range folded {
						folded[i] *= pqs[i%len(pqs)]
					}
					if err := scheme.FoldPreQuantScale(m, c, got); err != nil {
						t.Fatalf("%s: %v", name, err)
					}
					if !slices.Equal(got, folded) {
						t.Fatalf("%s: FoldPreQuantScale differs from stored · pre_quant_scale", name)
					}
					folds++
				}
				var se, ss float64
				for i := range got {
					d := float64(got[i] - w.Data[i])
					se += d * d
					ss += float64(w.Data[i]) * float64(w.Data[i])
				}
				nrmse := math.Sqrt(se / ss)
				if b := nrmseBound[m.Format]; nrmse > b {
					t.Errorf("%s (%s/%s): normalised RMS error %.4f over the bound %.3f", name, m.Format, m.Layout, nrmse, b)
				}
				// A row slice decodes the same values as the whole.
				if rows > 2 {
					part, err := scheme.Dequantize(m, c, 1, 3)
					if err != nil {
						t.Fatal(err)
					}
					_, cols := m.Matrix2D()
					for i := range part {
						if part[i] != stored[int(cols)+i] {
							t.Fatalf("%s: rows 1:3 differ from the whole at %d", name, i)
						}
					}
				}
			}
		})
	}
	if folds == 0 {
		t.Error("no generated module has a pre_quant_scale: the fold goes untested")
	}
}

// plainPreQuantScale reads module name's pre_quant_scale, BF16 as the
// generator writes it, or nil when the file has none.
func plainPreQuantScale(t *testing.T, c *Checkpoint, name string) []float32 {
	t.Helper()
	loc, ok := c.lookup(name + ".pre_quant_scale")
	if !ok {
		return nil
	}
	if loc.t.DType != safetensors.BF16 {
		t.Fatalf("%s.pre_quant_scale is %s: this test reads BF16", name, loc.t.DType)
	}
	b, err := c.ReadTensor(name+".pre_quant_scale", 0, int64(loc.t.NBytes()))
	if err != nil {
		t.Fatal(err)
	}
	s := make([]float32, len(b)/2)
	for i := range s {
		s[i] = math.Float32frombits(uint32(b[2*i])<<16 | uint32(b[2*i+1])<<24)
	}
	return s
}

func equalShape(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestKeepGoingAndProgress(t *testing.T) {
	r := synth.DeepSeekFP8()
	dir := filepath.Join(t.TempDir(), "repo")
	if err := r.WriteDir(dir); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "model-00002-of-00002.safetensors")
	os.WriteFile(p, []byte("garbage"), 0o644)
	if _, err := Load(context.Background(), &hub.Dir{Root: dir}, Options{}); err == nil {
		t.Fatal("a broken shard must fail a plain Load")
	}
	var events []Progress
	c, err := Load(context.Background(), &hub.Dir{Root: dir}, Options{KeepGoing: true, Progress: func(p Progress) { events = append(events, p) }})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if len(c.Shards) != 1 || len(events) != 2 || events[1].ShardsDone != 2 || events[1].Shards != 2 {
		t.Fatalf("shards %d, events %+v", len(c.Shards), events)
	}
	found := false
	for _, f := range c.Findings {
		if f.Rule == RuleShardUnreadable && strings.Contains(f.Message, "model-00002-of-00002.safetensors") {
			found = true
		}
	}
	if !found || c.Inventory().Summary.Tensors == 0 {
		t.Fatalf("findings %+v", c.Findings)
	}
}
