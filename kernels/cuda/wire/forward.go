package wire

import (
	"fmt"
	"math"
)

// The forward-pass and calibration operations (kernels/cuda/ptx:
// w4a_nvfp4.cu, llama.cu, calib.cu). Each runs as one pipeline step, so a
// request and its answer must fit MaxStep (ForwardBytes); the client sends
// larger ones to the CPU.
const (
	OpW4ANVFP4      = "w4a_nvfp4"      // parts: e2m1 codes (packed), e4m3 block scales, int4 codes (packed), f32 group scales → f32 outputs
	OpRMSNorm       = "rms_norm"       // Rows, Cols, Fwd.Eps; parts: f32 x, f32 weight → f32 y
	OpRoPE          = "rope"           // Rows (tokens), Fwd.Heads, Fwd.HeadDim; parts: f32 x, f32 inverse frequencies → f32 x rotated
	OpAttention     = "attention"      // Rows (tokens), Fwd.Heads, KVHeads, HeadDim; parts: f32 q, k, v → f32 out
	OpSwiGLU        = "swiglu"         // parts: f32 gate, f32 up → f32 silu(gate)·up
	OpChannelStats  = "channel_stats"  // Rows, Cols; parts: f32 x → f32 per-column max |x|, f64 per-column Σ|x|
	OpBlockHessians = "block_hessians" // Rows, Cols; parts: f32 x → f32 [Cols/16][16][16] Σ x xᵀ / Rows
	OpAbsHist       = "abs_hist"       // Fwd.Max, Fwd.Bins; parts: f32 x → uint64 counts of floor(|x|/max·bins), clamped
	// OpW4AFP8TC is OpW4AFP8 on tensor cores (w4a_fp8_tc.cu; not yet run on a GPU)
	OpW4AFP8TC = "w4a_fp8_tc"
	// OpW4ANVFP4TC is OpW4ANVFP4 on tensor cores (w4a_nvfp4_tc.cu; not yet run on a GPU)
	OpW4ANVFP4TC = "w4a_nvfp4_tc"
)

// Fwd holds the forward operations' parameters (Request.Fwd).
type Fwd struct {
	Eps     float32 `json:"eps,omitempty"`
	Heads   int64   `json:"heads,omitempty"`
	KVHeads int64   `json:"kv_heads,omitempty"`
	HeadDim int64   `json:"head_dim,omitempty"`
	Max     float32 `json:"max,omitempty"`
	Bins    int64   `json:"bins,omitempty"`
}

// Limits of the forward kernels: attention keeps one query's scores in
// shared memory, the histogram's bins are counted in shared memory.
const (
	AttnMaxT   = 8192
	AttnMaxD   = 256
	HistMaxBin = 4096
)

// W4ANVFP4Bytes is what a W4A-NVFP4 request and its answer occupy in staging.
func W4ANVFP4Bytes(T, K, N int64) int64 {
	return T*K/2 + T*K/16 + N*K/2 + 4*N*(K/128) + 4*T*N
}

func checkForward(req Request, parts [][]byte) error {
	want := func(sizes ...int64) error { return wantParts(req.Op, parts, sizes...) }
	const lim = 1 << 31
	dims := func(v ...int64) error { return inRange(req.Op, lim, v...) }
	f := req.Fwd
	if f == nil {
		f = &Fwd{}
	}
	// step bounds the request's parts plus its answer by the staging buffer
	step := func(in, out int64) error {
		if in+out > MaxStep {
			return fmt.Errorf("%s: %d MiB of inputs and outputs exceed the worker's %d MiB staging", req.Op, (in+out)>>20, MaxStep>>20)
		}
		return nil
	}
	switch req.Op {
	case OpW4AFP8TC:
		r := req
		r.Op = OpW4AFP8
		return Check(r, parts)
	case OpW4ANVFP4, OpW4ANVFP4TC:
		if err := dims(req.T, req.K, req.N); err != nil {
			return err
		}
		if req.K%128 != 0 || req.K > W4AMaxK || req.T > W4AMaxT {
			return fmt.Errorf("%s: input width %d is not a multiple of 128 up to %d, or %d tokens exceed %d", req.Op, req.K, W4AMaxK, req.T, W4AMaxT)
		}
		if !(req.Global > 0 && req.Global <= math.MaxFloat32) {
			return fmt.Errorf("%s: global scale %g is not positive and finite", req.Op, req.Global)
		}
		if err := step(W4ANVFP4Bytes(req.T, req.K, req.N), 0); err != nil {
			return err
		}
		return want(req.T*req.K/2, req.T*req.K/16, req.N*req.K/2, 4*req.N*(req.K/128))
	case OpRMSNorm:
		if err := dims(req.Rows, req.Cols); err != nil {
			return err
		}
		if !(f.Eps >= 0 && f.Eps <= math.MaxFloat32) {
			return fmt.Errorf("%s: eps %g is not finite and non-negative", req.Op, f.Eps)
		}
		if err := step(8*req.Rows*req.Cols+4*req.Cols, 0); err != nil {
			return err
		}
		return want(4*req.Rows*req.Cols, 4*req.Cols)
	case OpRoPE:
		if err := dims(req.Rows, f.Heads, f.HeadDim); err != nil {
			return err
		}
		if f.HeadDim%2 != 0 || f.Heads*f.HeadDim > lim {
			return fmt.Errorf("%s: head dimension %d is odd, or %d heads are too many", req.Op, f.HeadDim, f.Heads)
		}
		n := 4 * req.Rows * f.Heads * f.HeadDim
		if err := step(2*n+2*f.HeadDim, 0); err != nil {
			return err
		}
		return want(n, 2*f.HeadDim)
	case OpAttention:
		if err := dims(req.Rows, f.Heads, f.KVHeads, f.HeadDim); err != nil {
			return err
		}
		if f.Heads%f.KVHeads != 0 || req.Rows > AttnMaxT || f.HeadDim > AttnMaxD || f.Heads > 1<<16 {
			return fmt.Errorf("%s: %d heads are not a multiple of %d KV heads, or %d tokens exceed %d, or head dimension %d exceeds %d", req.Op, f.Heads, f.KVHeads, req.Rows, AttnMaxT, f.HeadDim, AttnMaxD)
		}
		q, kv := 4*req.Rows*f.Heads*f.HeadDim, 4*req.Rows*f.KVHeads*f.HeadDim
		if err := step(2*q+2*kv, 0); err != nil {
			return err
		}
		return want(q, kv, kv)
	case OpSwiGLU:
		if len(parts) != 2 || len(parts[0]) == 0 || len(parts[0])%4 != 0 {
			return fmt.Errorf("%s: want two parts of float32 values", req.Op)
		}
		if err := step(3*int64(len(parts[0])), 0); err != nil {
			return err
		}
		return want(int64(len(parts[0])), int64(len(parts[0])))
	case OpChannelStats, OpBlockHessians:
		if err := dims(req.Rows, req.Cols); err != nil {
			return err
		}
		out := 12 * req.Cols
		if req.Op == OpBlockHessians {
			if req.Cols%16 != 0 {
				return fmt.Errorf("%s: %d columns are not whole 16-wide blocks", req.Op, req.Cols)
			}
			out = 4 * 16 * req.Cols
		}
		if err := step(4*req.Rows*req.Cols, out); err != nil {
			return err
		}
		return want(4 * req.Rows * req.Cols)
	case OpAbsHist:
		if f.Bins <= 0 || f.Bins > HistMaxBin || !(f.Max > 0 && f.Max <= math.MaxFloat32) {
			return fmt.Errorf("%s: %d bins (1..%d) over [0, %g] (max must be positive and finite)", req.Op, f.Bins, HistMaxBin, f.Max)
		}
		if len(parts) != 1 || len(parts[0])%4 != 0 {
			return fmt.Errorf("%s: want one part of float32 values", req.Op)
		}
		return step(int64(len(parts[0])), 8*f.Bins)
	}
	return fmt.Errorf("unknown operation %q", req.Op)
}
