package checkpoint

import (
	"context"
	"fmt"
	"testing"

	"github.com/quantscope/quantscope/formats/hub"
	"github.com/quantscope/quantscope/formats/safetensors"
)

// A shard's header buffer goes back for the next shard's header once its
// names are copied out: the second shard is read into the first one's
// buffer, and the first shard's tensors keep their names when it changes.
// (Holding every header's bytes cost 25 MB on an 80-shard repo.)
func TestHeaderBufferGoesOnToTheNextShard(t *testing.T) {
	shard := func(k int) []safetensors.WriteTensor {
		var ts []safetensors.WriteTensor
		for i := range 50 {
			ts = append(ts, safetensors.WriteTensor{Name: fmt.Sprintf("model.layers.%d.mlp.experts.%d.down_proj.weight", k, i),
				DType: safetensors.BF16, Shape: []uint64{2}, Data: make([]byte, 4)})
		}
		return ts
	}
	dir := writeFiles(t, map[string][]safetensors.WriteTensor{"a.safetensors": shard(0), "b.safetensors": shard(1)}, map[string][]byte{})
	src := &hub.Dir{Root: dir}
	var bufs headerBuffers
	a, err := readShard(context.Background(), src, "a.safetensors", 100_000, &bufs)
	if err != nil {
		t.Fatal(err)
	}
	defer closeReader(a.r)
	if len(bufs.free) != 1 {
		t.Fatalf("%d buffers back after one header, want 1", len(bufs.free))
	}
	lent := &bufs.free[0][:1][0]
	b, err := readShard(context.Background(), src, "b.safetensors", 100_000, &bufs)
	if err != nil {
		t.Fatal(err)
	}
	defer closeReader(b.r)
	if len(bufs.free) != 1 || &bufs.free[0][:1][0] != lent {
		t.Fatal("the second header was not read into the first one's buffer")
	}
	for i, ts := range [][]safetensors.WriteTensor{shard(0), shard(1)} {
		h := []*Shard{a, b}[i].Header
		if len(h.Tensors) != len(ts) {
			t.Fatalf("shard %d: %d tensors, want %d", i, len(h.Tensors), len(ts))
		}
		for j := range ts {
			if h.Tensors[j].Name != ts[j].Name {
				t.Fatalf("shard %d tensor %d: %q after its buffer was reused, want %q", i, j, h.Tensors[j].Name, ts[j].Name)
			}
		}
	}
}
