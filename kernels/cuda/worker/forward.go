//go:build cuda

package main

import (
	"math"

	"gorgonia.org/cu"

	"github.com/quantscope/quantscope/kernels/cuda/wire"
)

// The forward-pass and calibration operations: each request is one step
// (wire's checkForward has bounded its inputs and answer by the staging).

func init() {
	kernelsOf["w4a_nvfp4"] = []string{"w4a_nvfp4"}
	kernelsOf["llama"] = []string{"rms_norm", "rope", "attention", "swiglu"}
	kernelsOf["w4a_fp8_tc"] = []string{"w4a_fp8_tc"}
	kernelsOf["w4a_nvfp4_tc"] = []string{"w4a_nvfp4_tc"}
	kernelsOf["calib"] = []string{"channel_stats", "block_hessians", "hist_zero", "abs_hist"}
}

// forwardSteps returns the request's step and its answer's buffers.
func (g *gpu) forwardSteps(req wire.Request, parts [][]byte) ([]step, [][]byte) {
	f := req.Fwd
	if f == nil {
		f = &wire.Fwd{}
	}
	one := func(outs [][]byte, launch func(in, o []cu.DevicePtr, s cu.Stream) error) ([]step, [][]byte) {
		return []step{{ins: parts, outs: outs, launch: launch}}, outs
	}
	switch req.Op {
	case wire.OpW4ANVFP4:
		T, K, N := req.T, req.K, req.N
		return one([][]byte{make([]byte, 4*T*N)}, func(in, o []cu.DevicePtr, s cu.Stream) error {
			return g.launch("w4a_nvfp4", s, int((N+127)/128), int(T), 128, int(K/2+K/16),
				dp(o[0]), dp(in[0]), dp(in[1]), dp(in[2]), dp(in[3]), uint64(T), uint64(K), uint64(N), f32(req.Global))
		})
	case wire.OpW4ANVFP4TC:
		T, K, N := req.T, req.K, req.N
		return one([][]byte{make([]byte, 4*T*N)}, func(in, o []cu.DevicePtr, s cu.Stream) error {
			return g.launch("w4a_nvfp4_tc", s, int((N+31)/32), int((T+63)/64), 128, 0,
				dp(o[0]), dp(in[0]), dp(in[1]), dp(in[2]), dp(in[3]), uint64(T), uint64(K), uint64(N), f32(req.Global))
		})
	case wire.OpW4AFP8TC:
		T, K, N := req.T, req.K, req.N
		return one([][]byte{make([]byte, 4*T*N)}, func(in, o []cu.DevicePtr, s cu.Stream) error {
			return g.launch("w4a_fp8_tc", s, int((N+63)/64), int((T+63)/64), 128, 0,
				dp(o[0]), dp(in[0]), dp(in[1]), dp(in[2]), dp(in[3]), uint64(T), uint64(K), uint64(N))
		})
	case wire.OpRMSNorm:
		rows, cols := req.Rows, req.Cols
		return one([][]byte{make([]byte, 4*rows*cols)}, func(in, o []cu.DevicePtr, s cu.Stream) error {
			return g.launch("rms_norm", s, int(min(rows, 1<<16)), 1, 256, 0, dp(o[0]), dp(in[0]), dp(in[1]), uint64(rows), uint64(cols), f32(f.Eps))
		})
	case wire.OpRoPE:
		T, heads, d := req.Rows, f.Heads, f.HeadDim
		return one([][]byte{make([]byte, len(parts[0]))}, func(in, o []cu.DevicePtr, s cu.Stream) error {
			return g.launch("rope", s, gridFor(T*heads*d/2), 1, 256, 0, dp(o[0]), dp(in[0]), dp(in[1]), uint64(T), uint64(heads), uint64(d))
		})
	case wire.OpAttention:
		T, heads, kv, d := req.Rows, f.Heads, f.KVHeads, f.HeadDim
		scale := float32(1 / math.Sqrt(float64(d)))
		return one([][]byte{make([]byte, len(parts[0]))}, func(in, o []cu.DevicePtr, s cu.Stream) error {
			return g.launch("attention", s, int(T), int(heads), 128, int(4*T),
				dp(o[0]), dp(in[0]), dp(in[1]), dp(in[2]), uint64(T), uint64(heads), uint64(kv), uint64(d), f32(scale))
		})
	case wire.OpSwiGLU:
		n := int64(len(parts[0]) / 4)
		return one([][]byte{make([]byte, 4*n)}, func(in, o []cu.DevicePtr, s cu.Stream) error {
			return g.launch("swiglu", s, gridFor(n), 1, 256, 0, dp(o[0]), dp(in[0]), dp(in[1]), uint64(n))
		})
	case wire.OpChannelStats:
		rows, cols := req.Rows, req.Cols
		return one([][]byte{make([]byte, 4*cols), make([]byte, 8*cols)}, func(in, o []cu.DevicePtr, s cu.Stream) error {
			return g.launch("channel_stats", s, gridFor(cols), 1, 256, 0, dp(o[0]), dp(o[1]), dp(in[0]), uint64(rows), uint64(cols))
		})
	case wire.OpBlockHessians:
		rows, cols := req.Rows, req.Cols
		return one([][]byte{make([]byte, 4*16*cols)}, func(in, o []cu.DevicePtr, s cu.Stream) error {
			return g.launch("block_hessians", s, gridFor(16*cols), 1, 256, 0, dp(o[0]), dp(in[0]), uint64(rows), uint64(cols))
		})
	case wire.OpAbsHist:
		n, bins := int64(len(parts[0])/4), f.Bins
		return one([][]byte{make([]byte, 8*bins)}, func(in, o []cu.DevicePtr, s cu.Stream) error {
			if err := g.launch("hist_zero", s, gridFor(bins), 1, 256, 0, dp(o[0]), uint64(bins)); err != nil {
				return err
			}
			return g.launch("abs_hist", s, int(min(max((n+255)/256, 1), 1024)), 1, 256, int(4*bins), dp(o[0]), dp(in[0]), uint64(n), f32(f.Max), uint64(bins))
		})
	}
	return nil, nil
}
