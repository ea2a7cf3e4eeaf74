package main

import (
	"context"
	"fmt"
	"os"

	"github.com/quantscope/quantscope/companion/proto"
	"github.com/quantscope/quantscope/kernels"
	"github.com/quantscope/quantscope/kernels/cpu"
	"github.com/quantscope/quantscope/kernels/cuda"
)

// chooseBackend is the jobs' backend: the CUDA workers' (one a GPU) when their binary is
// beside quantscope (or named by QUANTSCOPE_CUDA_WORKER) and it finds a GPU,
// else the CPU. Why the GPU is not used goes to stderr, once at start and
// each time a job falls back (when the worker was named explicitly or
// found); a plain build with no worker stays quiet.
func chooseBackend(ctx context.Context) (kernels.Backend, []proto.GPU) {
	path := cuda.FindWorker()
	if _, err := os.Stat(path); err != nil && os.Getenv(cuda.WorkerEnv) == "" {
		return cpu.New(), []proto.GPU{}
	}
	b := cuda.OpenAll(path, func(msg string) { fmt.Fprintln(os.Stderr, "quantscope:", msg) })
	gpus := []proto.GPU{}
	for _, g := range b.GPUs(ctx) {
		gpus = append(gpus, proto.GPU{Name: g.Name, MemoryBytes: g.TotalBytes, FreeBytes: g.FreeBytes})
	}
	return b, gpus
}
