package ptx

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/quantscope/quantscope/kernels"
	"github.com/quantscope/quantscope/kernels/cpu"
	"github.com/quantscope/quantscope/kernels/cuda"
)

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
	withinTC(t, got, want.Data, cuda.W4AFP8TCBound(a, w), N)
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
	withinTC(t, got, want.Data, cuda.W4ANVFP4TCBound(a, w), N)
}

// withinTC asserts each output of a tensor-core kernel (N a row) within its
// stated bound of the CPU's, and logs how many are equal bit for bit.
func withinTC(t *testing.T, got, want []float32, bound []float64, N int) {
	t.Helper()
	same := 0
	for i := range want {
		if d := math.Abs(float64(got[i]) - float64(want[i])); !(d <= bound[i]) {
			t.Fatalf("output [%d, %d] is %g, CPU %g (|Δ| %g, bound %g)", i/N, i%N, got[i], want[i], d, bound[i])
		}
		if math.Float32bits(got[i]) == math.Float32bits(want[i]) {
			same++
		}
	}
	t.Logf("%d of %d outputs equal the CPU's bit for bit", same, len(want))
}
