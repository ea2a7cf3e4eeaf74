package cpu

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/quantscope/quantscope/kernels"
)

// refActBlock is GPT-QModel's _nvfp4_mse_quantize_blocks for one block,
// written plainly from activation_floatx.py:210-297 on the reference casts.
func refActBlock(x []float32, g float32, recipe string) byte {
	best, bestE := byte(0), float32(math.Inf(1))
	try := func(c byte) {
		if e := refBlockSSE(x, c, g); e < bestE {
			best, bestE = c, e
		}
	}
	maxima := []float32{4, 6}
	if recipe == kernels.ActNvidia {
		maxima = []float32{6}
	}
	var seeds []byte
	for _, m := range maxima {
		c := refSeed(x, m, g)
		seeds = append(seeds, c)
		try(c)
	}
	if recipe == kernels.ActNvidia || recipe == kernels.ActFourSix {
		return best
	}
	for _, s := range seeds {
		try(refRefine(x, s, g))
	}
	try(refRefine(x, best, g))
	if recipe == kernels.ActLeastSquaresGrid {
		center := int(best)
		for off := -8; off <= 8; off++ {
			try(byte(min(max(center+off, 1), 126)))
		}
	}
	return best
}

// refW4ANVFP4 is the whole W4A-NVFP4 linear written plainly: the
// quantized activation values q·s_b, the exact group sums of each plane in
// float64 (every term a multiple of 2^-10 below 2^31 in total) rounded to
// float32, f32(L + 4H)·scale summed over groups, times g, plus the bias.
func refW4ANVFP4(x kernels.Matrix, w *kernels.W4AWeight, recipe string, global float32) ([]float32, float32) {
	T, K, N := x.Rows, x.Cols, w.Out
	g := global
	if g == 0 {
		var amax float64
		for _, v := range x.Data {
			amax = math.Max(amax, math.Abs(float64(v)))
		}
		den := float32(448 * 4)
		if recipe == kernels.ActNvidia {
			den = 448 * 6
		}
		g = float32(amax) / den
		if amax == 0 {
			g = 1
		}
	}
	vals := make([]float64, T*K)
	for b := 0; b < T*K; b += 16 {
		blk := x.Data[b : b+16]
		c := refActBlock(blk, g, recipe)
		s := refE4M3Value(c)
		den := float32(s * g)
		for j, v := range blk {
			q := refCastFP4(v / den)
			m := float64(refE2M1Magnitude(q & 7))
			if q&8 != 0 {
				m = -m
			}
			vals[b+j] = m * float64(s)
		}
	}
	y := make([]float32, T*N)
	for t := range T {
		for n := range N {
			var acc float32
			for gr := range K / 128 {
				var L, H float64
				for i := gr * 128; i < gr*128+128; i++ {
					c := int(w.Codes[n*K+i])
					h := int(math.Floor(float64(c+2) / 4))
					L += vals[t*K+i] * float64(c-4*h)
					H += vals[t*K+i] * float64(h)
				}
				sum := float32(float32(L) + float32(4*float32(H)))
				acc = float32(acc + float32(sum*w.Scales[n*(K/128)+gr]))
			}
			v := float32(acc * g)
			if w.Bias != nil {
				v = float32(v + w.Bias[n])
			}
			y[t*N+n] = v
		}
	}
	return y, g
}

func TestW4ANVFP4MatchesPlainArithmetic(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 4))
	b := New()
	ctx := context.Background()
	x := randomActs(r, 7, 256)
	for j := range 16 {
		x.Data[3*256+32+j] = 0 // a zero block
	}
	for i := range 8 { // exact E2M1 ties once scaled
		x.Data[5*256+i] = []float32{0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5, 6}[i]
	}
	w := randomWeight(r, "m", 256, 64, true)
	for _, recipe := range kernels.ActRecipes {
		for _, global := range []float32{0, 0.0123} {
			a, err := b.W4ANVFP4Quantize(ctx, x, recipe, global)
			if err != nil {
				t.Fatal(recipe, err)
			}
			if a.Dynamic != (global == 0) {
				t.Errorf("%s: Dynamic %v for global %v", recipe, a.Dynamic, global)
			}
			y, err := b.W4ANVFP4Linear(ctx, a, w)
			if err != nil {
				t.Fatal(recipe, err)
			}
			want, g := refW4ANVFP4(x, w, recipe, global)
			if a.Global != g {
				t.Fatalf("%s: global %v, want %v", recipe, a.Global, g)
			}
			for blk := 0; blk < len(a.Scales); blk++ {
				if c := refActBlock(x.Data[16*blk:16*blk+16], g, recipe); a.Scales[blk] != c {
					t.Fatalf("%s global %v: block %d scale code %#x, want %#x", recipe, global, blk, a.Scales[blk], c)
				}
			}
			for i := range want {
				if math.Float32bits(y.Data[i]) != math.Float32bits(want[i]) {
					t.Fatalf("%s global %v: y[%d] = %v, want %v", recipe, global, i, y.Data[i], want[i])
				}
			}
		}
	}
}

// The recipes differ: least_squares and the grid never lose to four_six on
// a block's SSE, and they change some blocks.
func TestW4ANVFP4RecipesDiffer(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 3))
	x := randomActs(r, 16, 256)
	g, _ := kernels.NVFP4GlobalScale(40, kernels.ActLeastSquares)
	changed := 0
	for b := 0; b < len(x.Data); b += 16 {
		blk := x.Data[b : b+16]
		fs := refBlockSSE(blk, refActBlock(blk, g, kernels.ActFourSix), g)
		ls := refBlockSSE(blk, refActBlock(blk, g, kernels.ActLeastSquares), g)
		gr := refBlockSSE(blk, refActBlock(blk, g, kernels.ActLeastSquaresGrid), g)
		if ls > fs || gr > ls {
			t.Fatalf("block %d: four_six %v, least_squares %v, grid %v", b/16, fs, ls, gr)
		}
		if gr < fs {
			changed++
		}
	}
	if changed == 0 {
		t.Error("least_squares_grid improved no block over four_six")
	}
}

func TestNVFP4GlobalScale(t *testing.T) {
	for _, c := range []struct {
		amax   float32
		recipe string
		want   float32
	}{{6 * 448, kernels.ActNvidia, 1}, {6 * 448, kernels.ActLeastSquares, 1.5}, {6 * 448, kernels.ActFourSix, 1.5}, {0, kernels.ActNvidia, 1}, {0, kernels.ActLeastSquares, 1}} {
		g, err := kernels.NVFP4GlobalScale(c.amax, c.recipe)
		if err != nil || g != c.want {
			t.Errorf("%v %s: %v %v, want %v", c.amax, c.recipe, g, err, c.want)
		}
	}
	for _, bad := range []float32{-1, float32(math.NaN()), float32(math.Inf(1))} {
		if _, err := kernels.NVFP4GlobalScale(bad, kernels.ActNvidia); err == nil {
			t.Errorf("amax %v accepted", bad)
		}
	}
	if _, err := kernels.NVFP4GlobalScale(1, "nvidia_headroom"); err == nil {
		t.Error("a headroom recipe accepted for the W4A linear")
	}
}

// Without a calibrated scale the operand's amax runs over every token, so a
// later token changes an earlier one's output (GPT-QModel's uncalibrated
// stream is not causal); with one it does not.
func TestW4ANVFP4DynamicIsNotCausal(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 1))
	b := New()
	ctx := context.Background()
	w := randomWeight(r, "m", 128, 32, false)
	x := randomActs(r, 2, 128)
	run := func(x kernels.Matrix, g float32) []float32 {
		a, err := b.W4ANVFP4Quantize(ctx, x, kernels.ActLeastSquares, g)
		if err != nil {
			t.Fatal(err)
		}
		y, err := b.W4ANVFP4Linear(ctx, a, w)
		if err != nil {
			t.Fatal(err)
		}
		return y.Data[:32]
	}
	x2 := kernels.Matrix{Rows: 2, Cols: 128, Data: append([]float32(nil), x.Data...)}
	x2.Data[128+5] = 1e4 // the second token's outlier
	d0, d1 := run(x, 0), run(x2, 0)
	c0, c1 := run(x, 0.05), run(x2, 0.05)
	same := func(a, b []float32) bool {
		for i := range a {
			if a[i] != b[i] {
				return false
			}
		}
		return true
	}
	if same(d0, d1) {
		t.Error("dynamic: token 0's output ignored token 1's outlier")
	}
	if !same(c0, c1) {
		t.Error("calibrated: token 0's output changed with token 1")
	}
}

func TestW4ANVFP4Validation(t *testing.T) {
	b := New()
	ctx := context.Background()
	if _, err := b.W4ANVFP4Quantize(ctx, kernels.Matrix{Rows: 1, Cols: 16, Data: []float32{float32(math.NaN()), 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}}, "", 0); err == nil {
		t.Error("NaN input accepted")
	}
	if _, err := b.W4ANVFP4Quantize(ctx, kernels.Matrix{Rows: 1, Cols: 8, Data: make([]float32, 8)}, "", 0); err == nil {
		t.Error("width 8 accepted")
	}
	if _, err := b.W4ANVFP4Quantize(ctx, kernels.Matrix{Rows: 1, Cols: 16, Data: make([]float32, 16)}, "lsq", 0); err == nil {
		t.Error("unknown recipe accepted")
	}
	a, err := b.W4ANVFP4Quantize(ctx, kernels.Matrix{Rows: 0, Cols: 128}, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	y, err := b.W4ANVFP4Linear(ctx, a, randomWeight(rand.New(rand.NewPCG(1, 1)), "m", 128, 32, false))
	if err != nil || y.Rows != 0 || len(y.Data) != 0 {
		t.Errorf("empty input: %v %v", y, err)
	}
}

// The largest group sums: every value saturating at E2M1 6 with the E4M3
// scale 448 (a calibrated global scale far below the operand's), against
// weights of all −8 or all 7: still exact, as the plain sum says.
func TestW4ANVFP4LargestSums(t *testing.T) {
	b := New()
	x := kernels.Matrix{Rows: 2, Cols: 128, Data: make([]float32, 256)}
	for i := range x.Data {
		x.Data[i] = 1000
		if i >= 128 {
			x.Data[i] = -1000
		}
	}
	w := &kernels.W4AWeight{Name: "m", In: 128, Out: 32, Codes: make([]int8, 128*32), Scales: make([]float32, 32)}
	for i := range w.Codes {
		w.Codes[i] = int8(-8 + 15*(i/128%2))
	}
	for i := range w.Scales {
		w.Scales[i] = 1
	}
	a, err := b.W4ANVFP4Quantize(context.Background(), x, kernels.ActNvidia, 1e-3)
	if err != nil {
		t.Fatal(err)
	}
	if a.Scales[0] != 0x7E || a.Codes[0] != 7 {
		t.Fatalf("scale code %#x, value code %d: not saturated", a.Scales[0], a.Codes[0])
	}
	y, err := b.W4ANVFP4Linear(context.Background(), a, w)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := refW4ANVFP4(x, w, kernels.ActNvidia, 1e-3)
	for i := range want {
		if y.Data[i] != want[i] {
			t.Fatalf("y[%d] = %v, want %v", i, y.Data[i], want[i])
		}
	}
	if want[0] != float32(float32(6*448*128*-8)*1e-3) {
		t.Fatalf("plain y[0] = %v", want[0])
	}
}
