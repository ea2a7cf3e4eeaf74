package checkpoint

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/quantscope/quantscope/formats/hub"
	"github.com/quantscope/quantscope/formats/packing"
	"github.com/quantscope/quantscope/formats/safetensors"
	"github.com/quantscope/quantscope/formats/scheme"
	"github.com/quantscope/quantscope/synth"
)

// writeFiles writes shards under their own names, and files (config.json,
// the index) as given, into a fresh directory.
func writeFiles(t testing.TB, shards map[string][]safetensors.WriteTensor, files map[string][]byte) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "repo")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, ts := range shards {
		b, err := safetensors.Encode(ts, nil)
		if err != nil {
			t.Fatal(err)
		}
		files[name] = b
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func loadDir(t testing.TB, dir string, opt Options) *Checkpoint {
	t.Helper()
	c, err := Load(context.Background(), &hub.Dir{Root: dir}, opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// A tensor stored in three shards is counted once, as one role of its
// module, with one finding that names every copy and the one counted: the
// index's, else the first.
func TestDuplicateInThreeShards(t *testing.T) {
	const name = "model.layers.0.mlp.up_proj.weight"
	dup := safetensors.WriteTensor{Name: name, DType: safetensors.BF16, Shape: []uint64{4, 4}, Data: make([]byte, 32)}
	norm := func(n string) safetensors.WriteTensor {
		return safetensors.WriteTensor{Name: n, DType: safetensors.BF16, Shape: []uint64{2}, Data: make([]byte, 4)}
	}
	shards := map[string][]safetensors.WriteTensor{
		"a.safetensors": {dup, norm("model.a.weight")},
		"b.safetensors": {dup, norm("model.b.weight")},
		"c.safetensors": {dup, norm("model.c.weight")},
	}
	for _, tc := range []struct {
		what, indexed, keep string
	}{
		{"no index", "", "a.safetensors"},
		{"index names the first", "a.safetensors", "a.safetensors"},
		{"index names the second", "b.safetensors", "b.safetensors"},
		{"index names the third", "c.safetensors", "c.safetensors"},
	} {
		files := map[string][]byte{}
		if tc.indexed != "" {
			wm := map[string]string{name: tc.indexed, "model.a.weight": "a.safetensors", "model.b.weight": "b.safetensors", "model.c.weight": "c.safetensors"}
			files[indexFile], _ = json.Marshal(map[string]any{"weight_map": wm})
		}
		c := loadDir(t, writeFiles(t, shards, files), Options{})
		inv := c.Inventory()
		// One 32-byte, 16-parameter copy plus three 4-byte, 2-parameter norms.
		if s := inv.Summary; s.Tensors != 4 || s.Bytes != 32+12 || s.Parameters != 16+6 {
			t.Errorf("%s: %d tensors, %d bytes, %d parameters; want 4, 44, 22", tc.what, s.Tensors, s.Bytes, s.Parameters)
		}
		m, ok := c.Module("model.layers.0.mlp.up_proj")
		if roles := m.Tensors(); !ok || len(roles) != 1 || roles["weight"] != name || m.Parameters != 16 {
			t.Errorf("%s: module %v roles %v", tc.what, ok, roles)
		}
		for _, te := range inv.Tensors {
			if te.Name == name && te.File != tc.keep {
				t.Errorf("%s: counted the copy in %s, want %s", tc.what, te.File, tc.keep)
			}
		}
		var dups []string
		for _, f := range c.Findings {
			if f.Rule == "duplicate-tensor" {
				dups = append(dups, f.Message)
			}
		}
		want := "tensor is stored in a.safetensors, b.safetensors and c.safetensors; the copy in " + tc.keep + " is counted"
		if len(dups) != 1 || dups[0] != want {
			t.Errorf("%s: duplicate findings %q, want one %q", tc.what, dups, want)
		}
	}
}

// A compressed-tensors module whose weight_shape lies in another shard than
// its packed weight has the shape read, not inferred.
func TestSplitModuleReadsShape(t *testing.T) {
	ts := synth.CTPack("model.layers.0.mlp.down_proj", matrix(2, 12), 4, 128, true, packing.CTBitstream)
	norm := synth.Dense("model.norm.weight", synth.Matrix{Shape: []uint64{4}, Data: []float32{1, 2, 3, 4}})
	var shape []safetensors.WriteTensor
	ts = slices.DeleteFunc(ts, func(x safetensors.WriteTensor) bool {
		if strings.HasSuffix(x.Name, ".weight_shape") {
			shape = append(shape, x)
			return true
		}
		return false
	})
	config := synth.CTW4A16().Files["config.json"]
	dir := writeFiles(t, map[string][]safetensors.WriteTensor{
		"model-00001-of-00002.safetensors": ts,
		"model-00002-of-00002.safetensors": append(shape, norm...),
	}, map[string][]byte{"config.json": config})
	c := loadDir(t, dir, Options{ReadShapeTensors: true})
	m, ok := c.Module("model.layers.0.mlp.down_proj")
	if !ok || len(m.Tensors()) != 3 {
		t.Fatalf("module %+v", m)
	}
	if !slices.Equal(m.WeightShape, []uint64{2, 12}) || m.Parameters != 24 || m.ShapeInferred {
		t.Errorf("weight_shape %v, %d parameters, inferred %v; want [2 12], 24, read", m.WeightShape, m.Parameters, m.ShapeInferred)
	}
	if hasRule(c.Findings, "CT-004") {
		t.Errorf("findings %+v", c.Findings)
	}
}

// splitRepos writes n modules of two tensors each, all in one shard, and
// split across two (the weights in one, their scales in the other).
func splitRepos(tb testing.TB, n int) (one, split string) {
	var weights, scales []safetensors.WriteTensor
	for i := range n {
		mod := fmt.Sprintf("model.layers.%d.mlp.experts.%d.up_proj", i/256, i%256)
		weights = append(weights, safetensors.WriteTensor{Name: mod + ".weight", DType: safetensors.U8, Shape: []uint64{0}})
		scales = append(scales, safetensors.WriteTensor{Name: mod + ".weight_scale", DType: safetensors.F8_E4M3, Shape: []uint64{0}})
	}
	one = writeFiles(tb, map[string][]safetensors.WriteTensor{"model.safetensors": append(slices.Clone(weights), scales...)}, map[string][]byte{})
	split = writeFiles(tb, map[string][]safetensors.WriteTensor{"a.safetensors": weights, "b.safetensors": scales}, map[string][]byte{})
	return one, split
}

// Modules split across shards are merged whole: every module holds its
// weight and its scale, and every tensor records its module and role.
// (The merge once compared every split tensor with every other: seconds at
// 20,000 modules; BenchmarkSplitModules times it against one shard.)
func TestSplitModulesMerged(t *testing.T) {
	const n = 2_000
	_, split := splitRepos(t, n)
	c := loadDir(t, split, Options{})
	if len(c.Modules) != n {
		t.Fatalf("%d modules, want %d", len(c.Modules), n)
	}
	for _, m := range c.Modules {
		if r := m.Tensors(); len(r) != 2 || r["weight"] != m.Name+".weight" || r["weight_scale"] != m.Name+".weight_scale" {
			t.Fatalf("module %s roles %v", m.Name, r)
		}
	}
	for _, x := range c.tensors {
		if mod, role, _ := strings.Cut(x.Name, ".up_proj."); x.Module != mod+".up_proj" || x.Role != role {
			t.Fatalf("tensor %s recorded in %s as %s", x.Name, x.Module, x.Role)
		}
	}
}

// BenchmarkSplitModules loads 20,000 modules split across two shards and,
// as the reference in the same run, the same tensors in one shard: the
// ratio stays near 1 when the merge is linear (it was about 170× when it
// was quadratic).
func BenchmarkSplitModules(b *testing.B) {
	one, split := splitRepos(b, 20_000)
	var tOne, tSplit time.Duration
	for b.Loop() {
		t0 := time.Now()
		loadDir(b, one, Options{})
		t1 := time.Now()
		loadDir(b, split, Options{})
		tOne += t1.Sub(t0)
		tSplit += time.Since(t1)
	}
	b.ReportMetric(float64(tSplit)/float64(tOne), "split/one-shard")
}

// hasRule says whether a finding of a rule is among fs.
func hasRule(fs []scheme.Finding, rule string) bool {
	return slices.ContainsFunc(fs, func(f scheme.Finding) bool { return f.Rule == rule })
}
