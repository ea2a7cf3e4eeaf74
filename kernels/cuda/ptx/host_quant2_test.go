package ptx

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/quantscope/quantscope/formats/numeric"
	"github.com/quantscope/quantscope/kernels"
	"github.com/quantscope/quantscope/kernels/cpu"
	"github.com/quantscope/quantscope/synth"
)

// fp8_quant.cu and nvfp4_recipes.cu compiled for the CPU
// (testdata/host_quant2.cpp) against formats/numeric and the CPU backend,
// bit for bit: the kernels' logic and float32 order without a GPU.

func hostQuant2(t *testing.T) string {
	return buildHost(t, "host_quant2", "c++17", []string{"fp8_quant.cu", "nvfp4_recipes.cu"})
}

// TestHostFP8Cast: the kernels' FP8 cast against formats/numeric's encoders
// on every float32 high half with the low halves that decide rounding
// (0, 1, just under, on and just over the half-way point, all ones): every
// exponent, the ties of normal and subnormal codes, saturation, ±0, ±inf,
// NaNs of either sign and float32 subnormals.
func TestHostFP8Cast(t *testing.T) {
	bin := hostQuant2(t)
	lows := []uint32{0, 1, 0x7FFF, 0x8000, 0x8001, 0xFFFF}
	x := make([]float32, 0, 65536*len(lows))
	for hi := range uint32(65536) {
		for _, lo := range lows {
			x = append(x, math.Float32frombits(hi<<16|lo))
		}
	}
	for _, f := range []struct {
		e5  int
		enc func(float32) byte
	}{{0, numeric.Float32ToE4M3}, {1, numeric.Float32ToE5M2}} {
		got := runHost(t, bin, f32b(x), "cast", fmt.Sprint(f.e5))
		if len(got) != len(x) {
			t.Fatalf("e5m2=%d: %d codes for %d values", f.e5, len(got), len(x))
		}
		for i, v := range x {
			if want := f.enc(v); got[i] != want {
				t.Fatalf("e5m2=%d: %g (bits %#08x) casts to %#02x, formats/numeric gives %#02x", f.e5, v, math.Float32bits(v), got[i], want)
			}
		}
	}
}

// fp8Weight has rows of many magnitudes and the edge cases of FP8
// quantization: all-zero rows (scale 1), −0, rows of float32 subnormals
// (the inverse scale held at the largest float32, the direct one
// underflowing to the smallest), huge rows, and rows whose amax is the
// format's max (scale exactly 1) holding FP8 round-to-even ties.
func fp8Weight(rows, cols int, fmax float32, seed uint64) kernels.Matrix {
	r := rand.New(rand.NewPCG(seed, 9))
	w := kernels.Matrix{Rows: rows, Cols: cols, Data: make([]float32, rows*cols)}
	for i := range w.Data {
		row, col := i/cols, i%cols
		var v float32
		switch row % 9 {
		case 0:
			v = 0
			if col%3 == 0 {
				v = float32(math.Copysign(0, -1))
			}
		case 1:
			v = math.Float32frombits(uint32(r.IntN(1 << 10))) // subnormals
			if r.IntN(2) == 0 {
				v = -v
			}
		case 2:
			v = float32(r.NormFloat64() * 1e37)
		case 3, 4: // scale 1: FP8 grid points and the midpoints between them
			c := byte(r.IntN(0x7E))
			if fmax > 448 {
				c = byte(r.IntN(0x7B))
			}
			a, b := numeric.E4M3ToFloat32(c), numeric.E4M3ToFloat32(c+1)
			if fmax > 448 {
				a, b = numeric.E5M2ToFloat32(c), numeric.E5M2ToFloat32(c+1)
			}
			v = a + (b-a)/2
			if r.IntN(3) == 0 {
				v = a
			}
			if r.IntN(2) == 0 {
				v = -v
			}
			if col == 0 {
				v = fmax
			}
		default:
			v = float32(r.NormFloat64() * math.Pow(2, float64(r.IntN(60)-30)))
		}
		w.Data[i] = v
	}
	return w
}

func TestHostQuantizeFP8(t *testing.T) {
	bin := hostQuant2(t)
	rows, cols := 96, 160
	for _, format := range []string{kernels.FP8E4M3, kernels.FP8E5M2} {
		fmax := float32(448)
		e5 := 0
		if format == kernels.FP8E5M2 {
			fmax, e5 = 57344, 1
		}
		w := fp8Weight(rows, cols, fmax, uint64(e5))
		for _, g := range []struct {
			scale string
			R, C  int
		}{{kernels.ScaleTensor, rows, cols}, {kernels.ScaleRow, 1, cols}, {kernels.ScaleBlock, 3, 32}, {kernels.ScaleBlock, 32, 160}, {kernels.ScaleBlock, 1, 16}} {
			for _, inv := range []bool{false, true} {
				opt := kernels.FP8Options{Format: format, Scale: g.scale, Block: [2]int{g.R, g.C}, Inverse: inv}
				want, err := cpu.New().QuantizeFP8(context.Background(), w, opt, nil)
				if err != nil {
					t.Fatal(err)
				}
				// in pieces of whole row regions (as the worker when they fit
				// its staging), and over the whole weight in three passes
				for _, per := range []int{g.R * max(1, 7/g.R), 0} {
					what := fmt.Sprintf("%s %s %d×%d inverse=%v per=%d", format, g.scale, g.R, g.C, inv, per)
					if per >= rows && per != 0 {
						continue
					}
					got := runHost(t, bin, f32b(w.Data), "fp8", fmt.Sprint(rows), fmt.Sprint(cols), fmt.Sprint(g.R), fmt.Sprint(g.C), fmt.Sprint(b2i(inv)), fmt.Sprint(e5), fmt.Sprint(per))
					sameBits(t, what+" scales", got[rows*cols:], want.Scales)
					for i, c := range want.Codes {
						if got[i] != c {
							t.Fatalf("%s: code [%d, %d] of %g is %#02x, CPU %#02x", what, i/cols, i%cols, w.Data[i], got[i], c)
						}
					}
				}
			}
		}
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// nvfp4Weight is the NVFP4 recipes' test weight: rows from 2^-40 to 2^40,
// zeros, −0, E2M1 midpoints at scale 1, negative values whose quotient
// underflows, float32 subnormals, and one row of values near 1e30 whose
// squared errors overflow to +inf (every candidate ties at +inf).
func nvfp4Weight(rows, cols int, seed uint64) kernels.Matrix {
	r := rand.New(rand.NewPCG(seed, 2))
	w := kernels.Matrix{Rows: rows, Cols: cols, Data: make([]float32, rows*cols)}
	for i := range w.Data {
		row := i / cols
		v := float32(r.NormFloat64() * math.Pow(2, float64(row%81-40)))
		switch r.IntN(16) {
		case 0:
			v = 0
		case 1:
			v = float32(math.Copysign(0, -1))
		case 2:
			v = float32(r.IntN(13)-6) * 0.25
		case 3:
			v = -1e-44
		}
		switch row {
		case 5:
			v = float32(r.NormFloat64() * 1e30)
		case 6:
			v = math.Float32frombits(uint32(r.IntN(1 << 12)))
		case 7:
			v = 0
		}
		w.Data[i] = v
	}
	return w
}

func sameNVFP4Bytes(t *testing.T, what string, got []byte, want *kernels.NVFP4Result, w kernels.Matrix) {
	t.Helper()
	nb := len(want.Scales)
	if len(got) != 9*nb {
		t.Fatalf("%s: %d bytes, want %d", what, len(got), 9*nb)
	}
	for i := range want.Scales {
		if got[8*nb+i] != want.Scales[i] {
			t.Fatalf("%s: block %d (row %d) scale code %#x, CPU %#x", what, i, i/(w.Cols/16), got[8*nb+i], want.Scales[i])
		}
	}
	for i := range want.Packed {
		if got[i] != want.Packed[i] {
			t.Fatalf("%s: byte %d is %#x, CPU %#x (values %g, %g)", what, i, got[i], want.Packed[i], w.Data[2*i], w.Data[2*i+1])
		}
	}
}

// seedTieWeight is synth.NVFP4SeedTie: the two GPT-QModel seeds tie at
// error 0 on every block and M = 4's codes must win.
func seedTieWeight(rows, cols int, seed uint64) kernels.Matrix {
	return kernels.Matrix{Rows: rows, Cols: cols, Data: synth.NVFP4SeedTie(rows, cols, seed)}
}

func TestHostQuantizeNVFP4FourSixLeastSquares(t *testing.T) {
	bin := hostQuant2(t)
	rows, cols := 170, 256
	for _, w := range []kernels.Matrix{nvfp4Weight(rows, cols, 1), seedTieWeight(rows, cols, 1)} {
		hostFourSix(t, bin, w)
	}
}

func hostFourSix(t *testing.T, bin string, w kernels.Matrix) {
	rows, cols := w.Rows, w.Cols
	var amax float32
	for _, v := range w.Data {
		amax = max(amax, float32(math.Abs(float64(v))))
	}
	g := amax / (448 * 4)
	for k, recipe := range []string{kernels.RecipeFourSix, kernels.RecipeLeastSquares} {
		want, err := cpu.New().QuantizeNVFP4(context.Background(), w, kernels.NVFP4Options{Recipe: recipe}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if want.Scale2 != g {
			t.Fatalf("%s: global scale %g, the client's formula gives %g", recipe, want.Scale2, g)
		}
		got := runHost(t, bin, f32b(w.Data), "gptq", fmt.Sprint(rows*cols/16), fmt.Sprintf("%.9g", g), fmt.Sprint(k))
		sameNVFP4Bytes(t, recipe, got, want, w)
	}
}

func TestHostQuantizeNVFP4LocalHessian(t *testing.T) {
	bin := hostQuant2(t)
	rows, cols, T := 90, 128, 37
	// rows within 2^±4 (a wider weight rounds most blocks to zero at every
	// candidate, where the loss cannot tell codes apart), zero blocks, −0,
	// E2M1 midpoints
	r := rand.New(rand.NewPCG(4, 4))
	w := kernels.Matrix{Rows: rows, Cols: cols, Data: make([]float32, rows*cols)}
	for i := range w.Data {
		v := float32(r.NormFloat64() * math.Pow(2, float64(i/cols%9-4)))
		switch {
		case i/16%23 == 0:
			v = 0
		case r.IntN(16) == 0:
			v = float32(math.Copysign(0, -1))
		case r.IntN(16) == 0:
			v = float32(r.IntN(13)-6) * 0.25
		}
		w.Data[i] = v
	}
	x := kernels.Matrix{Rows: T, Cols: cols, Data: make([]float32, T*cols)}
	for i := range x.Data {
		x.Data[i] = float32(r.NormFloat64() * math.Pow(2, float64(r.IntN(16)-8)))
		if i%cols < 16 && i/cols%2 == 0 {
			x.Data[i] = 0 // input block 0 seen by half the tokens only
		}
	}
	// H_n summed over tokens in order, then divided by the count: a plain
	// reference of ModelOpt's accumulator, against the kernel in pieces
	h := make([]float32, cols*16)
	for n := range cols / 16 {
		for i := range 16 {
			for j := range 16 {
				var s float32
				for t := range T {
					s += float32(x.Data[t*cols+16*n+i] * x.Data[t*cols+16*n+j])
				}
				h[n*256+i*16+j] = s / float32(T)
			}
		}
	}
	for _, piece := range []int{T, 10} {
		got := runHost(t, bin, f32b(x.Data), "hess", fmt.Sprint(T), fmt.Sprint(cols), fmt.Sprint(piece))
		sameBits(t, fmt.Sprintf("H in pieces of %d tokens", piece), got, h)
	}
	var amax float32
	for _, v := range w.Data {
		amax = max(amax, float32(math.Abs(float64(v))))
	}
	s2 := amax / (6 * 448)
	want, err := cpu.New().QuantizeNVFP4(context.Background(), w, kernels.NVFP4Options{Recipe: kernels.RecipeLocalHessian, Activations: &x}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if want.Scale2 != s2 {
		t.Fatalf("global scale %g, the client's formula gives %g", want.Scale2, s2)
	}
	got := runHost(t, bin, append(f32b(w.Data), f32b(h)...), "hessian", fmt.Sprint(rows), fmt.Sprint(cols), fmt.Sprintf("%.9g", s2))
	sameNVFP4Bytes(t, "local_hessian", got, want, w)
	// the test means something: the Hessian's choice differs from mse's
	mse, err := cpu.New().QuantizeNVFP4(context.Background(), w, kernels.NVFP4Options{Recipe: kernels.RecipeMSE}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(mse.Scales, want.Scales) {
		t.Fatal("local_hessian chose the mse recipe's codes everywhere: the test data does not exercise H")
	}
}
