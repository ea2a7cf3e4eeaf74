package checkpoint

import (
	"fmt"
	"testing"
)

// TestIndexTable: the weight_map table finds every name after growing from
// its smallest size, tells a repeated name, and knows no other name.
func TestIndexTable(t *testing.T) {
	x := &Index{table: newNameTable(0), shards: []string{"a.safetensors", "b.safetensors"}}
	const n = 5000
	for i := range n {
		if !x.add(fmt.Sprintf("model.layers.%d.mlp.up_proj.weight", i), uint32(i%2)) {
			t.Fatalf("entry %d reported twice", i)
		}
	}
	if x.add("model.layers.17.mlp.up_proj.weight", 0) || x.Len() != n {
		t.Fatalf("a repeated name was added (%d entries)", x.Len())
	}
	for i := range n {
		if s, ok := x.Shard(fmt.Sprintf("model.layers.%d.mlp.up_proj.weight", i)); !ok || s != x.shards[i%2] {
			t.Fatalf("entry %d: %q, %v", i, s, ok)
		}
	}
	if _, ok := x.Shard("model.layers.5000.mlp.up_proj.weight"); ok {
		t.Fatal("a name not in weight_map found")
	}
	if m := x.WeightMap(); len(m) != n || m["model.layers.3.mlp.up_proj.weight"] != "b.safetensors" {
		t.Fatalf("WeightMap: %d entries", len(m))
	}
	var nilIndex *Index
	if _, ok := nilIndex.Shard("x"); ok {
		t.Fatal("a nil Index names a shard")
	}
}
