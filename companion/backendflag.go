package main

import (
	"fmt"
	"io"

	"github.com/quantscope/quantscope/kernels"
	"github.com/quantscope/quantscope/kernels/cpu"
	"github.com/quantscope/quantscope/kernels/cuda"
)

// backendUsage describes --backend.
const backendUsage = "where the kernels run: cpu, or cuda (the GPU worker beside quantscope or named by QUANTSCOPE_CUDA_WORKER; the CPU, saying why, when it finds no usable GPU)"

// backendNamed opens the backend --backend names; close releases it.
func backendNamed(name string, stderr io.Writer) (be kernels.Backend, close func(), err error) {
	switch name {
	case "cpu":
		return cpu.New(), func() {}, nil
	case "cuda":
		b := cuda.Open(cuda.FindWorker(), 0, func(msg string) { fmt.Fprintln(stderr, "quantscope:", msg) })
		return b, b.Close, nil
	}
	return nil, nil, &usageError{msg: fmt.Sprintf("--backend %q: want cpu or cuda", name)}
}
