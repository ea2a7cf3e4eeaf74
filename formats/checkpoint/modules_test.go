package checkpoint

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/quantscope/quantscope/formats/hub"
	"github.com/quantscope/quantscope/formats/safetensors"
	"github.com/quantscope/quantscope/formats/scheme"
)

// Options.Modules reads only the shards the index names for the modules'
// tensors: one shard for a module stored whole, both for one split across
// two, the module the same as a full load's. A name no index entry is of
// reads every shard (its nearest modules are then all at hand), and so
// does a repo without an index. The repo-wide rules, which need every
// shard, are not run on a partial load.
func TestLoadModulesReadsTheirShardsOnly(t *testing.T) {
	bf16 := func(name string, n int) safetensors.WriteTensor {
		return safetensors.WriteTensor{Name: name, DType: safetensors.BF16, Shape: []uint64{uint64(n)}, Data: make([]byte, 2*n)}
	}
	mat := func(name string) safetensors.WriteTensor {
		return safetensors.WriteTensor{Name: name, DType: safetensors.BF16, Shape: []uint64{4, 8}, Data: make([]byte, 64)}
	}
	shards := map[string][]safetensors.WriteTensor{
		"model-00001-of-00003.safetensors": {mat("model.layers.0.mlp.down_proj.weight"), mat("model.layers.1.mlp.down_proj.weight")},
		"model-00002-of-00003.safetensors": {bf16("model.layers.1.mlp.down_proj.bias", 4), mat("model.layers.2.mlp.down_proj.weight")},
		"model-00003-of-00003.safetensors": {mat("model.layers.3.mlp.down_proj.weight"), bf16("model.norm.weight", 8),
			{Name: "model.layers.4.mlp.experts.gate_up_proj_blocks", DType: safetensors.U8, Shape: []uint64{2, 4, 1, 16}, Data: make([]byte, 128)}},
		"model-00004-of-00004.safetensors": {{Name: "model.layers.4.mlp.experts.gate_up_proj_scales", DType: safetensors.U8, Shape: []uint64{2, 4, 1}, Data: make([]byte, 8)},
			bf16("model.layers.4.mlp.experts.gate_up_proj_bias", 8)},
	}
	weightMap := map[string]string{}
	for file, ts := range shards {
		for _, t := range ts {
			weightMap[t.Name] = file
		}
	}
	index, _ := json.Marshal(map[string]any{"metadata": map[string]any{"total_size": 1}, "weight_map": weightMap}) // a wrong total: a repo-wide finding
	dir := writeFiles(t, shards, map[string][]byte{indexFile: index})
	load := func(modules ...string) *Checkpoint {
		t.Helper()
		c, err := Load(context.Background(), &hub.Dir{Root: dir}, Options{Modules: modules})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	read := func(c *Checkpoint) []string {
		var out []string
		for _, sh := range c.Shards {
			out = append(out, sh.Path)
		}
		return out
	}
	hasRepoFinding := func(c *Checkpoint) bool {
		return slices.ContainsFunc(c.Findings, func(f scheme.Finding) bool { return f.Rule == "index-total-size" })
	}
	full := load()
	if full.Partial() || len(full.Shards) != 4 || !hasRepoFinding(full) {
		t.Fatalf("full load: partial %v, shards %v, the wrong total_size found: %v", full.Partial(), read(full), hasRepoFinding(full))
	}
	for _, c := range []struct {
		names  []string
		module string
		shards []string
	}{
		{[]string{"model.layers.0.mlp.down_proj"}, "model.layers.0.mlp.down_proj", []string{"model-00001-of-00003.safetensors"}},
		{[]string{"model.layers.3.mlp.down_proj.weight"}, "model.layers.3.mlp.down_proj", []string{"model-00003-of-00003.safetensors"}},
		{[]string{"model.layers.1.mlp.down_proj"}, "model.layers.1.mlp.down_proj", []string{"model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors"}},
		// gpt-oss: blocks in one shard, scales and the bias in another; the
		// bias's own name reads both
		{[]string{"model.layers.4.mlp.experts.gate_up_proj_bias"}, "model.layers.4.mlp.experts.gate_up_proj", []string{"model-00003-of-00003.safetensors", "model-00004-of-00004.safetensors"}},
		{[]string{"model.layers.4.mlp.experts.gate_up_proj"}, "model.layers.4.mlp.experts.gate_up_proj", []string{"model-00003-of-00003.safetensors", "model-00004-of-00004.safetensors"}},
	} {
		p := load(c.names...)
		if got := read(p); !p.Partial() || !slices.Equal(got, c.shards) {
			t.Errorf("%v: shards %v (partial %v), want %v", c.names, got, p.Partial(), c.shards)
			continue
		}
		if hasRepoFinding(p) {
			t.Errorf("%v: a partial load ran the repo-wide rules", c.names)
		}
		got, ok := p.Module(c.module)
		want, _ := full.Module(c.module)
		if !ok || got.Bytes != want.Bytes || got.Parameters != want.Parameters || got.Format != want.Format || len(got.Tensors()) != len(want.Tensors()) {
			t.Errorf("%v: module %+v, a full load's %+v", c.names, got, want)
		}
	}
	if p := load("model.layers.9.mlp.down_proj"); p.Partial() || len(p.Shards) != 4 {
		t.Errorf("a name of no entry: shards %v, partial %v; want all four", read(p), p.Partial())
	}
	noIndex := writeFiles(t, shards, map[string][]byte{})
	c, err := Load(context.Background(), &hub.Dir{Root: noIndex}, Options{Modules: []string{"model.layers.0.mlp.down_proj"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.Partial() || len(c.Shards) != 4 {
		t.Errorf("without an index: shards %v, partial %v; want all four", read(c), c.Partial())
	}
}

// A partial load whose index misplaces a tensor of the module (weight_map
// names shard 1 for a scale shard 2 holds) reads the repo whole rather than
// hand back the module without its scale; and a partial load's one shard
// does not lend the repo its quantscope.* metadata, as a lone file does.
func TestLoadModulesDistrustsAMisplacingIndex(t *testing.T) {
	shards := map[string][]safetensors.WriteTensor{
		"model-00001-of-00002.safetensors": {{Name: "x.weight", DType: safetensors.F8_E4M3, Shape: []uint64{4, 8}, Data: make([]byte, 32)}},
		"model-00002-of-00002.safetensors": {{Name: "x.weight_scale", DType: safetensors.F32, Shape: []uint64{}, Data: make([]byte, 4)},
			{Name: "y.weight", DType: safetensors.BF16, Shape: []uint64{4}, Data: make([]byte, 8)}},
	}
	wm := map[string]string{"x.weight": "model-00001-of-00002.safetensors", "x.weight_scale": "model-00001-of-00002.safetensors", "y.weight": "model-00002-of-00002.safetensors"}
	idx, _ := json.Marshal(map[string]any{"metadata": map[string]any{}, "weight_map": wm})
	dir := writeFiles(t, shards, map[string][]byte{indexFile: idx})
	c, err := Load(context.Background(), &hub.Dir{Root: dir}, Options{Modules: []string{"x"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	m, ok := c.Module("x")
	if !ok || c.Partial() || len(m.Tensors()) != 2 {
		t.Fatalf("module x: %v (partial %v), want weight and weight_scale from a whole read", m.Tensors(), c.Partial())
	}

	md := map[string]string{scheme.MetaFormat: "bogus"} // a lone file with it is refused
	wm = map[string]string{}
	meta := map[string][]byte{}
	for s, file := range []string{"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"} {
		name := []string{"a.weight", "b.weight"}[s]
		b, err := safetensors.Encode([]safetensors.WriteTensor{{Name: name, DType: safetensors.BF16, Shape: []uint64{4}, Data: make([]byte, 8)}}, md)
		if err != nil {
			t.Fatal(err)
		}
		meta[file] = b
		wm[name] = file
	}
	meta[indexFile], _ = json.Marshal(map[string]any{"weight_map": wm})
	dir = writeFiles(t, nil, meta)
	p, err := Load(context.Background(), &hub.Dir{Root: dir}, Options{Modules: []string{"a"}})
	if err != nil {
		t.Fatalf("a partial load took its one shard's metadata for the repo's: %v", err)
	}
	defer p.Close()
	if !p.Partial() || len(p.Shards) != 1 {
		t.Fatalf("shards %d, partial %v; want one", len(p.Shards), p.Partial())
	}
}

// A broken index's error names the repo it is in, as a shard's does.
func TestIndexErrorNamesTheRepo(t *testing.T) {
	shards := map[string][]safetensors.WriteTensor{"model-00001-of-00001.safetensors": {{Name: "a.weight", DType: safetensors.BF16, Shape: []uint64{4}, Data: make([]byte, 8)}}}
	dir := writeFiles(t, shards, map[string][]byte{indexFile: []byte(`{"weight_map":{"a.weight":`)})
	_, err := Load(context.Background(), &hub.Dir{Root: dir}, Options{})
	if err == nil || !strings.HasPrefix(err.Error(), dir+": "+indexFile+": rule index-json: ") {
		t.Fatalf("a cut index: %v", err)
	}
}
