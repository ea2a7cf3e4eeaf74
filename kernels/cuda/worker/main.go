//go:build cuda

// Command quantscope-cuda-worker runs quantscope's CUDA kernels on one GPU
// for the companion, speaking kernels/cuda/wire over stdin and stdout: its
// first frame is a hello naming the device. Built by `make cuda`; the
// companion finds it beside its own binary (or through
// QUANTSCOPE_CUDA_WORKER) and starts one per GPU.
//
// gorgonia.org/cu calls cuInit in its init and, when that fails, prints a
// line to stdout and exits: the client reads that line where it expected a
// hello, and says there is no usable GPU.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"runtime"

	"github.com/quantscope/quantscope/kernels/cuda/wire"
	"gorgonia.org/cu"
)

func main() {
	device := flag.Int("device", 0, "the GPU's ordinal")
	flag.Parse()
	// One goroutine, locked to its OS thread, owns the context: every CUDA
	// call below runs on this thread.
	runtime.LockOSThread()
	g, err := open(*device)
	if err != nil {
		// not a hello: the client reports this text as "no usable GPU"
		fmt.Println("quantscope-cuda-worker:", err)
		os.Exit(1)
	}
	out := bufio.NewWriterSize(os.Stdout, 1<<20)
	err = wire.Serve(bufio.NewReaderSize(os.Stdin, 1<<20), flushWriter{out}, g.hello, g.handle)
	g.close()
	if err != nil {
		fmt.Fprintln(os.Stderr, "quantscope-cuda-worker:", err)
		os.Exit(1)
	}
}

// flushWriter flushes after every write so that each frame leaves at once
// (wire.Write writes a frame's prefix+header, then each part).
type flushWriter struct{ w *bufio.Writer }

func (f flushWriter) Write(p []byte) (int, error) {
	n, err := f.w.Write(p)
	if err == nil {
		err = f.w.Flush()
	}
	return n, err
}

// hello describes the device.
func describe(dev cu.Device, ordinal int) (wire.Hello, error) {
	h := wire.Hello{Device: ordinal}
	var err error
	if h.Name, err = dev.Name(); err != nil {
		return h, err
	}
	if h.Major, h.Minor, err = dev.ComputeCapability(); err != nil {
		return h, err
	}
	if h.FreeMem, h.TotalMem, err = cu.MemInfo(); err != nil {
		return h, err
	}
	if h.Devices, err = cu.NumDevices(); err != nil {
		return h, err
	}
	return h, nil
}
