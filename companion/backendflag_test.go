package main

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/quantscope/quantscope/synth"
)

// stats --backend cuda without a worker says why on stderr and gives the
// CPU's statistics; an unknown backend is a usage error. (With a worker,
// kernels/cuda's tests check the GPU path against the CPU.)
func TestStatsBackendFlag(t *testing.T) {
	dir := demo(t)
	src := filepath.Join(dir, synth.ModelOptNVFP4().ID)
	name := "model.layers.1.mlp.gate_proj"
	t.Setenv("QUANTSCOPE_CUDA_WORKER", filepath.Join(t.TempDir(), "no-worker"))
	cpuOut, _, code := runMain(t, "stats", "--json", "--backend", "cpu", src, name)
	if code != 0 {
		t.Fatalf("cpu: exit %d", code)
	}
	cudaOut, stderr, code := runMain(t, "stats", "--json", "--backend", "cuda", src, name)
	// one line: why, and that the kernels run on the CPU (not again for stats)
	if code != 0 || stderr != "quantscope: cuda worker "+filepath.Join(filepath.Dir(os.Getenv("QUANTSCOPE_CUDA_WORKER")), "no-worker")+
		": no usable GPU: no worker binary there (make cuda builds it; QUANTSCOPE_CUDA_WORKER names another); kernels run on the CPU\n" {
		t.Fatalf("cuda without a worker: exit %d, stderr %q", code, stderr)
	}
	strip := func(s string) map[string]any {
		var m map[string]any
		if err := json.Unmarshal([]byte(s), &m); err != nil {
			t.Fatalf("%v: %q", err, s)
		}
		delete(m, "seconds")
		return m
	}
	a, b := strip(cpuOut), strip(cudaOut)
	for _, k := range []string{"mean", "std"} { // the CPU's band merge order varies between runs
		x, y := a[k].(float64), b[k].(float64)
		if math.Abs(x-y) > 1e-12*math.Abs(a["std"].(float64)) {
			t.Fatalf("%s: %g with --backend cuda, %g with --backend cpu", k, y, x)
		}
		delete(a, k)
		delete(b, k)
	}
	ja, _ := json.Marshal(a)
	if jb, _ := json.Marshal(b); string(ja) != string(jb) || b["backend"] == nil {
		t.Fatalf("--backend cuda on the CPU:\n%s\n--backend cpu:\n%s", jb, ja)
	}
	stdout, stderr, code := runMain(t, "stats", "--backend", "tpu", src, name)
	if code != 1 || stdout != "" || !strings.HasPrefix(stderr, `error: --backend "tpu": want cpu or cuda`) {
		t.Fatalf("--backend tpu: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
}
