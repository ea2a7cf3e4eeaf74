package cuda

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"

	"github.com/quantscope/quantscope/kernels"
	"github.com/quantscope/quantscope/kernels/cpu"
	"github.com/quantscope/quantscope/kernels/cuda/wire"
)

// The forward pass's and the calibration passes' operations on the GPU:
// the W4A-NVFP4 GEMM, the Llama layer's other ops and the calibration
// reductions. Each falls back to the CPU backend (its errors too) as the
// other operations do; a request larger than the worker's staging runs on
// the CPU with a line saying so.

// tooBig logs and reports a request over the worker's one-step limit.
func (b *Backend) tooBig(op string, bytes int64) bool {
	if bytes > wire.MaxStep {
		b.logf("cuda: %s runs on the CPU: %d MiB exceeds the worker's %d MiB staging", op, bytes>>20, wire.MaxStep>>20)
		return true
	}
	return false
}

// noGPU reports a backend whose worker never said hello (Open logged why
// once): the forward's many small operations then run on the CPU at once,
// instead of starting a worker, and logging, at each of them.
func (b *Backend) noGPU() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.gpu == nil
}

// fellBack reports whether err asks for the CPU.
func fellBack(err error) bool {
	_, ok := err.(*errFallback)
	return ok
}

// gemm runs a W4A GEMM request (req.T tokens, req.N outputs) on a worker
// and returns its [T, N] output plus the bias; when the call falls back,
// cpuRun's answer.
func (b *Backend) gemm(ctx context.Context, need int64, req wire.Request, bias []float32, cpuRun func() (kernels.Matrix, error), parts ...[]byte) (kernels.Matrix, error) {
	r, out, err := b.call(ctx, need, req, parts...)
	if err != nil {
		if fellBack(err) {
			return cpuRun()
		}
		return kernels.Matrix{}, err
	}
	T, N := int(req.T), int(req.N)
	y, err := bytesF32(out, 0, T*N, r)
	if err != nil {
		return kernels.Matrix{}, err
	}
	for t := range T {
		for n, v := range bias {
			y[t*N+n] += v
		}
	}
	return kernels.Matrix{Rows: T, Cols: N, Data: y}, nil
}

// W4ANVFP4Linear runs the W4A-NVFP4 GEMM on the GPU: the activation's E2M1
// codes and the INT4 weight codes cross as nibbles, the block scales as
// E4M3 codes; the bias is added here, after the global scale, as the CPU does.
func (b *Backend) W4ANVFP4Linear(ctx context.Context, a *kernels.NVFP4Tokens, w *kernels.W4AWeight) (kernels.Matrix, error) {
	return b.w4aNVFP4(ctx, a, w, wire.OpW4ANVFP4)
}

// W4ANVFP4LinearTC runs the W4A-NVFP4 GEMM with the tensor-core kernel
// (w4a_nvfp4_tc.cu). Not yet run on a GPU: W4ANVFP4Linear keeps the
// CUDA-core kernel until TestGPUParityW4ANVFP4TensorCore has passed on one.
// Its outputs are the CPU's bit for bit unless a group's plane sums pass
// FP32's 24 bits (within the bound that test states).
func (b *Backend) W4ANVFP4LinearTC(ctx context.Context, a *kernels.NVFP4Tokens, w *kernels.W4AWeight) (kernels.Matrix, error) {
	return b.w4aNVFP4(ctx, a, w, wire.OpW4ANVFP4TC)
}

func (b *Backend) w4aNVFP4(ctx context.Context, a *kernels.NVFP4Tokens, w *kernels.W4AWeight, op string) (kernels.Matrix, error) {
	cpuRun := func() (kernels.Matrix, error) { return b.Backend.W4ANVFP4Linear(ctx, a, w) }
	if b.noGPU() {
		return cpuRun()
	}
	if a == nil || w == nil || a.Rows <= 0 || a.Cols != w.In || w.In%kernels.W4AGroup != 0 || w.Out <= 0 || w.Out%32 != 0 ||
		len(a.Codes) != a.Rows*a.Cols || len(a.Scales) != a.Rows*a.Cols/16 || len(w.Codes) != w.In*w.Out ||
		len(w.Scales) != w.In/kernels.W4AGroup*w.Out || (w.Bias != nil && len(w.Bias) != w.Out) ||
		!(a.Global > 0 && a.Global <= math.MaxFloat32) {
		return cpuRun() // empty input, or the CPU's error
	}
	T, K, N := a.Rows, a.Cols, w.Out
	if int64(K) > wire.W4AMaxK || T > wire.W4AMaxT || b.tooBig(op, wire.W4ANVFP4Bytes(int64(T), int64(K), int64(N))) {
		return cpuRun()
	}
	codes := make([]byte, len(a.Codes)/2)
	for i := range codes {
		codes[i] = a.Codes[2*i]&15 | a.Codes[2*i+1]<<4
	}
	q, ok := int4Nibbles(w.Codes)
	if !ok {
		return cpuRun()
	}
	req := wire.Request{Op: op, T: int64(T), K: int64(K), N: int64(N), Global: a.Global}
	return b.gemm(ctx, wire.W4ANVFP4Bytes(int64(T), int64(K), int64(N)), req, w.Bias, cpuRun, codes, a.Scales, q, f32Bytes(w.Scales))
}

// int4Nibbles packs centred codes c ∈ [−8, 7] as q = c + 8, element 2j in
// the low nibble of byte j; false when a code is out of range.
func int4Nibbles(c []int8) ([]byte, bool) {
	q := make([]byte, len(c)/2)
	for i := range q {
		lo, hi := c[2*i], c[2*i+1]
		if lo < -8 || lo > 7 || hi < -8 || hi > 7 {
			return nil, false
		}
		q[i] = byte(lo+8) | byte(hi+8)<<4
	}
	return q, true
}

// RMSNorm runs LlamaRMSNorm on the GPU (float64 sum of squares as a block
// reduction: within 4 float32 ulps of the CPU's, see llama.cu).
func (b *Backend) RMSNorm(ctx context.Context, x kernels.Matrix, w []float32, eps float32) (kernels.Matrix, error) {
	cpuRun := func() (kernels.Matrix, error) { return b.Backend.RMSNorm(ctx, x, w, eps) }
	if b.noGPU() {
		return cpuRun()
	}
	if x.Rows <= 0 || x.Cols <= 0 || len(x.Data) != x.Rows*x.Cols || len(w) != x.Cols || !(eps >= 0 && eps <= math.MaxFloat32) ||
		b.tooBig(wire.OpRMSNorm, 8*int64(len(x.Data))+4*int64(len(w))) {
		return cpuRun()
	}
	req := wire.Request{Op: wire.OpRMSNorm, Rows: int64(x.Rows), Cols: int64(x.Cols), Fwd: &wire.Fwd{Eps: eps}}
	return b.matrixCall(ctx, req, x.Rows, x.Cols, cpuRun, f32Bytes(x.Data), f32Bytes(w))
}

// RoPE rotates x's heads on the GPU (cos and sin in CUDA's double
// precision: see llama.cu for the bound).
func (b *Backend) RoPE(ctx context.Context, x kernels.Matrix, heads, d int, inv []float32) (kernels.Matrix, error) {
	cpuRun := func() (kernels.Matrix, error) { return b.Backend.RoPE(ctx, x, heads, d, inv) }
	if b.noGPU() {
		return cpuRun()
	}
	if x.Rows <= 0 || cpu.CheckRoPE(x, heads, d, inv) != nil || b.tooBig(wire.OpRoPE, 8*int64(len(x.Data))) {
		return cpuRun()
	}
	req := wire.Request{Op: wire.OpRoPE, Rows: int64(x.Rows), Fwd: &wire.Fwd{Heads: int64(heads), HeadDim: int64(d)}}
	return b.matrixCall(ctx, req, x.Rows, x.Cols, cpuRun, f32Bytes(x.Data), f32Bytes(inv))
}

// Attention runs causal GQA attention on the GPU, one thread block a
// (query, head), up to wire.AttnMaxT tokens and head dimension AttnMaxD.
func (b *Backend) Attention(ctx context.Context, q, k, v kernels.Matrix, heads, kvHeads, d int) (kernels.Matrix, error) {
	cpuRun := func() (kernels.Matrix, error) { return b.Backend.Attention(ctx, q, k, v, heads, kvHeads, d) }
	if b.noGPU() {
		return cpuRun()
	}
	if q.Rows <= 0 || cpu.CheckAttention(q, k, v, heads, kvHeads, d) != nil {
		return cpuRun()
	}
	if q.Rows > wire.AttnMaxT || d > wire.AttnMaxD || heads > 1<<16 {
		b.logf("cuda: attention runs on the CPU: %d tokens, head dimension %d (the kernel takes up to %d, %d)", q.Rows, d, wire.AttnMaxT, wire.AttnMaxD)
		return cpuRun()
	}
	if b.tooBig(wire.OpAttention, 8*int64(len(q.Data))+8*int64(len(k.Data))) {
		return cpuRun()
	}
	req := wire.Request{Op: wire.OpAttention, Rows: int64(q.Rows), Fwd: &wire.Fwd{Heads: int64(heads), KVHeads: int64(kvHeads), HeadDim: int64(d)}}
	return b.matrixCall(ctx, req, q.Rows, q.Cols, cpuRun, f32Bytes(q.Data), f32Bytes(k.Data), f32Bytes(v.Data))
}

// SwiGLU computes silu(g)·u on the GPU.
func (b *Backend) SwiGLU(ctx context.Context, g, u kernels.Matrix) (kernels.Matrix, error) {
	cpuRun := func() (kernels.Matrix, error) { return b.Backend.SwiGLU(ctx, g, u) }
	if b.noGPU() {
		return cpuRun()
	}
	if len(g.Data) == 0 || len(g.Data) != g.Rows*g.Cols || g.Rows != u.Rows || g.Cols != u.Cols || len(u.Data) != len(g.Data) ||
		b.tooBig(wire.OpSwiGLU, 12*int64(len(g.Data))) {
		return cpuRun()
	}
	return b.matrixCall(ctx, wire.Request{Op: wire.OpSwiGLU}, g.Rows, g.Cols, cpuRun, f32Bytes(g.Data), f32Bytes(u.Data))
}

// matrixCall runs a request answered by one float32 [rows, cols] part.
func (b *Backend) matrixCall(ctx context.Context, req wire.Request, rows, cols int, cpuRun func() (kernels.Matrix, error), parts ...[]byte) (kernels.Matrix, error) {
	var need int64
	for _, p := range parts {
		need += int64(len(p))
	}
	r, out, err := b.call(ctx, need+4*int64(rows*cols), req, parts...)
	if err != nil {
		if fellBack(err) {
			return cpuRun()
		}
		return kernels.Matrix{}, err
	}
	y, err := bytesF32(out, 0, rows*cols, r)
	return kernels.Matrix{Rows: rows, Cols: cols, Data: y}, err
}

// ChannelStats reduces x's columns on the GPU (exact: one thread a column,
// rows in order).
func (b *Backend) ChannelStats(ctx context.Context, x kernels.Matrix) ([]float32, []float64, error) {
	cpuRun := func() ([]float32, []float64, error) { return b.Backend.ChannelStats(ctx, x) }
	if b.noGPU() {
		return cpuRun()
	}
	if x.Rows <= 0 || x.Cols <= 0 || len(x.Data) != x.Rows*x.Cols || b.tooBig(wire.OpChannelStats, 4*int64(len(x.Data))+12*int64(x.Cols)) {
		return cpuRun()
	}
	req := wire.Request{Op: wire.OpChannelStats, Rows: int64(x.Rows), Cols: int64(x.Cols)}
	r, out, err := b.call(ctx, 4*int64(len(x.Data))+12*int64(x.Cols), req, f32Bytes(x.Data))
	if err != nil {
		if fellBack(err) {
			return cpuRun()
		}
		return nil, nil, err
	}
	amax, err := bytesF32(out, 0, x.Cols, r)
	if err != nil {
		return nil, nil, err
	}
	if len(out) != 2 || len(out[1]) != 8*x.Cols {
		return nil, nil, fmt.Errorf("cuda: channel_stats: response %d lacks the %d sums", r.ID, x.Cols)
	}
	sum := make([]float64, x.Cols)
	for i := range sum {
		sum[i] = math.Float64frombits(binary.LittleEndian.Uint64(out[1][8*i:]))
	}
	return amax, sum, nil
}

// BlockHessians computes local_hessian's block second moments on the GPU
// (exact: one thread an entry, rows in order). Non-finite activations, and
// ones whose moments might overflow, go to the CPU, whose error names them.
func (b *Backend) BlockHessians(ctx context.Context, x kernels.Matrix) ([]float32, error) {
	cpuRun := func() ([]float32, error) { return b.Backend.BlockHessians(ctx, x) }
	if b.noGPU() {
		return cpuRun()
	}
	if x.Rows <= 0 || x.Cols <= 0 || x.Cols%16 != 0 || len(x.Data) != x.Rows*x.Cols || b.tooBig(wire.OpBlockHessians, 4*int64(len(x.Data))+64*int64(x.Cols)) {
		return cpuRun()
	}
	if xa, ok := finiteAmax(x.Data); !ok || momentsMayOverflow(xa, x.Rows) {
		return cpuRun()
	}
	req := wire.Request{Op: wire.OpBlockHessians, Rows: int64(x.Rows), Cols: int64(x.Cols)}
	r, out, err := b.call(ctx, 4*int64(len(x.Data))+64*int64(x.Cols), req, f32Bytes(x.Data))
	if err != nil {
		if fellBack(err) {
			return cpuRun()
		}
		return nil, err
	}
	return bytesF32(out, 0, 16*x.Cols, r)
}

// AbsHistogram counts |x| in bins on the GPU (integer counts: exact).
func (b *Backend) AbsHistogram(ctx context.Context, x []float32, mx float32, bins int) ([]int64, error) {
	cpuRun := func() ([]int64, error) { return b.Backend.AbsHistogram(ctx, x, mx, bins) }
	if b.noGPU() {
		return cpuRun()
	}
	if len(x) == 0 || bins <= 0 || bins > wire.HistMaxBin || !(mx > 0 && mx <= math.MaxFloat32) || b.tooBig(wire.OpAbsHist, 4*int64(len(x))+8*int64(bins)) {
		return cpuRun()
	}
	req := wire.Request{Op: wire.OpAbsHist, Fwd: &wire.Fwd{Max: mx, Bins: int64(bins)}}
	r, out, err := b.call(ctx, 4*int64(len(x))+8*int64(bins), req, f32Bytes(x))
	if err != nil {
		if fellBack(err) {
			return cpuRun()
		}
		return nil, err
	}
	if len(out) != 1 || len(out[0]) != 8*bins {
		return nil, fmt.Errorf("cuda: abs_hist: response %d: want %d counts, got parts %v", r.ID, bins, r.Parts)
	}
	h := make([]int64, bins)
	for i := range h {
		h[i] = int64(binary.LittleEndian.Uint64(out[0][8*i:]))
	}
	return h, nil
}

var (
	_ kernels.LlamaOps        = (*Backend)(nil)
	_ kernels.CalibReductions = (*Backend)(nil)
)

// W4AFP8LinearTC runs the W4A-FP8 GEMM with the tensor-core kernel
// (w4a_fp8_tc.cu). Not yet run on a GPU: W4AFP8Linear keeps the CUDA-core
// kernel until TestGPUParityW4AFP8TensorCore has passed on one. Its outputs
// are the CPU's within W4AFP8TCBound (bit for bit unless a group's partial
// sums pass FP32's 24 bits).
func (b *Backend) W4AFP8LinearTC(ctx context.Context, a *kernels.FP8Tokens, w *kernels.W4AWeight) (kernels.Matrix, error) {
	cpuRun := func() (kernels.Matrix, error) { return b.Backend.W4AFP8Linear(ctx, a, w) }
	if b.noGPU() {
		return cpuRun()
	}
	if a == nil || w == nil || a.Rows <= 0 || a.Cols != w.In || w.In%kernels.W4AGroup != 0 || w.Out <= 0 || w.Out%32 != 0 ||
		len(a.Codes) != a.Rows*a.Cols || len(a.Scales) != a.Rows || len(w.Codes) != w.In*w.Out ||
		len(w.Scales) != w.In/kernels.W4AGroup*w.Out || (w.Bias != nil && len(w.Bias) != w.Out) {
		return cpuRun()
	}
	T, K, N := a.Rows, a.Cols, w.Out
	if int64(K) > wire.W4AMaxK || T > wire.W4AMaxT || b.tooBig(wire.OpW4AFP8TC, wire.W4ABytes(int64(T), int64(K), int64(N))) {
		return cpuRun()
	}
	q, ok := int4Nibbles(w.Codes)
	if !ok {
		return cpuRun()
	}
	req := wire.Request{Op: wire.OpW4AFP8TC, T: int64(T), K: int64(K), N: int64(N)}
	return b.gemm(ctx, wire.W4ABytes(int64(T), int64(K), int64(N)), req, w.Bias, cpuRun, a.Codes, f32Bytes(a.Scales), q, f32Bytes(w.Scales))
}
