package checkpoint

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/quantscope/quantscope/formats/hub"
	"github.com/quantscope/quantscope/formats/safetensors"
	"github.com/quantscope/quantscope/synth"
)

// With an index whose counts hold, the tensor list is the shards' infos
// themselves (no copy); with one that misplaces a tensor, it is a copy. Both
// list every tensor once, in shard then data order, with its module and
// role (a module split across the shards included).
func TestTensorListSharedWithShards(t *testing.T) {
	ts := synth.NVFP4ModelOpt("model.layers.0.mlp.down_proj", matrix(8, 64), 1, safetensors.F32)
	other := synth.Dense("model.norm.weight", synth.Matrix{Shape: []uint64{4}, Data: []float32{1, 2, 3, 4}})
	shards := [][]safetensors.WriteTensor{ts[:2], append(ts[2:], other...)}
	for _, misplace := range []bool{false, true} {
		index := map[string]string{}
		for i, sh := range shards {
			for _, x := range sh {
				index[x.Name] = shardName(i)
			}
		}
		if misplace {
			index[ts[0].Name] = shardName(1)
		}
		dir := filepath.Join(t.TempDir(), "shared")
		writeShards(t, dir, shards, index)
		c, err := Load(context.Background(), &hub.Dir{Root: dir}, Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		shared := &c.tensors[0] == &c.Shards[0].infos[0]
		if shared == misplace {
			t.Errorf("misplaced %v: tensor list shared with the shards %v", misplace, shared)
		}
		var want []string
		for _, sh := range c.Shards {
			for _, x := range sh.Header.Tensors {
				want = append(want, x.Name)
			}
		}
		if len(c.tensors) != len(want) {
			t.Fatalf("misplaced %v: %d tensors, want %d", misplace, len(c.tensors), len(want))
		}
		for i, x := range c.tensors {
			mod, role := "model.norm", "weight"
			if x.Name != "model.norm.weight" {
				mod, role = "model.layers.0.mlp.down_proj", strings.TrimPrefix(x.Name, "model.layers.0.mlp.down_proj.")
			}
			if x.Name != want[i] || x.Module != mod || x.Role != role {
				t.Errorf("misplaced %v: tensor %d %s in %s as %s, want %s in %s as %s", misplace, i, x.Name, x.Module, x.Role, want[i], mod, role)
			}
		}
	}
}
