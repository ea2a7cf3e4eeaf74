package cuda

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/quantscope/quantscope/kernels"
	"github.com/quantscope/quantscope/kernels/cpu"
	"github.com/quantscope/quantscope/kernels/cuda/wire"
)

// fakeQuant2 is the fake worker's quant2 operations, on the CPU backend;
// ok is false for other operations.
func fakeQuant2(be *cpu.Backend, req wire.Request, parts [][]byte) (wire.Response, [][]byte, bool, error) {
	ctx := context.Background()
	w := kernels.Matrix{Rows: int(req.Rows), Cols: int(req.Cols)}
	if len(parts) > 0 {
		w.Data = f32s(parts[0])
	}
	switch req.Op {
	case wire.OpQuantFP8:
		opt := kernels.FP8Options{Format: kernels.FP8E4M3, Scale: kernels.ScaleBlock, Block: [2]int{int(req.R), int(req.C)}, Inverse: req.Inv}
		if req.E5M2 {
			opt.Format = kernels.FP8E5M2
		}
		r, err := be.QuantizeFP8(ctx, w, opt, nil)
		if err != nil {
			return wire.Response{}, nil, true, err
		}
		return wire.Response{}, [][]byte{r.Codes, f32Bytes(r.Scales)}, true, nil
	case wire.OpQuantNVFP4GPTQ, wire.OpQuantNVFP4LH:
		opt := kernels.NVFP4Options{Recipe: req.Recipe}
		if req.Op == wire.OpQuantNVFP4LH {
			x := kernels.Matrix{Rows: int(req.T), Cols: int(req.Cols), Data: f32s(parts[1])}
			opt = kernels.NVFP4Options{Recipe: kernels.RecipeLocalHessian, Activations: &x}
		}
		r, err := be.QuantizeNVFP4(ctx, w, opt, nil)
		if err != nil {
			return wire.Response{}, nil, true, err
		}
		if r.Scale2 != req.Global {
			return wire.Response{}, nil, true, fmt.Errorf("global scale %g, the client sent %g", r.Scale2, req.Global)
		}
		return wire.Response{}, [][]byte{r.Packed, r.Scales}, true, nil
	}
	return wire.Response{}, nil, false, nil
}

func sameFP8(t *testing.T, what string, got, want *kernels.FP8Result) {
	t.Helper()
	if string(got.Codes) != string(want.Codes) || fmt.Sprint(got.ScaleShape) != fmt.Sprint(want.ScaleShape) {
		t.Fatalf("%s: codes or scale shape %v differ from the CPU backend's (%v)", what, got.ScaleShape, want.ScaleShape)
	}
	sameF32(t, what+" scales", got.Scales, want.Scales)
}

// fp8Both quantizes w to FP8 on b and on the CPU backend.
func fp8Both(t *testing.T, b *Backend, w kernels.Matrix, opt kernels.FP8Options) (got, want *kernels.FP8Result) {
	t.Helper()
	ctx := context.Background()
	got, err := b.QuantizeFP8(ctx, w, opt, nil)
	if err != nil {
		t.Fatal(err)
	}
	if want, err = cpu.New().QuantizeFP8(ctx, w, opt, nil); err != nil {
		t.Fatal(err)
	}
	return got, want
}

// nvfp4Both quantizes w to NVFP4 on b and on the CPU backend.
func nvfp4Both(t *testing.T, b *Backend, w kernels.Matrix, opt kernels.NVFP4Options) (got, want *kernels.NVFP4Result) {
	t.Helper()
	ctx := context.Background()
	got, err := b.QuantizeNVFP4(ctx, w, opt, nil)
	if err != nil {
		t.Fatal(err)
	}
	if want, err = cpu.New().QuantizeNVFP4(ctx, w, opt, nil); err != nil {
		t.Fatal(err)
	}
	return got, want
}

// fp8Options is every FP8 quantization the client sends for a 64×96 weight.
func fp8Options() []kernels.FP8Options {
	var opts []kernels.FP8Options
	for _, f := range []string{kernels.FP8E4M3, kernels.FP8E5M2} {
		for _, inv := range []bool{false, true} {
			opts = append(opts,
				kernels.FP8Options{Format: f, Scale: kernels.ScaleTensor, Inverse: inv},
				kernels.FP8Options{Format: f, Scale: kernels.ScaleRow, Inverse: inv},
				kernels.FP8Options{Format: f, Inverse: inv}, // row by default
				kernels.FP8Options{Format: f, Scale: kernels.ScaleBlock, Block: [2]int{16, 32}, Inverse: inv})
		}
	}
	return opts
}

func testActivations(tokens, cols int, seed uint64) *kernels.Matrix {
	r := rand.New(rand.NewPCG(seed, 3))
	x := &kernels.Matrix{Rows: tokens, Cols: cols, Data: make([]float32, tokens*cols)}
	for i := range x.Data {
		x.Data[i] = float32(r.NormFloat64())
	}
	return x
}

// TestFakeWorkerQuant2: through the protocol, the FP8 and NVFP4 recipe
// results equal the CPU backend's, and nothing falls back.
func TestFakeWorkerQuant2(t *testing.T) {
	b, l := openFake(t, "cpu")
	w := testWeight(64, 96, 5)
	for _, opt := range fp8Options() {
		got, want := fp8Both(t, b, w, opt)
		sameFP8(t, fmt.Sprintf("%+v", opt), got, want)
	}
	x := testActivations(20, 96, 1)
	for _, recipe := range []string{kernels.RecipeFourSix, kernels.RecipeLeastSquares, kernels.RecipeLocalHessian} {
		got, want := nvfp4Both(t, b, w, kernels.NVFP4Options{Recipe: recipe, Activations: x})
		sameNVFP4(t, recipe, got, want)
	}
	if l.n() != 0 {
		t.Fatalf("fell back: %s", l.all())
	}
}

// TestFakeWorkerQuant2Routes: the operations go to the worker (a worker
// short of memory makes each say so and run on the CPU), and input the CPU
// refuses gets the CPU's error without reaching the worker.
func TestFakeWorkerQuant2Routes(t *testing.T) {
	b, l := openFake(t, "lowmem")
	ctx := context.Background()
	w := testWeight(1024, 512, 6) // over the fake's 1 MiB free
	if _, err := b.QuantizeFP8(ctx, w, kernels.FP8Options{Format: kernels.FP8E4M3, Scale: kernels.ScaleTensor}, nil); err != nil {
		t.Fatal(err)
	}
	for _, recipe := range []string{kernels.RecipeFourSix, kernels.RecipeLeastSquares, kernels.RecipeLocalHessian} {
		if _, err := b.QuantizeNVFP4(ctx, w, kernels.NVFP4Options{Recipe: recipe, Activations: testActivations(4, 512, 2)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	msgs := l.all()
	for _, op := range []string{"quant_fp8", "quant_nvfp4_gptq", "quant_nvfp4_lh"} {
		if !strings.Contains(msgs, "cuda: "+op+" runs on the CPU") {
			t.Errorf("no fallback line for %s in %q", op, msgs)
		}
	}
	n := l.n()
	bad := testWeight(4, 32, 1)
	bad.Data[37] = float32(math.Inf(-1))
	if _, err := b.QuantizeFP8(ctx, bad, kernels.FP8Options{Format: kernels.FP8E4M3}, nil); err == nil || !strings.Contains(err.Error(), "rule quantize-finite: weight [1, 5]") {
		t.Fatalf("non-finite FP8 weight: %v", err)
	}
	if _, err := b.QuantizeFP8(ctx, testWeight(4, 32, 1), kernels.FP8Options{Format: kernels.FP8E4M3, Scale: kernels.ScaleBlock, Block: [2]int{3, 32}}, nil); err == nil || !strings.Contains(err.Error(), "rule fp8-block") {
		t.Fatalf("block not dividing: %v", err)
	}
	if _, err := b.QuantizeFP8(ctx, testWeight(4, 32, 1), kernels.FP8Options{Format: "e3m4"}, nil); err == nil || !strings.Contains(err.Error(), "rule fp8-format") {
		t.Fatalf("unknown format: %v", err)
	}
	if _, err := b.QuantizeNVFP4(ctx, bad, kernels.NVFP4Options{Recipe: kernels.RecipeFourSix}, nil); err == nil || !strings.Contains(err.Error(), "rule quantize-finite") {
		t.Fatalf("non-finite NVFP4 weight: %v", err)
	}
	if _, err := b.QuantizeNVFP4(ctx, testWeight(4, 32, 1), kernels.NVFP4Options{Recipe: kernels.RecipeLocalHessian}, nil); err == nil || !strings.Contains(err.Error(), "rule local-hessian-data") {
		t.Fatalf("local_hessian without activations: %v", err)
	}
	xbad := testActivations(3, 32, 1)
	xbad.Data[40] = float32(math.NaN())
	if _, err := b.QuantizeNVFP4(ctx, testWeight(4, 32, 1), kernels.NVFP4Options{Recipe: kernels.RecipeLocalHessian, Activations: xbad}, nil); err == nil || !strings.Contains(err.Error(), "rule local-hessian-data: activation [1, 8]") {
		t.Fatalf("non-finite activation: %v", err)
	}
	// Finite activations whose second moments may overflow float32 stay on
	// the CPU, which names the block (the worker's answer would start
	// "cuda OP:"; a GPU's kernel would not check and return codes).
	xbig := testActivations(8, 32, 1)
	for tk := range 8 {
		xbig.Data[tk*32+20] = 1e19
	}
	if _, err := b.QuantizeNVFP4(ctx, testWeight(4, 32, 1), kernels.NVFP4Options{Recipe: kernels.RecipeLocalHessian, Activations: xbig}, nil); err == nil || strings.HasPrefix(err.Error(), "cuda ") || !strings.Contains(err.Error(), "input block 1 (columns 16-31) overflows float32") {
		t.Fatalf("overflowing moments: %v", err)
	}
	if _, err := b.BlockHessians(ctx, *xbig); err == nil || strings.HasPrefix(err.Error(), "cuda ") || !strings.Contains(err.Error(), "input block 1 (columns 16-31) overflows float32") {
		t.Fatalf("overflowing moments, calibration: %v", err)
	}
	for tk := range 8 {
		xbig.Data[tk*32+20] = 1e16 // moments of 1e32 fit; with weights of 1e4 the losses may not
	}
	wbig := testWeight(4, 32, 1)
	for i := range wbig.Data {
		wbig.Data[i] = 1e4 * float32(1+i%3)
	}
	if _, err := b.QuantizeNVFP4(ctx, wbig, kernels.NVFP4Options{Recipe: kernels.RecipeLocalHessian, Activations: xbig}, nil); err == nil || strings.HasPrefix(err.Error(), "cuda ") || !strings.Contains(err.Error(), "weighted block errors could overflow") {
		t.Fatalf("overflowing losses: %v", err)
	}
	if l.n() != n {
		t.Fatalf("refused input reached the worker: %s", l.all())
	}
}

// TestFakeWorkerRecipeReport: the report from the worker's quantizations
// equals the CPU backend's (every recipe, local_hessian included), each
// recipe going to the worker; refused input keeps the CPU's error.
func TestFakeWorkerRecipeReport(t *testing.T) {
	ctx := context.Background()
	w := testWeight(1024, 512, 8)
	opt := kernels.ReportOptions{Recipes: []string{kernels.RecipeMSE, kernels.RecipeFourSix, kernels.RecipeLeastSquares, kernels.RecipeLocalHessian}, Activations: testActivations(16, 512, 4)}
	want, err := cpu.New().RecipeReport(ctx, w, opt, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, l := openFake(t, "cpu")
	var last [2]int64
	got, err := b.RecipeReport(ctx, w, opt, func(done, total int64) { last = [2]int64{done, total} })
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("report differs from the CPU backend's:\n%+v\n%+v", got.Recipes, want.Recipes)
	}
	if len(got.Recipes) != 5 || got.Recipes[0].Recipe != kernels.RecipeMax || last != [2]int64{5 * 1024, 5 * 1024} {
		t.Fatalf("recipes %d (first %s), last progress %v", len(got.Recipes), got.Recipes[0].Recipe, last)
	}
	if l.n() != 0 {
		t.Fatalf("fell back: %s", l.all())
	}
	lb, ll := openFake(t, "lowmem")
	if _, err := lb.RecipeReport(ctx, w, opt, nil); err != nil {
		t.Fatal(err)
	}
	for _, op := range []string{"quant_nvfp4", "quant_nvfp4_gptq", "quant_nvfp4_lh"} {
		if !strings.Contains(ll.all(), "cuda: "+op+" runs on the CPU") {
			t.Errorf("%s did not go to the worker: %q", op, ll.all())
		}
	}
	bad := testWeight(4, 32, 1)
	bad.Data[3] = float32(math.NaN())
	if _, err := b.RecipeReport(ctx, bad, kernels.ReportOptions{}, nil); err == nil || !strings.Contains(err.Error(), "rule quantize-finite") {
		t.Fatalf("non-finite weight: %v", err)
	}
	if _, err := b.RecipeReport(ctx, testWeight(4, 32, 1), kernels.ReportOptions{Recipes: []string{"best"}}, nil); err == nil || !strings.Contains(err.Error(), "rule nvfp4-recipe") {
		t.Fatalf("unknown recipe: %v", err)
	}
}
