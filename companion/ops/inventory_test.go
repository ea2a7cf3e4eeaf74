package ops

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/quantscope/quantscope/formats/checkpoint"
	"github.com/quantscope/quantscope/formats/hub"
	"github.com/quantscope/quantscope/synth"
)

func TestInventoryOp(t *testing.T) {
	dir := t.TempDir()
	r := synth.ModelOptNVFP4()
	if err := r.WriteDir(dir); err != nil {
		t.Fatal(err)
	}
	src, _ := hub.OpenLocal(dir)
	c, err := checkpoint.Load(context.Background(), src, checkpoint.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	op, ok := Lookup("inventory")
	if !ok {
		t.Fatal("inventory is not registered")
	}
	want := c.Inventory()
	name := want.Modules[0].Name
	res, err := op(context.Background(), Env{Checkpoint: c}, name, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := res.JSON.(InventoryResult)
	if got.ReadFrom.Kind != "local" || got.ReadFrom.Where != dir {
		t.Errorf("read_from %+v, want local %s", got.ReadFrom, dir)
	}
	if got.Summary.Parameters != want.Summary.Parameters || got.Summary.Tensors != want.Summary.Tensors || got.Findings != len(want.Findings) {
		t.Errorf("summary %+v, inventory says %+v", got.Summary, want.Summary)
	}
	if got.Module == nil || got.Module.Name != name {
		t.Errorf("module %+v, want %s", got.Module, name)
	}
	if _, err := op(context.Background(), Env{Checkpoint: c}, "no.such.module", nil); err == nil || !strings.Contains(err.Error(), "no.such.module") {
		t.Errorf("absent module: %v", err)
	}
	if _, err := op(context.Background(), Env{Checkpoint: c}, "", json.RawMessage(`{"x":1}`)); err == nil {
		t.Error("unknown parameter accepted")
	}
}
