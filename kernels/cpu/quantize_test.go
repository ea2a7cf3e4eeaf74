package cpu

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/quantscope/quantscope/kernels"
)

func unpack(packed []byte) []byte {
	out := make([]byte, 2*len(packed))
	for i, b := range packed {
		out[2*i], out[2*i+1] = b&0xF, b>>4
	}
	return out
}

func mat(rows, cols int, w []float32) kernels.Matrix {
	return kernels.Matrix{Rows: rows, Cols: cols, Data: w}
}

func TestNVFP4MaxBitExact(t *testing.T) {
	for _, sh := range [][2]int{{37, 64}, {8, 256}, {1, 16}} {
		w := testWeights(sh[0], sh[1], uint64(sh[0]))
		b := &Backend{Workers: 3}
		res, err := b.QuantizeNVFP4(context.Background(), mat(sh[0], sh[1], w), kernels.NVFP4Options{Recipe: "max"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		codes, scales, s2 := refNVFP4Max(w, sh[0], sh[1])
		if math.Float32bits(res.Scale2) != math.Float32bits(s2) {
			t.Fatalf("scale_2 %g, reference %g", res.Scale2, s2)
		}
		for i, c := range unpack(res.Packed) {
			if c != codes[i] {
				t.Fatalf("%v: element %d (w=%g): code %#x, reference %#x", sh, i, w[i], c, codes[i])
			}
		}
		for i, c := range res.Scales {
			if c != scales[i] {
				t.Fatalf("%v: block %d: scale code %#x, reference %#x", sh, i, c, scales[i])
			}
		}
	}
}

// TestNVFP4MaxCases pins the cases the sign rule, the ties and the zero
// guard decide, on a weight whose scale_2 is exactly 1 (amax 2688).
func TestNVFP4MaxCases(t *testing.T) {
	w := make([]float32, 64)
	copy(w[0:16], []float32{0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5, 6, -0.25, -0.75, -1.25, -1.75, -2.5, -3.5, -5, -6})
	copy(w[16:32], []float32{float32(math.Copysign(0, -1)), -0.1, 0.1, 2688}) // amax 2688: scale 448
	// w[32:48] all zero: scale 1.0 (0x38)
	w[48] = 1e-6 // tiny block: quotient below 2^-9 → 0x01
	res, err := New().QuantizeNVFP4(context.Background(), mat(1, 64, w), kernels.NVFP4Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Scale2 != 1 {
		t.Fatalf("scale_2 = %g, want 1", res.Scale2)
	}
	if got := res.Scales; got[0] != 0x38 || got[1] != 0x7E || got[2] != 0x38 || got[3] != 0x01 {
		t.Fatalf("scale codes % x, want 38 7e 38 01", got)
	}
	c := unpack(res.Packed)
	want := []byte{0, 2, 2, 4, 4, 6, 6, 7, 8, 10, 10, 12, 12, 14, 14, 15}
	for i, x := range want {
		if c[i] != x {
			t.Fatalf("tie codes % x, want % x", c[:16], want)
		}
	}
	if c[16] != 0 || c[17] != 8 || c[18] != 0 {
		t.Fatalf("-0, -0.1/448, 0.1/448 → %#x %#x %#x, want 0 8 0 (ModelOpt's sign rule)", c[16], c[17], c[18])
	}
}

func TestNVFP4MSE(t *testing.T) {
	rows, cols := 203, 128
	w := testWeights(rows, cols, 3)
	b := &Backend{Workers: 2}
	ctx := context.Background()
	mse, err := b.QuantizeNVFP4(ctx, mat(rows, cols, w), kernels.NVFP4Options{Recipe: "mse"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	mx, _ := b.QuantizeNVFP4(ctx, mat(rows, cols, w), kernels.NVFP4Options{Recipe: "max"}, nil)
	if mse.Scale2 != mx.Scale2 {
		t.Fatalf("mse scale_2 %g differs from max's %g", mse.Scale2, mx.Scale2)
	}
	changed := 0
	for blk := range mse.Scales {
		x := w[16*blk : 16*blk+16]
		if want := refSweep(x, mse.Scale2); mse.Scales[blk] != want {
			t.Fatalf("block %d: code %#x, plain sweep %#x", blk, mse.Scales[blk], want)
		}
		em, ex := refBlockSSE(x, mse.Scales[blk], mse.Scale2), refBlockSSE(x, mx.Scales[blk], mx.Scale2)
		if em > ex {
			t.Fatalf("block %d: mse error %g worse than max's %g", blk, em, ex)
		}
		if mse.Scales[blk] != mx.Scales[blk] {
			changed++
		}
	}
	if mse.Scales[0] != 0x01 {
		t.Fatalf("all-zero block: code %#x, want 0x01", mse.Scales[0])
	}
	if changed == 0 {
		t.Fatal("mse chose max's scale on every block: the sweep found nothing better anywhere")
	}
	// the elements follow §1 with the chosen scale
	got := unpack(mse.Packed)
	for i, x := range w {
		den := refE4M3Value(mse.Scales[i/16]) * mse.Scale2
		if got[i] != refCastFP4(x/den) {
			t.Fatalf("element %d: code %#x, want %#x", i, got[i], refCastFP4(x/den))
		}
	}
}

// TestMSETieGoesToLowestCode: with scale_2 = 1 the block {3, 0, ...} is
// exact at scales 0.5, 0.75, 1, 1.5, 2, 3 and 6; the sweep keeps 0.5 (0x30).
func TestMSETieGoesToLowestCode(t *testing.T) {
	w := make([]float32, 32)
	w[0] = 2688
	w[16] = 3
	res, err := New().QuantizeNVFP4(context.Background(), mat(1, 32, w), kernels.NVFP4Options{Recipe: "mse"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Scales[1] != 0x30 || refSweep(w[16:], 1) != 0x30 {
		t.Fatalf("tied block: code %#x (reference %#x), want 0x30", res.Scales[1], refSweep(w[16:], 1))
	}
}

func TestFourSixAndLeastSquares(t *testing.T) {
	rows, cols := 40, 128
	w := testWeights(rows, cols, 5)
	b := &Backend{Workers: 2}
	ctx := context.Background()
	fs, err := b.QuantizeNVFP4(ctx, mat(rows, cols, w), kernels.NVFP4Options{Recipe: "four_six"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ls, err := b.QuantizeNVFP4(ctx, mat(rows, cols, w), kernels.NVFP4Options{Recipe: "least_squares"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var amax float32
	for _, x := range w {
		amax = max(amax, float32(math.Abs(float64(x))))
	}
	g := amax / (448 * 4)
	if fs.Scale2 != g || ls.Scale2 != g {
		t.Fatalf("global scales %g, %g; want amax/1792 = %g", fs.Scale2, ls.Scale2, g)
	}
	better := 0
	for blk := range fs.Scales {
		x := w[16*blk : 16*blk+16]
		s4, s6 := refSeed(x, 4, g), refSeed(x, 6, g)
		e4, e6 := refBlockSSE(x, s4, g), refBlockSSE(x, s6, g)
		want := refFourSix(x, g)
		if fs.Scales[blk] != want {
			t.Fatalf("four_six block %d: code %#x, want %#x (seeds %#x/%g, %#x/%g)", blk, fs.Scales[blk], want, s4, e4, s6, e6)
		}
		if want := refLeastSquares(x, g); ls.Scales[blk] != want {
			t.Fatalf("least_squares block %d: code %#x, plain reference %#x", blk, ls.Scales[blk], want)
		}
		el := refBlockSSE(x, ls.Scales[blk], g)
		if el > min(e4, e6) {
			t.Fatalf("least_squares block %d: error %g worse than its seeds %g, %g", blk, el, e4, e6)
		}
		if el < min(e4, e6) {
			better++
		}
	}
	if better == 0 {
		t.Fatal("least_squares improved no block: the refinement never ran")
	}
	t.Logf("least_squares beat four_six on %d of %d blocks", better, len(fs.Scales))
}

// Weights so large that every candidate's block error overflows to +Inf
// keep GPT-QModel's starting code, 1.0 (0x38), as its best_local does; the
// code 0 (a zero divisor) was written before.
func TestGPTQModelRecipesHugeWeights(t *testing.T) {
	rows, cols := 4, 64
	w := testWeights(rows, cols, 9)
	for i := range w {
		w[i] *= 1e22
	}
	b := &Backend{Workers: 2}
	for _, recipe := range []string{"four_six", "least_squares"} {
		r, err := b.QuantizeNVFP4(context.Background(), mat(rows, cols, w), kernels.NVFP4Options{Recipe: recipe}, nil)
		if err != nil {
			t.Fatal(err)
		}
		for blk, c := range r.Scales {
			x := w[16*blk : 16*blk+16]
			want := refFourSix(x, r.Scale2)
			if recipe == "least_squares" {
				want = refLeastSquares(x, r.Scale2)
			}
			if c != want || c == 0 {
				t.Fatalf("%s block %d: code %#x, plain reference %#x", recipe, blk, c, want)
			}
		}
	}
}

// A block whose two seeds give the same code (and so the same error) keeps
// M=4's; a block where both seeds err equally with different codes does too.
func TestFourSixTieGoesToFour(t *testing.T) {
	// amax 1792 → g = 1. All-zero block: both seeds are 1.0, tie.
	// A block of ±4·k: M=4 gives scale amax/4, M=6 amax/6; choose values so
	// both are exact: amax 24 → scales 6 and 4, values {24, 12, 0}:
	// 24/6=4, 12/6=2 exact; 24/4=6, 12/4=3 exact: both errors 0 → M=4 (6.0 = 0x4C).
	w := make([]float32, 48)
	w[0] = 1792
	copy(w[16:], []float32{24, 12, 0, -24, -12})
	res, err := New().QuantizeNVFP4(context.Background(), mat(1, 48, w), kernels.NVFP4Options{Recipe: "four_six"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Scale2 != 1 {
		t.Fatalf("g = %g, want 1", res.Scale2)
	}
	if res.Scales[1] != refE4M3(6) {
		t.Fatalf("tied block: code %#x (%g), want M=4's %#x (6.0)", res.Scales[1], refE4M3Value(res.Scales[1]), refE4M3(6))
	}
	if res.Scales[2] != 0x38 {
		t.Fatalf("zero block: code %#x, want 0x38", res.Scales[2])
	}
}

func TestLocalHessianIdentityIsMSE(t *testing.T) {
	rows, cols := 19, 64
	w := testWeights(rows, cols, 9)
	// 16 tokens per input block, x = 4·e_i: H_n = Σ x xᵀ / tokens = I exactly.
	tokens := 16
	act := make([]float32, tokens*cols)
	for tk := range tokens {
		for n := range cols / 16 {
			act[tk*cols+16*n+tk] = 4
		}
	}
	b := &Backend{Workers: 2}
	ctx := context.Background()
	lh, err := b.QuantizeNVFP4(ctx, mat(rows, cols, w), kernels.NVFP4Options{Recipe: "local_hessian", Activations: &kernels.Matrix{Rows: tokens, Cols: cols, Data: act}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	mse, _ := b.QuantizeNVFP4(ctx, mat(rows, cols, w), kernels.NVFP4Options{Recipe: "mse"}, nil)
	for i := range lh.Scales {
		if lh.Scales[i] != mse.Scales[i] {
			t.Fatalf("block %d: local_hessian with H=I chose %#x, mse %#x", i, lh.Scales[i], mse.Scales[i])
		}
	}
	// A non-identity H changes some choice (the weighting does something).
	for i := range act {
		act[i] = float32(math.Sin(float64(i)*0.37)) + 0.5*float32(math.Cos(float64(i/cols)))
	}
	lh2, err := b.QuantizeNVFP4(ctx, mat(rows, cols, w), kernels.NVFP4Options{Recipe: "local_hessian", Activations: &kernels.Matrix{Rows: tokens, Cols: cols, Data: act}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	diff := 0
	for i := range lh2.Scales {
		if lh2.Scales[i] != mse.Scales[i] {
			diff++
		}
	}
	if diff == 0 {
		t.Fatal("a correlated H chose mse's scale on every block")
	}
	if _, err := b.QuantizeNVFP4(ctx, mat(rows, cols, w), kernels.NVFP4Options{Recipe: "local_hessian"}, nil); err == nil || !strings.Contains(err.Error(), "--data") {
		t.Fatalf("local_hessian without data: %v", err)
	}
}

func TestFP8AllModes(t *testing.T) {
	rows, cols := 12, 48
	w := testWeights(rows, cols, 11)
	w[5*cols+3] = 1e-40 // a row whose amax is a float32 denormal
	for j := range cols {
		if j != 3 {
			w[5*cols+j] = -1e-41
		}
	}
	for j := range cols {
		w[7*cols+j] = 0 // an all-zero row
	}
	b := &Backend{Workers: 3}
	for _, f := range []string{"e4m3", "e5m2"} {
		fmax := float32(448)
		cast := refE4M3
		if f == "e5m2" {
			fmax, cast = 57344, refE5M2
		}
		for _, sc := range []struct {
			mode   string
			br, bc int
		}{{"tensor", rows, cols}, {"row", 1, cols}, {"block", 4, 16}, {"block", 3, 48}} {
			for _, inv := range []bool{true, false} {
				res, err := b.QuantizeFP8(context.Background(), mat(rows, cols, w), kernels.FP8Options{Format: f, Scale: sc.mode, Block: [2]int{sc.br, sc.bc}, Inverse: inv}, nil)
				if err != nil {
					t.Fatal(err)
				}
				nbc := cols / sc.bc
				for i := range rows / sc.br {
					for k := range nbc {
						var amax float32
						for r := i * sc.br; r < (i+1)*sc.br; r++ {
							for c := k * sc.bc; c < (k+1)*sc.bc; c++ {
								amax = float32(math.Max(float64(amax), math.Abs(float64(w[r*cols+c]))))
							}
						}
						var s float32
						switch {
						case amax == 0:
							s = 1
						case inv:
							s = fmax / float32(math.Max(float64(amax), 0x1p-126))
							if math.IsInf(float64(s), 1) {
								s = math.MaxFloat32
							}
						default:
							s = amax / fmax
						}
						if got := res.Scales[i*nbc+k]; got != s {
							t.Fatalf("%s %s inverse=%v region %d,%d: scale %g, want %g", f, sc.mode, inv, i, k, got, s)
						}
						for r := i * sc.br; r < (i+1)*sc.br; r++ {
							for c := k * sc.bc; c < (k+1)*sc.bc; c++ {
								x := w[r*cols+c]
								var v float32
								if inv {
									v = x * s
								} else {
									v = x / s
								}
								v = float32(math.Min(math.Max(float64(v), float64(-fmax)), float64(fmax)))
								if math.Signbit(float64(x)) && v == 0 {
									v = float32(math.Copysign(0, -1))
								}
								if got, want := res.Codes[r*cols+c], cast(v); got != want {
									t.Fatalf("%s %s inverse=%v [%d,%d] w=%g: code %#x, want %#x", f, sc.mode, inv, r, c, x, got, want)
								}
							}
						}
					}
				}
				if want := map[string]int{"tensor": 0, "row": 1, "block": 2}[sc.mode]; len(res.ScaleShape) != want {
					t.Fatalf("%s scale shape %v", sc.mode, res.ScaleShape)
				}
			}
		}
	}
}

func TestQuantizeBadInput(t *testing.T) {
	b := New()
	ctx := context.Background()
	w := testWeights(4, 40, 1)
	if _, err := b.QuantizeNVFP4(ctx, mat(4, 40, w), kernels.NVFP4Options{}, nil); err == nil || !strings.Contains(err.Error(), "nvfp4-shape") {
		t.Fatalf("in %% 16 != 0: %v", err)
	}
	if _, err := b.QuantizeFP8(ctx, mat(4, 40, w), kernels.FP8Options{Format: "e4m3", Scale: "block", Block: [2]int{3, 8}}, nil); err == nil || !strings.Contains(err.Error(), "does not divide") {
		t.Fatalf("block not dividing: %v", err)
	}
	w[45] = float32(math.NaN())
	for _, err := range []error{
		func() error {
			_, err := b.QuantizeFP8(ctx, mat(4, 40, w), kernels.FP8Options{Format: "e4m3"}, nil)
			return err
		}(),
		func() error { _, err := b.QuantizeNVFP4(ctx, mat(2, 80, w), kernels.NVFP4Options{}, nil); return err }(),
	} {
		if err == nil || !strings.Contains(err.Error(), "quantize-finite") || !strings.Contains(err.Error(), "[1, 5]") && !strings.Contains(err.Error(), "[0, 45]") {
			t.Fatalf("NaN weight: %v", err)
		}
	}
	if _, err := b.QuantizeNVFP4(ctx, mat(1, 16, make([]float32, 16)), kernels.NVFP4Options{Recipe: "best"}, nil); err == nil || !strings.Contains(err.Error(), "unknown recipe") {
		t.Fatalf("unknown recipe: %v", err)
	}
}

func TestQuantizeCancelAndProgress(t *testing.T) {
	w := testWeights(256, 256, 2)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := New().QuantizeNVFP4(ctx, mat(256, 256, w), kernels.NVFP4Options{Recipe: "mse"}, nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: %v", err)
	}
	var last int64
	_, err := (&Backend{Workers: 1}).QuantizeNVFP4(context.Background(), mat(256, 256, w), kernels.NVFP4Options{}, func(done, total int64) {
		if done < last || total != 256 {
			t.Errorf("progress %d/%d after %d", done, total, last)
		}
		last = done
	})
	if err != nil || last != 256 {
		t.Fatalf("progress ended at %d, err %v", last, err)
	}
}

func TestRecipeReport(t *testing.T) {
	rows, cols := 16, 64
	w := testWeights(rows, cols, 4)
	rep, err := (&Backend{Workers: 2}).RecipeReport(context.Background(), mat(rows, cols, w), kernels.ReportOptions{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Recipes) != 4 || rep.Recipes[0].Recipe != "max" {
		t.Fatalf("recipes %+v", rep.Recipes)
	}
	// max's own figures from the plain reference
	codes, scales, s2 := refNVFP4Max(w, rows, cols)
	var sig, noise, maxErr float64
	for i, x := range w {
		v := float64(refE2M1Magnitude(codes[i]&7) * float32(refE4M3Value(scales[i/16])*s2))
		if codes[i]&8 != 0 {
			v = -v
		}
		d := float64(x) - v
		sig, noise, maxErr = sig+float64(x)*float64(x), noise+d*d, math.Max(maxErr, math.Abs(d))
	}
	m := rep.Recipes[0]
	if m.MSE != noise/float64(len(w)) || m.MaxAbsErr != maxErr || math.Abs(m.SQNRdB-10*math.Log10(sig/noise)) > 1e-9 || m.BlocksChanged != 0 {
		t.Fatalf("max row %+v; want mse %g max_abs %g sqnr %g", m, noise/float64(len(w)), maxErr, 10*math.Log10(sig/noise))
	}
	mse := rep.Recipes[1]
	if mse.Recipe != "mse" || mse.MSE > m.MSE || mse.BlocksChanged <= 0 {
		t.Fatalf("mse row %+v vs max %+v", mse, m)
	}
	n := 0
	for _, c := range mse.Changed {
		n += int(c)
	}
	if float64(n)/float64(len(mse.Changed)) != mse.BlocksChanged {
		t.Fatal("changed map disagrees with blocks_changed")
	}
}

// TestNVFP4TinyWeights: a weight whose scale_2 is a float32 subnormal still
// matches the reference bit for bit (the divisors are subnormal: the exact
// division path); one so small that the block divisors would underflow to 0
// is refused with the rule.
func TestNVFP4TinyWeights(t *testing.T) {
	rows, cols := 6, 64
	w := testWeights(rows, cols, 21)
	for i := range w {
		w[i] *= 1e-38 // amax ~1e-36: scale_2 ~1e-40 (subnormal)
	}
	for _, simd := range []bool{false, true} {
		saved := useSIMD
		useSIMD = simd && hasSIMD()
		res, err := New().QuantizeNVFP4(context.Background(), mat(rows, cols, w), kernels.NVFP4Options{}, nil)
		useSIMD = saved
		if err != nil {
			t.Fatal(err)
		}
		codes, scales, s2 := refNVFP4Max(w, rows, cols)
		if res.Scale2 != s2 || s2 >= 0x1p-126 {
			t.Fatalf("scale_2 %g, reference %g (want a subnormal)", res.Scale2, s2)
		}
		for i, c := range unpack(res.Packed) {
			if c != codes[i] || res.Scales[i/16] != scales[i/16] {
				t.Fatalf("simd=%v element %d: code %#x scale %#x, reference %#x %#x", simd, i, c, res.Scales[i/16], codes[i], scales[i/16])
			}
		}
	}
	for i := range w {
		w[i] = 0
	}
	w[5] = 1e-42
	if _, err := New().QuantizeNVFP4(context.Background(), mat(rows, cols, w), kernels.NVFP4Options{}, nil); err == nil || !strings.Contains(err.Error(), "nvfp4-global-scale") {
		t.Fatalf("denormal amax: %v", err)
	}
}

// Finite activations whose second moments overflow float32 are refused,
// naming the input block, by both users of the moments (the local_hessian
// recipe and the calibration pass), where every candidate's loss was Inf or
// NaN and the codes fell out of comparisons with NaN; likewise moments that
// fit but whose weighted errors could overflow with these weights. Well
// inside the range, the same shape quantizes.
func TestLocalHessianMomentsOverflow(t *testing.T) {
	rows, cols, tokens := 4, 32, 8
	w := testWeights(rows, cols, 3)
	b := &Backend{Workers: 2}
	ctx := context.Background()
	act := func(big float32) *kernels.Matrix {
		x := make([]float32, tokens*cols)
		for i := range x {
			x[i] = float32(i%7) - 3
		}
		for tk := range tokens {
			x[tk*cols+20] = big // input block 1
		}
		return &kernels.Matrix{Rows: tokens, Cols: cols, Data: x}
	}
	// 8 × (1e19)² = 8e38 > 3.4e38; 8 × (1e16)² = 8e32 fits, and so do
	// its weighted errors for weights of a few units (256 · 1e32 · (2·amax)²).
	if _, err := b.QuantizeNVFP4(ctx, mat(rows, cols, w), kernels.NVFP4Options{Recipe: "local_hessian", Activations: act(1e16)}, nil); err != nil {
		t.Fatalf("moments of 1e32: %v", err)
	}
	big := make([]float32, len(w))
	for i, x := range w {
		big[i] = x * 1e4
	}
	if _, err := b.QuantizeNVFP4(ctx, mat(rows, cols, big), kernels.NVFP4Options{Recipe: "local_hessian", Activations: act(1e16)}, nil); err == nil || !strings.Contains(err.Error(), "weighted block errors could overflow float32") {
		t.Errorf("moments of 1e32 with weights ×1e4: %v", err)
	}
	_, errQ := b.QuantizeNVFP4(ctx, mat(rows, cols, w), kernels.NVFP4Options{Recipe: "local_hessian", Activations: act(1e19)}, nil)
	_, errH := b.BlockHessians(ctx, *act(1e19))
	for _, err := range []error{errQ, errH} {
		if err == nil || !strings.Contains(err.Error(), "local-hessian-data") || !strings.Contains(err.Error(), "input block 1 (columns 16-31)") || !strings.Contains(err.Error(), "overflows float32") {
			t.Errorf("moments of 8e38: %v", err)
		}
	}
}
