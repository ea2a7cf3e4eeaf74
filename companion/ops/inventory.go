package ops

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/quantscope/quantscope/formats/checkpoint"
	"github.com/quantscope/quantscope/formats/hub"
	"github.com/quantscope/quantscope/formats/scheme"
)

// The "inventory" op: the source's inventory summary as the companion read
// it, and where its bytes came from. With a module, that module's entry too.
// It takes no parameters. It is the cheap op that exercises the whole job
// path (the header read is the long part, done by the job before the op).
func init() { Register("inventory", inventoryOp) }

// InventoryResult is the inventory op's JSON.
type InventoryResult struct {
	Source   string             `json:"source"`
	ReadFrom ReadFrom           `json:"read_from"`
	Summary  checkpoint.Summary `json:"summary"`
	Scheme   *scheme.Scheme     `json:"scheme"`
	Findings int                `json:"findings"`
	Fetch    hub.Stats          `json:"fetch"` // what the header read cost over the network
	Module   *scheme.Module     `json:"module,omitempty"`
}

// ReadFrom says where a source's bytes come from: Kind is "network",
// "hf-cache" or "local"; Where the source's name, the snapshot folder, or the
// path.
type ReadFrom struct {
	Kind  string `json:"kind"`
	Where string `json:"where"`
}

func inventoryOp(ctx context.Context, env Env, module string, params json.RawMessage) (*Result, error) {
	if err := DecodeParams("inventory", params, &struct{}{}); err != nil {
		return nil, err
	}
	c := env.Checkpoint
	inv := c.InventoryWithoutTensors()
	kind, where := hub.Origin(c.Source)
	out := InventoryResult{Source: inv.Source, ReadFrom: ReadFrom{kind, where}, Summary: inv.Summary, Scheme: inv.Scheme,
		Findings: len(inv.Findings), Fetch: inv.Fetch}
	if module != "" {
		m, ok := c.Module(module)
		if !ok {
			return nil, fmt.Errorf("%s: no module %q (inspect --json lists the modules)", c.Source.Name(), module)
		}
		out.Module = m
	}
	if env.Progress != nil {
		env.Progress(1, 1)
	}
	return &Result{JSON: out}, nil
}
