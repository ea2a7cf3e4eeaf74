package cuda

import (
	"context"
	"math/rand/v2"
	"testing"

	"github.com/quantscope/quantscope/kernels/cuda/wire"
)

// The GPU benchmarks time one request on the worker (Response.Millis: from
// its receipt to its answer, so staging and PCIe copies both ways are
// included, the pipe is not), reported as worker-ms/op and as GB/s of the
// bytes produced (dequantize) or consumed (quantize). gpu-check.sh sets
// these against the device's copy bandwidth measured by torch.

func benchCall(b *testing.B, req wire.Request, bytes int64, parts ...[]byte) {
	be := gpuBackend(b)
	var ms float64
	b.SetBytes(bytes)
	b.ResetTimer()
	for range b.N {
		r, _, err := be.w.Call(context.Background(), req, parts...)
		if err != nil {
			b.Fatal(err)
		}
		ms += r.Millis
	}
	b.ReportMetric(ms/float64(b.N), "worker-ms/op")
	b.ReportMetric(float64(bytes)/(ms/float64(b.N))/1e6, "worker-GB/s")
}

func randBytes(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, seed))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// BenchmarkGPUDequantNVFP4 decodes an 8192×4096 NVFP4 weight to float32.
func BenchmarkGPUDequantNVFP4(b *testing.B) {
	gpuBackend(b) // skips before the inputs are made
	n := 8192 * 4096
	sc := randBytes(n/16, 2)
	for i := range sc {
		sc[i] &= 0x7F
	}
	benchCall(b, wire.Request{Op: wire.OpDequantNVFP4, Global: 0.01}, int64(4*n), randBytes(n/2, 1), sc)
}

// BenchmarkGPUQuantNVFP4 quantizes an 8192×4096 weight with the max recipe
// and with the mse sweep (ModelOpt reports 4.23 ms for the sweep on a B300).
func BenchmarkGPUQuantNVFP4(b *testing.B) {
	gpuBackend(b)
	w := wideWeight(8192, 4096, 3)
	for _, recipe := range []string{"max", "mse"} {
		b.Run(recipe, func(b *testing.B) {
			benchCall(b, wire.Request{Op: wire.OpQuantNVFP4, Rows: 8192, Cols: 4096, Recipe: recipe, Global: 0x1p-10}, int64(4*len(w.Data)), f32Bytes(w.Data))
		})
	}
}

// BenchmarkGPUW4AFP8 is the W4A-FP8 GEMM of 2048 tokens through a
// 4096→4096 linear; worker-TFLOP/s counts 2·T·K·N.
func BenchmarkGPUW4AFP8(b *testing.B) { benchW4AFP8(b, wire.OpW4AFP8) }

func benchW4AFP8(b *testing.B, op string) {
	be := gpuBackend(b)
	T, K, N := 2048, 4096, 4096
	as := make([]float32, T)
	ws := make([]float32, N*K/128)
	for i := range as {
		as[i] = 0.01
	}
	for i := range ws {
		ws[i] = 0.001
	}
	codes := randBytes(T*K, 4)
	for i := range codes {
		codes[i] &^= 0x78 // no NaN codes
	}
	req := wire.Request{Op: op, T: int64(T), K: int64(K), N: int64(N)}
	benchGEMM(b, be, req, codes, f32Bytes(as), randBytes(N*K/2, 5), f32Bytes(ws))
}

// benchGEMM times a GEMM request on the worker and reports its own time
// and 2·T·K·N over it.
func benchGEMM(b *testing.B, be *Backend, req wire.Request, parts ...[]byte) {
	b.ResetTimer()
	var ms float64
	for range b.N {
		r, _, err := be.w.Call(context.Background(), req, parts...)
		if err != nil {
			b.Fatal(err)
		}
		ms += r.Millis
	}
	ms /= float64(b.N)
	b.ReportMetric(ms, "worker-ms/op")
	b.ReportMetric(2*float64(req.T)*float64(req.K)*float64(req.N)/ms/1e9, "worker-TFLOP/s")
}

// BenchmarkGPUQuantFP8 quantizes an 8192×4096 weight to FP8 (quant2.go):
// row scales, 128×128 blocks, and a tensor scale (three passes).
func BenchmarkGPUQuantFP8(b *testing.B) {
	gpuBackend(b)
	w := f32Bytes(wideWeight(8192, 4096, 3).Data)
	for _, c := range []struct {
		name string
		req  wire.Request
	}{
		{"e4m3-row-inv", wire.Request{Op: wire.OpQuantFP8, Rows: 8192, Cols: 4096, R: 1, C: 4096, Inv: true}},
		{"e4m3-block128", wire.Request{Op: wire.OpQuantFP8, Rows: 8192, Cols: 4096, R: 128, C: 128}},
		{"e5m2-tensor", wire.Request{Op: wire.OpQuantFP8, Rows: 8192, Cols: 4096, R: 8192, C: 4096, E5M2: true}},
	} {
		b.Run(c.name, func(b *testing.B) { benchCall(b, c.req, int64(len(w)), w) })
	}
}

// BenchmarkGPUQuantNVFP4Recipes quantizes an 8192×4096 weight with
// four_six, least_squares and local_hessian (512 tokens of activations).
func BenchmarkGPUQuantNVFP4Recipes(b *testing.B) {
	gpuBackend(b)
	w := f32Bytes(wideWeight(8192, 4096, 3).Data)
	x := f32Bytes(testActivations(512, 4096, 1).Data)
	for _, recipe := range []string{"four_six", "least_squares"} {
		b.Run(recipe, func(b *testing.B) {
			benchCall(b, wire.Request{Op: wire.OpQuantNVFP4GPTQ, Rows: 8192, Cols: 4096, Recipe: recipe, Global: 0x1p-10}, int64(len(w)), w)
		})
	}
	b.Run("local_hessian", func(b *testing.B) {
		benchCall(b, wire.Request{Op: wire.OpQuantNVFP4LH, Rows: 8192, Cols: 4096, T: 512, Global: 0x1p-10}, int64(len(w)), w, x)
	})
}

// BenchmarkGPUW4ANVFP4 is the W4A-NVFP4 GEMM of 2048 tokens through a
// 4096→4096 linear; worker-TFLOP/s counts 2·T·K·N.
func BenchmarkGPUW4ANVFP4(b *testing.B) { benchW4ANVFP4(b, wire.OpW4ANVFP4) }

// BenchmarkGPUW4ANVFP4TC is the same GEMM on the tensor-core kernel.
func BenchmarkGPUW4ANVFP4TC(b *testing.B) { benchW4ANVFP4(b, wire.OpW4ANVFP4TC) }

func benchW4ANVFP4(b *testing.B, op string) {
	be := gpuBackend(b)
	T, K, N := 2048, 4096, 4096
	ws := make([]float32, N*K/128)
	for i := range ws {
		ws[i] = 0.001
	}
	sc := randBytes(T*K/16, 6)
	for i := range sc {
		sc[i] &= 0x77 // positive, no NaN code
	}
	req := wire.Request{Op: op, T: int64(T), K: int64(K), N: int64(N), Global: 0.01}
	codes, wq := randBytes(T*K/2, 7), randBytes(N*K/2, 8)
	benchGEMM(b, be, req, codes, sc, wq, f32Bytes(ws))
}

// BenchmarkGPUW4AFP8TC is BenchmarkGPUW4AFP8's GEMM on the tensor-core kernel.
func BenchmarkGPUW4AFP8TC(b *testing.B) { benchW4AFP8(b, wire.OpW4AFP8TC) }
