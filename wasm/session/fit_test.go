package session

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/quantscope/quantscope/synth"
)

// TestFit: the page's estimate over the hub, for a remote repo, with the
// numbers worked out from the generated repo's config.
func TestFit(t *testing.T) {
	r := synth.FitGPTOSSSliding()
	url, _ := serve(t, r)
	s, err := Open(context.Background(), r.ID, Options{Endpoint: url})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	b, err := s.FitJSON([]byte(`{"tp":2,"context":1000,"batch":2,"gpus":["H100","small:0.01"],"reserve":"0"}`))
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		WeightsBytes      uint64 `json:"weights_bytes"`
		PerGPUWeightBytes uint64 `json:"per_gpu_weight_bytes"`
		KVBytes           uint64 `json:"kv_bytes"`
		PerGPUKVBytes     uint64 `json:"per_gpu_kv_bytes"`
		TP                int
		GPUs              []struct {
			Name       string
			Count      int
			Fits       bool
			MaxContext int `json:"max_context"`
		}
		Catalog []struct{ Name string }
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	d := synth.FitSlidingDims
	perLayer := 2 * d.KVHeads * d.HeadDim * 2 // K and V, BF16
	// Two full layers hold 1000 tokens, two sliding ones their window of 128; 2 sequences.
	if want := uint64(2 * (2*perLayer*1000 + 2*perLayer*d.Window)); rep.KVBytes != want || rep.PerGPUKVBytes != want/2 {
		t.Errorf("kv %d, per GPU %d; want %d and half", rep.KVBytes, rep.PerGPUKVBytes, want)
	}
	if rep.TP != 2 || len(rep.GPUs) != 2 || rep.GPUs[0].Name != "H100" || !rep.GPUs[0].Fits || rep.GPUs[0].Count != 1 ||
		rep.GPUs[0].MaxContext != d.MaxPos || rep.GPUs[1].Name != "small" || len(rep.Catalog) != 6 || rep.PerGPUWeightBytes >= rep.WeightsBytes {
		t.Errorf("fit: %s", b)
	}
	for _, bad := range []struct{ req, want string }{{`{"gpus":["A100"]}`, "not in the catalog"}, {`{"tp":-1}`, "--tp -1"}, {`{"tp":"x"}`, "fit options"}} {
		if _, err := s.FitJSON([]byte(bad.req)); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%s: %v", bad.req, err)
		}
	}
}
