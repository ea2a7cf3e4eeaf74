package session

import (
	"context"
	"testing"

	"github.com/quantscope/quantscope/formats/checkpoint"
)

// The warm-up's repo is one the engine reads without an error, through
// the paths a real NVFP4 repo takes: two shards by their index, 512
// quantized modules, the declared scheme's exclusions.
func TestWarmUpReadsItsRepo(t *testing.T) {
	if err := WarmUp(); err != nil {
		t.Fatal(err)
	}
	src, err := warmRepo()
	if err != nil {
		t.Fatal(err)
	}
	ck, err := checkpoint.Load(context.Background(), src, checkpoint.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	inv := ck.InventoryWithoutTensors()
	if s := inv.Summary; s.Files != 2 || s.Tensors != 2048 || s.QuantizedModules != 512 || len(inv.Findings) != 0 {
		t.Fatalf("warm-up repo: %d shards, %d tensors, %d quantized modules, findings %v; want 2, 2048, 512, none", s.Files, s.Tensors, s.QuantizedModules, inv.Findings)
	}
}
