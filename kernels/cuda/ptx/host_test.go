package ptx

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"os/exec"
	"testing"

	"github.com/quantscope/quantscope/formats/numeric"
	"github.com/quantscope/quantscope/formats/packing"
	"github.com/quantscope/quantscope/kernels"
	"github.com/quantscope/quantscope/kernels/cpu"
)

// testdata/host.cpp: the dequantization, NVFP4 quantize and W4A-FP8 kernels
// (see hostbuild_test.go).
func hostKernels(t *testing.T) string {
	return buildHost(t, "host", "c++17", []string{"dequant.cu", "nvfp4_quant.cu", "w4a_fp8.cu"})
}

func runHost(t *testing.T, bin string, in []byte, args ...string) []byte {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Stdin = bytes.NewReader(in)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("host %v: %v", args, err)
	}
	return out
}

func f32b(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

func sameBits(t *testing.T, what string, got []byte, want []float32) {
	t.Helper()
	if len(got) != 4*len(want) {
		t.Fatalf("%s: %d bytes, want %d values", what, len(got), len(want))
	}
	for i, w := range want {
		g := math.Float32frombits(binary.LittleEndian.Uint32(got[4*i:]))
		if math.Float32bits(g) != math.Float32bits(w) && !(g != g && w != w) {
			t.Fatalf("%s: value %d is %g, want %g", what, i, g, w)
		}
	}
}

func TestHostKernelsQuantizeNVFP4(t *testing.T) {
	bin := hostKernels(t)
	r := rand.New(rand.NewPCG(1, 2))
	rows, cols := 163, 256
	w := kernels.Matrix{Rows: rows, Cols: cols, Data: make([]float32, rows*cols)}
	for i := range w.Data {
		v := float32(r.NormFloat64() * math.Pow(2, float64((i/cols)%81-40)))
		switch r.IntN(16) {
		case 0:
			v = 0
		case 1:
			v = float32(math.Copysign(0, -1))
		case 2:
			v = float32(r.IntN(13)-6) * 0.25
		case 3:
			v = -1e-44 // a quotient that underflows to -0
		}
		w.Data[i] = v
	}
	var amax float32
	for _, v := range w.Data {
		amax = max(amax, float32(math.Abs(float64(v))))
	}
	s2 := amax / (6 * 448)
	for _, recipe := range []string{"max", "mse"} {
		want, err := cpu.New().QuantizeNVFP4(context.Background(), w, kernels.NVFP4Options{Recipe: recipe}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if want.Scale2 != s2 {
			t.Fatalf("global scale %g, the client's formula gives %g", want.Scale2, s2)
		}
		nb := rows * cols / 16
		got := runHost(t, bin, f32b(w.Data), recipe, fmt.Sprint(nb), fmt.Sprintf("%.9g", s2))
		if !bytes.Equal(got[8*nb:], want.Scales) {
			for i := range want.Scales {
				if got[8*nb+i] != want.Scales[i] {
					t.Fatalf("%s: block %d scale code %#x, CPU %#x", recipe, i, got[8*nb+i], want.Scales[i])
				}
			}
		}
		for i := range want.Packed {
			if got[i] != want.Packed[i] {
				t.Fatalf("%s: byte %d is %#x, CPU %#x (values %g, %g)", recipe, i, got[i], want.Packed[i], w.Data[2*i], w.Data[2*i+1])
			}
		}
	}
}

func TestHostKernelsDequant(t *testing.T) {
	bin := hostKernels(t)
	r := rand.New(rand.NewPCG(3, 4))
	rows, cols := 37, 300
	codes := make([]byte, rows*cols)
	for i := range codes {
		codes[i] = byte(i)
	}
	for _, c := range []struct{ R, C, inv, e5 int }{{rows, cols, 0, 0}, {1, cols, 0, 1}, {16, 128, 1, 0}, {16, 128, 0, 1}} {
		scols := (cols + c.C - 1) / c.C
		sc := make([]float32, (rows+c.R-1)/c.R*scols)
		for i := range sc {
			sc[i] = float32(math.Ldexp(r.Float64()+0.5, r.IntN(40)-30))
		}
		want := make([]float32, len(codes))
		for i, code := range codes {
			v := numeric.E4M3ToFloat32(code)
			if c.e5 == 1 {
				v = numeric.E5M2ToFloat32(code)
			}
			s := sc[(i/cols)/c.R*scols+(i%cols)/c.C]
			if c.inv == 1 {
				want[i] = v / s
			} else {
				want[i] = v * s
			}
		}
		got := runHost(t, bin, append(append([]byte{}, codes...), f32b(sc)...), "fp8", fmt.Sprint(rows), fmt.Sprint(cols), fmt.Sprint(c.R), fmt.Sprint(c.C), fmt.Sprint(c.inv), fmt.Sprint(c.e5))
		sameBits(t, fmt.Sprintf("fp8 %+v", c), got, want)
	}
	packed := make([]byte, 8*256)
	for i := range packed {
		packed[i] = byte(r.IntN(256))
	}
	scales := make([]byte, 256)
	for i := range scales {
		scales[i] = byte(i)
	}
	g := float32(1) / 2411.3
	bs := make([]float32, 256)
	for i, c := range scales {
		bs[i] = numeric.E4M3ToFloat32(c) * g
	}
	want := make([]float32, 2*len(packed))
	numeric.DecodeE2M1Blocks(want, packed, bs, 16)
	got := runHost(t, bin, append(append([]byte{}, packed...), scales...), "nvfp4", fmt.Sprint(len(want)), fmt.Sprintf("%.9g", g))
	sameBits(t, "nvfp4", got, want)

	mx := append(append([]byte{}, packed...), packed...)
	want = make([]float32, 2*len(mx))
	if err := packing.DecodeMXFP4(want, mx, scales); err != nil {
		t.Fatal(err)
	}
	got = runHost(t, bin, append(append([]byte{}, mx...), scales...), "mxfp4", fmt.Sprint(len(want)))
	sameBits(t, "mxfp4", got, want)
}

func TestHostKernelsW4AFP8(t *testing.T) {
	bin := hostKernels(t)
	r := rand.New(rand.NewPCG(5, 6))
	T, K, N := 5, 512, 64
	x := w4aActs(r, T, K, 20)
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
	got := runHost(t, bin, in, "w4a", fmt.Sprint(T), fmt.Sprint(K), fmt.Sprint(N))
	sameBits(t, "w4a_fp8", got, want.Data)
}
