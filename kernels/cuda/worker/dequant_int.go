//go:build cuda

package main

import (
	"fmt"
	"os"
	"time"
	"unsafe"

	"github.com/quantscope/quantscope/kernels/cuda/wire"
	"gorgonia.org/cu"
)

// statsBlocks is the grid of a statistics launch (a few blocks an SM on a
// Hopper), statsStep the elements one launch covers.
const (
	statsBlocks = 528
	statsStep   = 1 << 25
)

// resident copies a request's parts to the device once, through the
// pinned staging buffer (full PCIe rate): GPTQ and AWQ pack along the
// inputs, so every band of output rows reads every stored word, and the
// statistics' launches read the parts where they lie. The packed parts are
// bits/32 of the float32 values they decode to.
func (g *gpu) resident(parts [][]byte) ([]cu.DevicePtr, func(), error) {
	ptrs := make([]cu.DevicePtr, 0, len(parts))
	free := func() {
		for _, p := range ptrs {
			cu.MemFree(p)
		}
	}
	stage := g.stage[0].bytes()
	for _, b := range parts {
		p, err := cu.MemAlloc(max(int64(len(b)), 16))
		if err != nil {
			free()
			return nil, nil, fmt.Errorf("cuMemAlloc(%d): %v", len(b), err)
		}
		ptrs = append(ptrs, p)
		for off := 0; off < len(b); off += len(stage) {
			n := copy(stage, b[off:])
			if err := cu.MemcpyHtoD(p+cu.DevicePtr(off), unsafe.Pointer(&stage[0]), int64(n)); err != nil {
				free()
				return nil, nil, err
			}
		}
	}
	return ptrs, free, nil
}

// handleInt answers dequant_int and stats.
func (g *gpu) handleInt(req wire.Request, parts [][]byte) (wire.Response, [][]byte, error) {
	t0 := time.Now()
	dev, free, err := g.resident(parts)
	if err != nil {
		return wire.Response{}, nil, err
	}
	defer free()
	var out [][]byte
	var steps []step
	var hist cu.DevicePtr
	if req.Op == wire.OpDequantInt {
		rows, cols := req.Rows, req.Cols
		y := make([]byte, 4*rows*cols)
		out = [][]byte{y}
		per := max(chunkBytes/cols, 1) // rows a step: 4·chunkBytes of output
		for lo := int64(0); lo < rows; lo += per {
			hi := min(lo+per, rows)
			steps = append(steps, step{
				outs: [][]byte{y[4*lo*cols : 4*hi*cols]},
				launch: func(_, o []cu.DevicePtr, s cu.Stream) error {
					return g.launch("dequant_int", s, gridFor((hi-lo)*cols), 1, 256, 0, dp(o[0]), dp(dev[0]), dp(dev[1]), dp(dev[2]), dp(dev[3]),
						uint64(req.Layout), uint64(req.Bits), uint64(rows), uint64(cols), uint64(req.Groups), uint64(lo), uint64(hi-lo))
				},
			})
		}
	} else {
		if hist, err = cu.MemAlloc(8 * wire.StatsBuckets); err != nil {
			return wire.Response{}, nil, fmt.Errorf("cuMemAlloc(histogram): %v", err)
		}
		defer cu.MemFree(hist)
		if err := cu.MemsetD8(hist, 0, 8*wire.StatsBuckets); err != nil {
			return wire.Response{}, nil, err
		}
		n := req.Rows * req.Cols
		if req.Source == wire.SourceNVFP4 || req.Source == wire.SourceMXFP4 {
			n = 2 * int64(len(parts[0]))
		}
		nsteps := (n + statsStep - 1) / statsStep
		partials := make([]byte, nsteps*statsBlocks*wire.StatsPartial)
		out = [][]byte{partials, make([]byte, 8*wire.StatsBuckets)}
		for k := range nsteps {
			e0, e1 := k*statsStep, min((k+1)*statsStep, n)
			steps = append(steps, step{
				outs: [][]byte{partials[k*statsBlocks*wire.StatsPartial : (k+1)*statsBlocks*wire.StatsPartial]},
				launch: func(_, o []cu.DevicePtr, s cu.Stream) error {
					return g.launchStats(req, s, dp(o[0]), dp(hist), dev, e0, e1)
				},
			})
		}
	}
	// The uploads and the memset ran on the legacy stream, which the
	// pipeline's non-blocking streams do not wait for.
	if err := cu.Synchronize(); err != nil {
		fmt.Fprintf(os.Stderr, "quantscope-cuda-worker: %s: %v\n", req.Op, err)
		os.Exit(3)
	}
	if err := g.pipeline(steps); err != nil {
		fmt.Fprintf(os.Stderr, "quantscope-cuda-worker: %s: %v\n", req.Op, err)
		os.Exit(3)
	}
	if req.Op == wire.OpStats {
		if err := cu.MemcpyDtoH(unsafe.Pointer(&out[1][0]), hist, 8*wire.StatsBuckets); err != nil {
			fmt.Fprintf(os.Stderr, "quantscope-cuda-worker: %s: %v\n", req.Op, err)
			os.Exit(3)
		}
	}
	return wire.Response{Millis: float64(time.Since(t0).Microseconds()) / 1000}, out, nil
}

// launchStats launches the statistics kernel of req.Source over elements
// [e0, e1).
func (g *gpu) launchStats(req wire.Request, s cu.Stream, part, hist uint64, dev []cu.DevicePtr, e0, e1 int64) error {
	const th = 256
	switch req.Source {
	case wire.SourceInt:
		return g.launch("stats_int", s, statsBlocks, 1, th, 0, part, hist, dp(dev[0]), dp(dev[1]), dp(dev[2]), dp(dev[3]),
			uint64(req.Layout), uint64(req.Bits), uint64(req.Rows), uint64(req.Cols), uint64(req.Groups), uint64(e0), uint64(e1))
	case wire.SourceNVFP4:
		return g.launch("stats_nvfp4", s, statsBlocks, 1, th, 0, part, hist, dp(dev[0]), dp(dev[1]), f32(req.Global), uint64(e0), uint64(e1))
	case wire.SourceMXFP4:
		return g.launch("stats_mxfp4", s, statsBlocks, 1, th, 0, part, hist, dp(dev[0]), dp(dev[1]), uint64(e0), uint64(e1))
	case wire.SourceFP8:
		scols := (req.Cols + req.C - 1) / req.C
		return g.launch("stats_fp8", s, statsBlocks, 1, th, 0, part, hist, dp(dev[0]), dp(dev[1]), uint64(req.Cols), uint64(req.R), uint64(req.C),
			uint64(scols), b2u(req.Inv), b2u(req.E5M2), uint64(e0), uint64(e1))
	}
	return fmt.Errorf("stats: unknown source %q", req.Source)
}
