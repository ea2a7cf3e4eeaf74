package cuda

import (
	"context"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/quantscope/quantscope/kernels"
	"github.com/quantscope/quantscope/kernels/cpu"
	"github.com/quantscope/quantscope/kernels/cuda/wire"
)

// fakeForward answers the forward and calibration operations on the CPU
// backend from the wire's parts, decoding them as the kernels read them.
func fakeForward(be *cpu.Backend, req wire.Request, parts [][]byte) (wire.Response, [][]byte, bool, error) {
	ctx := context.Background()
	f := req.Fwd
	if f == nil {
		f = &wire.Fwd{}
	}
	mat := func(b []byte, rows int) kernels.Matrix {
		v := f32s(b)
		return kernels.Matrix{Rows: rows, Cols: len(v) / rows, Data: v}
	}
	ans := func(m kernels.Matrix, err error) (wire.Response, [][]byte, bool, error) {
		return wire.Response{}, [][]byte{f32Bytes(m.Data)}, true, err
	}
	switch req.Op {
	case wire.OpW4ANVFP4, wire.OpW4ANVFP4TC:
		T, K, N := int(req.T), int(req.K), int(req.N)
		a := &kernels.NVFP4Tokens{Rows: T, Cols: K, Codes: make([]byte, T*K), Scales: parts[1], Global: req.Global}
		for i, b := range parts[0] {
			a.Codes[2*i], a.Codes[2*i+1] = b&15, b>>4
		}
		w := &kernels.W4AWeight{Name: "fake", In: K, Out: N, Codes: make([]int8, N*K), Scales: f32s(parts[3])}
		for i, b := range parts[2] {
			w.Codes[2*i], w.Codes[2*i+1] = int8(b&15)-8, int8(b>>4)-8
		}
		return ans(be.W4ANVFP4Linear(ctx, a, w))
	case wire.OpW4AFP8TC:
		T, K, N := int(req.T), int(req.K), int(req.N)
		w := &kernels.W4AWeight{Name: "fake", In: K, Out: N, Codes: make([]int8, N*K), Scales: f32s(parts[3])}
		for i, b := range parts[2] {
			w.Codes[2*i], w.Codes[2*i+1] = int8(b&15)-8, int8(b>>4)-8
		}
		return ans(be.W4AFP8Linear(ctx, &kernels.FP8Tokens{Rows: T, Cols: K, Codes: parts[0], Scales: f32s(parts[1])}, w))
	case wire.OpRMSNorm:
		return ans(be.RMSNorm(ctx, mat(parts[0], int(req.Rows)), f32s(parts[1]), f.Eps))
	case wire.OpRoPE:
		return ans(be.RoPE(ctx, mat(parts[0], int(req.Rows)), int(f.Heads), int(f.HeadDim), f32s(parts[1])))
	case wire.OpAttention:
		T := int(req.Rows)
		return ans(be.Attention(ctx, mat(parts[0], T), mat(parts[1], T), mat(parts[2], T), int(f.Heads), int(f.KVHeads), int(f.HeadDim)))
	case wire.OpSwiGLU:
		return ans(be.SwiGLU(ctx, mat(parts[0], 1), mat(parts[1], 1)))
	case wire.OpChannelStats:
		amax, sum, err := be.ChannelStats(ctx, mat(parts[0], int(req.Rows)))
		s := make([]byte, 8*len(sum))
		for i, v := range sum {
			binary.LittleEndian.PutUint64(s[8*i:], math.Float64bits(v))
		}
		return wire.Response{}, [][]byte{f32Bytes(amax), s}, true, err
	case wire.OpBlockHessians:
		h, err := be.BlockHessians(ctx, mat(parts[0], int(req.Rows)))
		return wire.Response{}, [][]byte{f32Bytes(h)}, true, err
	case wire.OpAbsHist:
		h, err := be.AbsHistogram(ctx, f32s(parts[0]), f.Max, int(f.Bins))
		c := make([]byte, 8*len(h))
		for i, v := range h {
			binary.LittleEndian.PutUint64(c[8*i:], uint64(v))
		}
		return wire.Response{}, [][]byte{c}, true, err
	}
	return wire.Response{}, nil, false, nil
}

func randMat(r *rand.Rand, rows, cols int, spread int) kernels.Matrix {
	m := kernels.Matrix{Rows: rows, Cols: cols, Data: make([]float32, rows*cols)}
	for i := range m.Data {
		m.Data[i] = float32(r.NormFloat64() * math.Ldexp(1, r.IntN(spread+1)-spread/2))
	}
	return m
}

// w4aNVFP4Case is an activation quantized by the CPU and a weight with a bias.
func w4aNVFP4Case(r *rand.Rand, T, K, N int, recipe string) (*kernels.NVFP4Tokens, *kernels.W4AWeight) {
	x := randMat(r, T, K, 24)
	a, err := cpu.New().W4ANVFP4Quantize(context.Background(), x, recipe, 0)
	if err != nil {
		panic(err)
	}
	w := &kernels.W4AWeight{Name: "m", In: K, Out: N, Codes: make([]int8, N*K), Scales: make([]float32, N*K/128), Bias: make([]float32, N)}
	for i := range w.Codes {
		w.Codes[i] = int8(r.IntN(16) - 8)
	}
	for i := range w.Scales {
		w.Scales[i] = float32(math.Ldexp(r.Float64()+0.5, -r.IntN(12)))
	}
	for i := range w.Bias {
		w.Bias[i] = float32(r.NormFloat64())
	}
	return a, w
}

// TestFakeWorkerForward sends the forward and calibration operations
// through the client's packing, the wire and back: equal to the CPU's.
func TestFakeWorkerForward(t *testing.T) {
	b, l := openFake(t, "cpu")
	ref := cpu.New()
	ctx := context.Background()
	r := rand.New(rand.NewPCG(31, 1))

	a, w := w4aNVFP4Case(r, 3, 256, 64, kernels.ActLeastSquares)
	got, err := b.W4ANVFP4Linear(ctx, a, w)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := ref.W4ANVFP4Linear(ctx, a, w)
	sameF32(t, "w4a_nvfp4", got.Data, want.Data)
	if got, err = b.W4ANVFP4LinearTC(ctx, a, w); err != nil {
		t.Fatal(err)
	}
	sameF32(t, "w4a_nvfp4_tc", got.Data, want.Data)

	fa, err := ref.W4AFP8Quantize(ctx, randMat(r, 3, 256, 12))
	if err != nil {
		t.Fatal(err)
	}
	got, err = b.W4AFP8LinearTC(ctx, fa, w)
	if err != nil {
		t.Fatal(err)
	}
	want, _ = ref.W4AFP8Linear(ctx, fa, w)
	sameF32(t, "w4a_fp8_tc", got.Data, want.Data)

	x, nw := randMat(r, 5, 64, 8), randMat(r, 1, 64, 2).Data
	got, err = b.RMSNorm(ctx, x, nw, 1e-6)
	if err != nil {
		t.Fatal(err)
	}
	want, _ = ref.RMSNorm(ctx, x, nw, 1e-6)
	sameF32(t, "rms_norm", got.Data, want.Data)

	inv := []float32{1, 0.1, 0.01, 0.001}
	x = randMat(r, 6, 3*8, 4)
	got, err = b.RoPE(ctx, x, 3, 8, inv)
	if err != nil {
		t.Fatal(err)
	}
	want, _ = ref.RoPE(ctx, x, 3, 8, inv)
	sameF32(t, "rope", got.Data, want.Data)

	q, k, v := randMat(r, 7, 4*16, 4), randMat(r, 7, 2*16, 4), randMat(r, 7, 2*16, 4)
	got, err = b.Attention(ctx, q, k, v, 4, 2, 16)
	if err != nil {
		t.Fatal(err)
	}
	want, _ = ref.Attention(ctx, q, k, v, 4, 2, 16)
	sameF32(t, "attention", got.Data, want.Data)

	g, u := randMat(r, 4, 9, 6), randMat(r, 4, 9, 2)
	got, err = b.SwiGLU(ctx, g, u)
	if err != nil {
		t.Fatal(err)
	}
	want, _ = ref.SwiGLU(ctx, g, u)
	sameF32(t, "swiglu", got.Data, want.Data)

	x = randMat(r, 9, 32, 20)
	sameCalib(t, b, x, 100)
	if l.n() != 0 {
		t.Fatalf("fell back to the CPU: %s", l.all())
	}
	// the CPU's errors come back as they are
	if _, err := b.RoPE(ctx, x, 3, 8, inv); err == nil {
		t.Fatal("rope of a [9, 32] matrix as 3 heads of 8: no error")
	}
	if _, err := b.Attention(ctx, q, k, v, 3, 2, 16); err == nil {
		t.Fatal("attention with 3 heads over 2 KV heads: no error")
	}
}

// TestNoGPUForwardOps: when the worker never said hello (no GPU), the
// forward's operations run on the CPU at once: Open's one line, no worker
// started and no line for each operation.
func TestNoGPUForwardOps(t *testing.T) {
	b, l := openFake(t, "text")
	if l.n() != 1 {
		t.Fatalf("Open logged %d lines: %s", l.n(), l.all())
	}
	ctx := context.Background()
	r := rand.New(rand.NewPCG(32, 1))
	x, w := randMat(r, 3, 16, 4), randMat(r, 1, 16, 1).Data
	for range 20 {
		got, err := b.RMSNorm(ctx, x, w, 1e-5)
		if err != nil {
			t.Fatal(err)
		}
		sameF32(t, "rms_norm", got.Data, cpu.RMSNorm(x, w, 1e-5).Data)
	}
	if _, err := b.SwiGLU(ctx, x, x); err != nil {
		t.Fatal(err)
	}
	if l.n() != 1 {
		t.Fatalf("the operations logged: %s", l.all())
	}
}

// sameCalib checks b's calibration reductions of x against the CPU's, bit
// for bit: channel amax and Σ|x|, the block second moments, and the |x|
// histogram in bins over [0, max] for max the first channel's amax and
// each of more.
func sameCalib(t *testing.T, b kernels.CalibReductions, x kernels.Matrix, bins int, more ...float32) {
	t.Helper()
	ctx := context.Background()
	ref := cpu.New()
	am, as, err := b.ChannelStats(ctx, x)
	if err != nil {
		t.Fatal(err)
	}
	wm, ws, _ := ref.ChannelStats(ctx, x)
	sameF32(t, "channel amax", am, wm)
	for i := range ws {
		if as[i] != ws[i] {
			t.Fatalf("channel %d: Σ|x| %g, CPU %g", i, as[i], ws[i])
		}
	}
	h, err := b.BlockHessians(ctx, x)
	if err != nil {
		t.Fatal(err)
	}
	wh, _ := ref.BlockHessians(ctx, x)
	sameF32(t, "block_hessians", h, wh)
	for _, mx := range append([]float32{wm[0]}, more...) {
		hc, err := b.AbsHistogram(ctx, x.Data, mx, bins)
		if err != nil {
			t.Fatal(err)
		}
		wc, _ := ref.AbsHistogram(ctx, x.Data, mx, bins)
		for i := range wc {
			if hc[i] != wc[i] {
				t.Fatalf("max %g: bin %d counts %d, CPU %d", mx, i, hc[i], wc[i])
			}
		}
	}
}
