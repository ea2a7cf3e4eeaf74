package cpu

import (
	"context"
	"math"
	"strings"
	"testing"

	"github.com/quantscope/quantscope/kernels"
)

// refRound16 rounds x to nearest-even in a 16-bit float of man mantissa
// bits whose normal exponents start at emin (bf16: 7, -126; f16: 10, -14),
// in float64 steps: the spacing is 2^(e - man) for |x| in [2^e, 2^(e+1)),
// 2^(emin - man) below 2^emin. Only finite results are needed here.
func refRound16(x float32, man, emin int) float32 {
	if x == 0 {
		return x
	}
	a := math.Abs(float64(x))
	e := max(int(math.Floor(math.Log2(a))), emin)
	step := math.Ldexp(1, e-man)
	return float32(math.Copysign(math.RoundToEven(a/step)*step, float64(x)))
}

func refBF16(x float32) float32 { return refRound16(x, 7, -126) }
func refF16(x float32) float32  { return refRound16(x, 10, -14) }

// TestFP8HalfQuotient: a direct scale divided in a 16-bit dtype, as
// PyTorch divides a BF16 (or F16) weight by ModelOpt's 0-dim per-tensor
// scale or by compressed-tensors' scale of the weight's own dtype: q =
// e4m3(clamp(H(w / H(s)))), with s = H(amax / 448) when the scale is
// computed in H too. Checked against that formula written plainly, on
// weights that are exact in H (a 16-bit model's), for every scale
// granularity; the float32 quotient gives other codes on some of them.
func TestFP8HalfQuotient(t *testing.T) {
	const rows, cols = 16, 64
	b := &Backend{Workers: 2}
	for _, h := range []struct {
		name  string
		round func(float32) float32
		tiny  float32 // the smallest positive value: a scale is held at it
	}{{kernels.HalfBF16, refBF16, 0x1p-133}, {kernels.HalfF16, refF16, 0x1p-24}} {
		w := testWeights(rows, cols, 21)
		for i := range w {
			w[i] = h.round(w[i])
		}
		for _, sc := range []struct {
			mode   string
			br, bc int
		}{{"tensor", rows, cols}, {"row", 1, cols}, {"block", 4, 16}} {
			for _, halfScale := range []bool{false, true} {
				opt := kernels.FP8Options{Format: "e4m3", Scale: sc.mode, Block: [2]int{sc.br, sc.bc}, Half: h.name, HalfScale: halfScale}
				res, err := b.QuantizeFP8(context.Background(), mat(rows, cols, w), opt, nil)
				if err != nil {
					t.Fatal(err)
				}
				f32, err := b.QuantizeFP8(context.Background(), mat(rows, cols, w), kernels.FP8Options{Format: "e4m3", Scale: sc.mode, Block: [2]int{sc.br, sc.bc}}, nil)
				if err != nil {
					t.Fatal(err)
				}
				nbc, moved := cols/sc.bc, 0
				for i := range rows / sc.br {
					for k := range nbc {
						var amax float32
						for r := i * sc.br; r < (i+1)*sc.br; r++ {
							for c := k * sc.bc; c < (k+1)*sc.bc; c++ {
								amax = float32(math.Max(float64(amax), math.Abs(float64(w[r*cols+c]))))
							}
						}
						s := amax / 448
						switch {
						case amax == 0:
							s = 1 // an all-zero region's scale
						case halfScale:
							s = max(h.round(s), h.tiny)
						}
						if got := res.Scales[i*nbc+k]; got != s {
							t.Fatalf("%s %s halfScale=%v region %d,%d: scale %g, want %g", h.name, sc.mode, halfScale, i, k, got, s)
						}
						d := max(h.round(s), h.tiny)
						for r := i * sc.br; r < (i+1)*sc.br; r++ {
							for c := k * sc.bc; c < (k+1)*sc.bc; c++ {
								x := w[r*cols+c]
								v := float32(math.Min(math.Max(float64(h.round(x/d)), -448), 448))
								if math.Signbit(float64(x)) && v == 0 {
									v = float32(math.Copysign(0, -1))
								}
								if got, want := res.Codes[r*cols+c], refE4M3(v); got != want {
									t.Fatalf("%s %s halfScale=%v [%d,%d] w=%g: code %#x, want %#x", h.name, sc.mode, halfScale, r, c, x, got, want)
								}
								if res.Codes[r*cols+c] != f32.Codes[r*cols+c] {
									moved++
								}
							}
						}
					}
				}
				if moved == 0 {
					t.Errorf("%s %s halfScale=%v: no code differs from the float32 quotient's: the 16-bit rounding is not exercised", h.name, sc.mode, halfScale)
				}
			}
		}
	}
	// An unknown dtype is refused by rule; an inverse scale ignores Half
	// (GPT-QModel multiplies in float32).
	if _, err := b.QuantizeFP8(context.Background(), mat(1, 16, make([]float32, 16)), kernels.FP8Options{Format: "e4m3", Half: "fp16"}, nil); err == nil || !strings.Contains(err.Error(), "rule fp8-half") {
		t.Errorf("Half fp16: %v", err)
	}
}
