package checkpoint

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/quantscope/quantscope/formats/hub"
	"github.com/quantscope/quantscope/formats/safetensors"
	"github.com/quantscope/quantscope/formats/scheme"
	"github.com/quantscope/quantscope/synth"
)

func writeShards(t *testing.T, dir string, shards [][]safetensors.WriteTensor, index map[string]string) {
	t.Helper()
	os.MkdirAll(dir, 0o755)
	for i, ts := range shards {
		b, err := safetensors.Encode(ts, nil)
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(dir, shardName(i)), b, 0o644)
	}
	if index != nil {
		b, _ := json.Marshal(map[string]any{"weight_map": index})
		os.WriteFile(filepath.Join(dir, indexFile), b, 0o644)
	}
	os.WriteFile(filepath.Join(dir, "hf_quant_config.json"), []byte(`{"quantization":{"quant_algo":"NVFP4"}}`), 0o644)
}

func shardName(i int) string {
	return []string{"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"}[i]
}

func matrix(rows, cols int) synth.Matrix {
	r := rand.New(rand.NewPCG(4, 4))
	d := make([]float32, rows*cols)
	for i := range d {
		d[i] = float32(r.NormFloat64())
	}
	return synth.Matrix{Shape: []uint64{uint64(rows), uint64(cols)}, Data: d}
}

// A module whose tensors are split across shards is one module, checked as a whole.
func TestModuleSplitAcrossShards(t *testing.T) {
	ts := synth.NVFP4ModelOpt("model.layers.0.mlp.down_proj", matrix(8, 64), 1, safetensors.F32)
	other := synth.Dense("model.norm.weight", synth.Matrix{Shape: []uint64{4}, Data: []float32{1, 2, 3, 4}})
	dir := filepath.Join(t.TempDir(), "split")
	index := map[string]string{}
	for _, x := range ts[:2] {
		index[x.Name] = shardName(0)
	}
	for _, x := range append(ts[2:], other...) {
		index[x.Name] = shardName(1)
	}
	writeShards(t, dir, [][]safetensors.WriteTensor{ts[:2], append(ts[2:], other...)}, index)
	c, err := Load(context.Background(), &hub.Dir{Root: dir}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	m, ok := c.Module("model.layers.0.mlp.down_proj")
	if !ok || m.Format != scheme.FormatNVFP4 || len(m.Tensors()) != 4 || len(c.Modules) != 2 {
		t.Fatalf("modules %d, merged %+v", len(c.Modules), m)
	}
	for _, f := range c.Findings {
		if f.Severity != scheme.SeverityInfo {
			t.Errorf("finding on a merged module: %+v", f)
		}
	}
	if _, err := scheme.Dequantize(m, c, 0, 8); err != nil {
		t.Fatal(err)
	}
	if mm, ok := c.Module("model.layers.0.mlp.down_proj.weight_scale_2"); !ok || mm != m {
		t.Error("a tensor name finds its module")
	}
}

// A tensor stored in two shards is counted once: the index's copy, else the first.
func TestDuplicateAcrossShards(t *testing.T) {
	a := synth.Dense("model.embed_tokens.weight", synth.Matrix{Shape: []uint64{2}, Data: []float32{1, 2}})
	b := synth.Dense("model.embed_tokens.weight", synth.Matrix{Shape: []uint64{2}, Data: []float32{3, 4}})
	n := synth.Dense("model.norm.weight", synth.Matrix{Shape: []uint64{2}, Data: []float32{5, 6}})
	x := synth.Dense("model.extra.weight", synth.Matrix{Shape: []uint64{2}, Data: []float32{7, 8}})
	for _, c := range []struct {
		name  string
		index map[string]string
		keep  string
	}{
		{"no index", nil, shardName(0)},
		{"index names the second", map[string]string{"model.embed_tokens.weight": shardName(1), "model.norm.weight": shardName(1), "model.extra.weight": shardName(0)}, shardName(1)},
	} {
		dir := filepath.Join(t.TempDir(), "dup")
		writeShards(t, dir, [][]safetensors.WriteTensor{append(a, x...), append(b, n...)}, c.index)
		ck, err := Load(context.Background(), &hub.Dir{Root: dir}, Options{})
		if err != nil {
			t.Fatal(err)
		}
		inv := ck.Inventory()
		if inv.Summary.Tensors != 3 || inv.Summary.Parameters != 6 {
			t.Errorf("%s: %d tensors, %d parameters", c.name, inv.Summary.Tensors, inv.Summary.Parameters)
		}
		found := false
		for _, f := range ck.Findings {
			if f.Rule == "duplicate-tensor" && strings.Contains(f.Message, "the copy in "+c.keep) {
				found = true
			}
		}
		for _, te := range inv.Tensors {
			if te.Name == "model.embed_tokens.weight" && te.File != c.keep {
				t.Errorf("%s: kept the copy in %s", c.name, te.File)
			}
		}
		if !found {
			t.Errorf("%s: findings %+v", c.name, ck.Findings)
		}
		ck.Close()
	}
}

// A shard the index does not name is not read, and is reported.
func TestUnlistedShard(t *testing.T) {
	a := synth.Dense("a.weight", synth.Matrix{Shape: []uint64{2}, Data: []float32{1, 2}})
	b := synth.Dense("b.weight", synth.Matrix{Shape: []uint64{2}, Data: []float32{3, 4}})
	dir := filepath.Join(t.TempDir(), "unlisted")
	writeShards(t, dir, [][]safetensors.WriteTensor{a, b}, map[string]string{"b.weight": shardName(1)})
	c, err := Load(context.Background(), &hub.Dir{Root: dir}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	found := false
	for _, f := range c.Findings {
		found = found || (f.Rule == RuleIndexUnlistedShard && strings.Contains(f.Message, shardName(0)))
	}
	if !found || c.Inventory().Summary.Tensors != 1 {
		t.Fatalf("findings %+v", c.Findings)
	}
}
