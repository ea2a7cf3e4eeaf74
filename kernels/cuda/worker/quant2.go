//go:build cuda

package main

import (
	"fmt"
	"os"

	"github.com/quantscope/quantscope/kernels/cuda/wire"
	"gorgonia.org/cu"
)

// The quantize operations beyond NVFP4 max/mse (ptx/fp8_quant.cu,
// ptx/nvfp4_recipes.cu): FP8 with every scale grid, GPT-QModel's four_six
// and least_squares, ModelOpt's local_hessian. quant2 returns the last
// pass's steps for handle's pipeline; passes before it (FP8's whole-weight
// amax, local_hessian's second moments) run here.
func (g *gpu) quant2(req wire.Request, parts [][]byte) ([][]byte, []step) {
	switch req.Op {
	case wire.OpQuantFP8:
		return g.quantFP8(req, parts)
	case wire.OpQuantNVFP4GPTQ:
		return g.quantGPTQ(req, parts)
	}
	return g.quantLH(req, parts)
}

// runPass runs an earlier pass of a request; a CUDA error ends the worker
// as in handle (the client finishes the job on the CPU).
func (g *gpu) runPass(op string, steps []step) {
	if err := g.pipeline(steps); err != nil {
		fmt.Fprintf(os.Stderr, "quantscope-cuda-worker: %s: %v\n", op, err)
		os.Exit(3)
	}
}

// pow2Block is the smallest power of two ≥ n within [32, 256].
func pow2Block(n int64) int {
	b := 32
	for b < 256 && int64(b) < n {
		b *= 2
	}
	return b
}

func (g *gpu) quantFP8(req wire.Request, parts [][]byte) ([][]byte, []step) {
	rows, cols, R, C := req.Rows, req.Cols, req.R, req.C
	scols, srows := (cols+C-1)/C, (rows+R-1)/R
	fmax := float32(448)
	if req.E5M2 {
		fmax = 57344
	}
	inv, e5 := b2u(req.Inv), b2u(req.E5M2)
	codes, scales := make([]byte, rows*cols), make([]byte, 4*srows*scols)
	out := [][]byte{codes, scales}
	w := parts[0]
	per := max(int64(chunkBytes)/(4*cols), 1)
	amaxBlock := pow2Block(C)
	var steps []step
	if R <= per {
		// one pass: pieces of whole row regions through the three kernels
		per = per / R * R
		for lo := int64(0); lo < rows; lo += per {
			hi := min(lo+per, rows)
			n, sr0, sr1 := hi-lo, lo/R, (hi+R-1)/R
			steps = append(steps, step{
				ins:  [][]byte{w[4*lo*cols : 4*hi*cols]},
				outs: [][]byte{codes[lo*cols : hi*cols], scales[4*sr0*scols : 4*sr1*scols], make([]byte, 4*n*scols)},
				launch: func(in, o []cu.DevicePtr, s cu.Stream) error {
					if err := g.launch("fp8q_amax", s, int(min(n*scols, 1<<16)), 1, amaxBlock, 0, dp(in[0]), dp(o[2]), uint64(n), uint64(cols), uint64(C), uint64(scols)); err != nil {
						return err
					}
					if err := g.launch("fp8q_scales", s, gridFor((sr1-sr0)*scols), 1, 256, 0, dp(o[2]), dp(o[1]), uint64(n), uint64(R), uint64(scols), f32(fmax), inv); err != nil {
						return err
					}
					return g.launch("fp8q_encode", s, gridFor(n*cols), 1, 256, 0, dp(in[0]), dp(o[1]), dp(o[0]), uint64(lo), uint64(n), uint64(cols), uint64(R), uint64(C), uint64(scols), uint64(sr0), f32(fmax), inv, e5)
				},
			})
		}
		return out, steps
	}
	// a region spans more rows than a piece (a tensor scale over a large
	// weight): every row's amax first, then the scales, then the codes
	amax := make([]byte, 4*rows*scols)
	var pass []step
	for lo := int64(0); lo < rows; lo += per {
		hi := min(lo+per, rows)
		n := hi - lo
		pass = append(pass, step{
			ins:  [][]byte{w[4*lo*cols : 4*hi*cols]},
			outs: [][]byte{amax[4*lo*scols : 4*hi*scols]},
			launch: func(in, o []cu.DevicePtr, s cu.Stream) error {
				return g.launch("fp8q_amax", s, int(min(n*scols, 1<<16)), 1, amaxBlock, 0, dp(in[0]), dp(o[0]), uint64(n), uint64(cols), uint64(C), uint64(scols))
			},
		})
	}
	g.runPass(req.Op, pass)
	g.runPass(req.Op, []step{{
		ins:  [][]byte{amax},
		outs: [][]byte{scales},
		launch: func(in, o []cu.DevicePtr, s cu.Stream) error {
			return g.launch("fp8q_scales", s, gridFor(srows*scols), 1, 256, 0, dp(in[0]), dp(o[0]), uint64(rows), uint64(R), uint64(scols), f32(fmax), inv)
		},
	}})
	for lo := int64(0); lo < rows; lo += per {
		hi := min(lo+per, rows)
		n := hi - lo
		steps = append(steps, step{
			ins:  [][]byte{w[4*lo*cols : 4*hi*cols], scales},
			outs: [][]byte{codes[lo*cols : hi*cols]},
			launch: func(in, o []cu.DevicePtr, s cu.Stream) error {
				return g.launch("fp8q_encode", s, gridFor(n*cols), 1, 256, 0, dp(in[0]), dp(in[1]), dp(o[0]), uint64(lo), uint64(n), uint64(cols), uint64(R), uint64(C), uint64(scols), 0, f32(fmax), inv, e5)
			},
		})
	}
	return out, steps
}

func (g *gpu) quantGPTQ(req wire.Request, parts [][]byte) ([][]byte, []step) {
	refine := b2u(req.Recipe == "least_squares")
	return nvfp4Steps(req, parts[0], func(m int64, in, o []cu.DevicePtr, s cu.Stream) error {
		return g.launch("nvfp4_gptq", s, gridFor(m), 1, 256, 0, dp(in[0]), dp(o[0]), dp(o[1]), uint64(m), f32(req.Global), refine)
	})
}

// nvfp4Steps splits the NVFP4 quantization of w (float32, req.Rows ×
// req.Cols) into steps of whole 16-value blocks, at most chunkBytes of
// input each; launch quantizes m blocks into their packed codes (8 bytes a
// block) and scale codes (one). It returns the two outputs and the steps.
func nvfp4Steps(req wire.Request, w []byte, launch func(m int64, in, o []cu.DevicePtr, s cu.Stream) error) ([][]byte, []step) {
	nb := req.Rows * req.Cols / 16
	packed, scales := make([]byte, 8*nb), make([]byte, nb)
	per := int64(chunkBytes / 64) // blocks a step
	var steps []step
	for lo := int64(0); lo < nb; lo += per {
		hi := min(lo+per, nb)
		m := hi - lo
		steps = append(steps, step{
			ins:    [][]byte{w[64*lo : 64*hi]},
			outs:   [][]byte{packed[8*lo : 8*hi], scales[lo:hi]},
			launch: func(in, o []cu.DevicePtr, s cu.Stream) error { return launch(m, in, o, s) },
		})
	}
	return [][]byte{packed, scales}, steps
}

// quantLH: the second moments H [cols/16][16][16] summed over pieces of
// tokens (in token order, one pass a piece, the last dividing by the
// count), then the weight in pieces of rows, each with all of H.
func (g *gpu) quantLH(req wire.Request, parts [][]byte) ([][]byte, []step) {
	rows, cols, T := req.Rows, req.Cols, req.T
	x := parts[1]
	h := make([]byte, 4*cols*16)
	perT := max(int64(chunkBytes)/(4*cols), 1)
	for lo := int64(0); lo < T; lo += perT {
		hi := min(lo+perT, T)
		n, total := hi-lo, int64(0)
		if hi == T {
			total = T
		}
		next := make([]byte, len(h))
		g.runPass(req.Op, []step{{
			ins:  [][]byte{x[4*lo*cols : 4*hi*cols], h},
			outs: [][]byte{next},
			launch: func(in, o []cu.DevicePtr, s cu.Stream) error {
				return g.launch("nvfp4_hess_acc", s, gridFor(cols*16), 1, 256, 0, dp(in[0]), dp(in[1]), dp(o[0]), uint64(n), uint64(cols), uint64(total))
			},
		}})
		h = next
	}
	nb := rows * cols / 16
	packed, scales := make([]byte, 8*nb), make([]byte, nb)
	w := parts[0]
	per := max(int64(chunkBytes)/(4*cols), 1)
	const tile = 128
	var steps []step
	for lo := int64(0); lo < rows; lo += per {
		hi := min(lo+per, rows)
		n := hi - lo
		b0, b1 := lo*cols/16, hi*cols/16
		steps = append(steps, step{
			ins:  [][]byte{w[4*lo*cols : 4*hi*cols], h},
			outs: [][]byte{packed[8*b0 : 8*b1], scales[b0:b1]},
			launch: func(in, o []cu.DevicePtr, s cu.Stream) error {
				tiles := cols / 16 * ((n + tile - 1) / tile)
				return g.launch("nvfp4_hessian", s, int(min(tiles, 1<<16)), 1, tile, 0, dp(in[0]), dp(in[1]), dp(o[0]), dp(o[1]), uint64(n), uint64(cols), f32(req.Global))
			},
		})
	}
	return [][]byte{packed, scales}, steps
}
