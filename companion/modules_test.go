package main

import (
	"net/http"
	"net/http/httptest"
	"path"
	"strings"
	"sync"
	"testing"

	"github.com/quantscope/quantscope/companion/localhub"
)

// A command on one module (stats, decode, quantize, report) with
// --index-shards reads the index and the headers of only the shards it
// names for the module's tensors: on the 8-shard, 180,000-tensor repo, one
// shard's header and the module, in a handful of requests. Without the
// flag it reads every header (a tensor the index leaves out is seen). A
// name in no shard reads them all and names the nearest modules.
func TestModuleCommandReadsItsShardsOnly(t *testing.T) {
	if testing.Short() {
		t.Skip("generates a 180,000-tensor repo")
	}
	h, err := localhub.New(r1ShapeRoot(t), localhub.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var requests int
	shards := map[string]bool{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		requests++
		if strings.HasSuffix(r.URL.Path, ".safetensors") {
			shards[path.Base(r.URL.Path)] = true
		}
		mu.Unlock()
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	run := func(args ...string) (string, string, int) {
		mu.Lock()
		requests = 0
		clear(shards)
		mu.Unlock()
		return runMain(t, append([]string{args[0], "--no-cache", "--endpoint", srv.URL}, args[1:]...)...)
	}
	const expert = "model.layers.5.mlp.experts.7.gate_proj"
	for _, cmd := range []string{"stats", "decode"} {
		args := []string{cmd, "--index-shards", "bench/r1", expert}
		if cmd == "decode" {
			args = []string{cmd, "--index-shards", "--rows", "0:4", "bench/r1", expert}
		}
		if out, errs, code := run(args...); code != 0 || out == "" {
			t.Fatalf("%s: exit %d: %s", cmd, code, errs)
		}
		mu.Lock()
		t.Logf("%s %s: %d requests, shards %v", cmd, expert, requests, shards)
		if len(shards) != 1 || requests > 12 {
			t.Errorf("%s of one expert: %d requests, shards %v; want one shard in a few requests (the repo has 8)", cmd, requests, shards)
		}
		mu.Unlock()
	}
	if _, errs, code := run("stats", "bench/r1", expert); code != 0 || len(shards) != 8 {
		t.Errorf("stats without --index-shards: exit %d, shards %v; want all 8 (%s)", code, shards, errs)
	}
	_, errs, code := run("stats", "--index-shards", "bench/r1", "model.layers.5.mlp.experts.7.gate_prj")
	if code == 0 || !strings.Contains(errs, "nearest: model.layers.5.mlp.experts.7.gate_proj") {
		t.Fatalf("a misspelt module: exit %d, %s", code, errs)
	}
	if len(shards) != 8 {
		t.Errorf("a misspelt module read shards %v, want all 8 (for its nearest names)", shards)
	}
}
