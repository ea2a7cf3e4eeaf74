package ptx

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/quantscope/quantscope/formats/numeric"
	"github.com/quantscope/quantscope/kernels"
	"github.com/quantscope/quantscope/kernels/cpu"
)

// W4AFP8TCBound is the tensor-core W4A-FP8 kernel's stated tolerance
// against kernels/cpu: 2^-20 · s_t · Σ_g |scale_ng| · Σ_{i∈g} |a_ti·c_ni|.
// Each group sum is exact, or (its partial sums past FP32's 24 bits) a few
// FP32 roundings of terms bounded by Σ|a·c| off; the group terms and the
// token scale are then rounded as on the CPU.
func W4AFP8TCBound(a *kernels.FP8Tokens, w *kernels.W4AWeight) []float64 {
	T, K, N := a.Rows, a.Cols, w.Out
	groups := K / kernels.W4AGroup
	b := make([]float64, T*N)
	for t := range T {
		for n := range N {
			var s float64
			for g := range groups {
				var ac float64
				for i := g * 128; i < (g+1)*128; i++ {
					ac += math.Abs(float64(numeric.E4M3ToFloat32(a.Codes[t*K+i])) * float64(w.Codes[n*K+i]))
				}
				s += math.Abs(float64(w.Scales[n*groups+g])) * ac
			}
			b[t*N+n] = 0x1p-20 * float64(a.Scales[t]) * s
		}
	}
	return b
}

// hostTC builds testdata/host_tc.cpp: 128 threads a block, mma.sync
// emulated from the documented fragment layout.
func hostTC(t *testing.T) string {
	return buildHost(t, "host_tc", "c++20", []string{"w4a_fp8_tc.cu", "w4a_nvfp4_tc.cu"}, "-pthread")
}

// TestHostTensorCoreW4AFP8 runs the tensor-core kernel's host build against
// kernels/cpu on shapes with partial tiles (70 tokens, 96 outputs).
func TestHostTensorCoreW4AFP8(t *testing.T) {
	bin := hostTC(t)
	r := rand.New(rand.NewPCG(9, 10))
	T, K, N := 70, 512, 96
	x := w4aActs(r, T, K, 12)
	w := w4aWeight(r, K, N)
	be := cpu.New()
	a, err := be.W4AFP8Quantize(context.Background(), x)
	if err != nil {
		t.Fatal(err)
	}
	want, err := be.W4AFP8Linear(context.Background(), a, w)
	if err != nil {
		t.Fatal(err)
	}
	in := append(append(append(append([]byte{}, a.Codes...), f32b(a.Scales)...), w4aQ(w.Codes)...), f32b(w.Scales)...)
	got := f32s(runHost(t, bin, in, "w4a_tc", fmt.Sprint(T), fmt.Sprint(K), fmt.Sprint(N)))
	bound := W4AFP8TCBound(a, w)
	same := 0
	for i := range want.Data {
		if d := math.Abs(float64(got[i]) - float64(want.Data[i])); !(d <= bound[i]) {
			t.Fatalf("output [%d, %d] is %g, CPU %g (|Δ| %g, bound %g)", i/N, i%N, got[i], want.Data[i], d, bound[i])
		}
		if math.Float32bits(got[i]) == math.Float32bits(want.Data[i]) {
			same++
		}
	}
	t.Logf("%d of %d outputs equal the CPU's bit for bit", same, len(want.Data))
}

// W4ANVFP4TCBound is the tensor-core W4A-NVFP4 kernel's stated tolerance:
// 2^-20 · g · Σ_g |scale_ng| · Σ_{i∈g} |a_ti·s_b|·(|low_ni| + 4·|high_ni|).
func W4ANVFP4TCBound(a *kernels.NVFP4Tokens, w *kernels.W4AWeight) []float64 {
	T, K, N := a.Rows, a.Cols, w.Out
	groups := K / kernels.W4AGroup
	high, low := cpu.W4ANVFP4Planes(w.Codes)
	b := make([]float64, T*N)
	for t := range T {
		for n := range N {
			var s float64
			for g := range groups {
				var ac float64
				for i := g * 128; i < (g+1)*128; i++ {
					v := math.Abs(float64(numeric.E2M1ToFloat32(a.Codes[t*K+i]&15)) * float64(numeric.E4M3ToFloat32(a.Scales[(t*K+i)/16])))
					ac += v * (math.Abs(float64(low[n*K+i])) + 4*math.Abs(float64(high[n*K+i])))
				}
				s += math.Abs(float64(w.Scales[n*groups+g])) * ac
			}
			b[t*N+n] = 0x1p-20 * float64(a.Global) * s
		}
	}
	return b
}

// TestHostTensorCoreW4ANVFP4: the NVFP4 tensor-core kernel's host build
// against kernels/cpu, with partial tiles (70 tokens, 96 outputs).
func TestHostTensorCoreW4ANVFP4(t *testing.T) {
	bin := hostTC(t)
	r := rand.New(rand.NewPCG(11, 12))
	T, K, N := 70, 512, 96
	x := w4aActs(r, T, K, 12)
	w := w4aWeight(r, K, N)
	be := cpu.New()
	a, err := be.W4ANVFP4Quantize(context.Background(), x, kernels.ActLeastSquares, 0)
	if err != nil {
		t.Fatal(err)
	}
	want, err := be.W4ANVFP4Linear(context.Background(), a, w)
	if err != nil {
		t.Fatal(err)
	}
	in := append(append(append(nibbles(a.Codes), a.Scales...), w4aQ(w.Codes)...), f32b(w.Scales)...)
	got := f32s(runHost(t, bin, in, "w4a_nvfp4_tc", fmt.Sprint(T), fmt.Sprint(K), fmt.Sprint(N), fmt.Sprintf("%.9g", a.Global)))
	bound := W4ANVFP4TCBound(a, w)
	same := 0
	for i := range want.Data {
		if d := math.Abs(float64(got[i]) - float64(want.Data[i])); !(d <= bound[i]) {
			t.Fatalf("output [%d, %d] is %g, CPU %g (|Δ| %g, bound %g)", i/N, i%N, got[i], want.Data[i], d, bound[i])
		}
		if math.Float32bits(got[i]) == math.Float32bits(want.Data[i]) {
			same++
		}
	}
	t.Logf("%d of %d outputs equal the CPU's bit for bit", same, len(want.Data))
}
