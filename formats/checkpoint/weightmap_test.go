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
	var hints []shardHint
	x.Shards(func(_ string, h shardHint) { hints = append(hints, h) })
	var want [2]shardHint
	for i := range n {
		want[i%2].tensors++
		want[i%2].nameBytes += len(fmt.Sprintf("model.layers.%d.mlp.up_proj.weight", i))
	}
	if len(hints) != 2 || hints[0] != want[0] || hints[1] != want[1] {
		t.Fatalf("shard hints %+v, want %+v", hints, want)
	}
	x.seal() // as parseIndex leaves it: no names, the hashes find the shards
	for i := range n {
		if s, ok := x.Shard(fmt.Sprintf("model.layers.%d.mlp.up_proj.weight", i)); !ok || s != x.shards[i%2] {
			t.Fatalf("sealed, entry %d: %q, %v", i, s, ok)
		}
	}
	var nilIndex *Index
	if _, ok := nilIndex.Shard("x"); ok {
		t.Fatal("a nil Index names a shard")
	}
}
