package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/quantscope/quantscope/kernels/cpu"
	"github.com/quantscope/quantscope/kernels/cuda"
)

func TestChooseBackend(t *testing.T) {
	t.Setenv(cuda.WorkerEnv, "")
	if b, g := chooseBackend(context.Background()); len(g) != 0 {
		t.Fatalf("no worker: GPUs %v", g)
	} else if _, ok := b.(*cpu.Backend); !ok {
		t.Fatalf("no worker: backend %T, want the CPU's", b)
	}
	// a worker that prints cu's init failure: CPU, no GPUs listed
	w := filepath.Join(t.TempDir(), "worker")
	os.WriteFile(w, []byte("#!/bin/sh\necho 'Error in initialization: NoDevice'\nexit 1\n"), 0o755)
	t.Setenv(cuda.WorkerEnv, w)
	b, g := chooseBackend(context.Background())
	if len(g) != 0 || !strings.HasPrefix(b.Name(), "cpu (") {
		t.Fatalf("no GPU: backend %q, GPUs %v", b.Name(), g)
	}
}
