package cuda

import (
	"context"
	"fmt"
	"math"
	"reflect"
	"testing"

	"github.com/quantscope/quantscope/formats/numeric"
	"github.com/quantscope/quantscope/kernels"
	"github.com/quantscope/quantscope/kernels/cpu"
	"github.com/quantscope/quantscope/synth"
)

// Parity of quant2's kernels (ptx/fp8_quant.cu, ptx/nvfp4_recipes.cu) on a
// real GPU with the CPU backend, bit for bit; they skip without one.

// fp8EdgeWeight is wideWeight with rows of FP8's edge cases: all zeros
// (scale 1), float32 subnormals (the inverse scale held at the largest
// float32, the direct one at the smallest), values near float32's max, and
// rows whose amax is the format's max (scale 1) made of grid points and
// the round-to-even ties between them.
func fp8EdgeWeight(rows, cols int, fmax float32, seed uint64) kernels.Matrix {
	w := wideWeight(rows, cols, seed)
	dec, top := numeric.E4M3ToFloat32, 0x7E
	if fmax > 448 {
		dec, top = numeric.E5M2ToFloat32, 0x7B
	}
	for r := range rows {
		row := w.Data[r*cols : (r+1)*cols]
		for j := range row {
			switch r % 11 {
			case 3:
				row[j] = 0
			case 5:
				row[j] = math.Float32frombits(uint32(j*7919%1024)) * float32(1-2*(j&1))
			case 7:
				row[j] = float32(1-2*(j&1)) * math.MaxFloat32 / float32(1+j%5)
			case 9:
				c := byte((j * 37) % top)
				a, b := dec(c), dec(c+1)
				row[j] = a + (b-a)/2
				if j%3 == 0 {
					row[j] = -a
				}
				if j == 0 {
					row[j] = fmax
				}
			}
		}
	}
	return w
}

func TestGPUParityQuantizeFP8(t *testing.T) {
	b := gpuBackend(t)
	for _, shape := range [][2]int{{11, 48}, {256, 512}, {2048, 4096}} {
		rows, cols := shape[0], shape[1]
		for _, f := range []string{kernels.FP8E4M3, kernels.FP8E5M2} {
			fmax := float32(448)
			if f == kernels.FP8E5M2 {
				fmax = 57344
			}
			w := fp8EdgeWeight(rows, cols, fmax, uint64(rows))
			blk := [2]int{1, 16}
			if rows%128 == 0 {
				blk = [2]int{128, 128}
			}
			for _, inv := range []bool{false, true} {
				// the 2048×4096 tensor scale spans more rows than a piece:
				// the worker's three-pass path
				for _, opt := range []kernels.FP8Options{
					{Format: f, Scale: kernels.ScaleTensor, Inverse: inv},
					{Format: f, Scale: kernels.ScaleRow, Inverse: inv},
					{Format: f, Scale: kernels.ScaleBlock, Block: blk, Inverse: inv},
				} {
					got, want := fp8Both(t, b, w, opt)
					what := fmt.Sprintf("%v %+v", shape, opt)
					sameF32(t, what+" scales", got.Scales, want.Scales)
					for i, c := range want.Codes {
						if got.Codes[i] != c {
							t.Fatalf("%s: code [%d, %d] of %g is %#02x, CPU %#02x", what, i/cols, i%cols, w.Data[i], got.Codes[i], c)
						}
					}
					sameFP8(t, what, got, want)
				}
			}
		}
	}
}

func TestGPUParityQuantizeNVFP4Recipes(t *testing.T) {
	b := gpuBackend(t)
	check := func(what string, w kernels.Matrix, opt kernels.NVFP4Options) {
		t.Helper()
		got, want := nvfp4Both(t, b, w, opt)
		for i := range want.Scales {
			if got.Scales[i] != want.Scales[i] {
				t.Fatalf("%s: block %d scale code %#x, CPU %#x", what, i, got.Scales[i], want.Scales[i])
			}
		}
		sameNVFP4(t, what, got, want)
	}
	for _, shape := range [][2]int{{1, 16}, {97, 1024}, {512, 4096}} {
		for k, w := range []kernels.Matrix{wideWeight(shape[0], shape[1], uint64(shape[0])), seedTieWeight(shape[0], shape[1], 1)} {
			for _, recipe := range []string{kernels.RecipeFourSix, kernels.RecipeLeastSquares} {
				check(fmt.Sprint(recipe, shape, " weight ", k), w, kernels.NVFP4Options{Recipe: recipe})
			}
		}
	}
	// local_hessian: 8000 tokens of 1024 inputs are more than one piece of
	// the second moments' accumulation
	for _, s := range [][3]int{{1, 16, 3}, {97, 1024, 8000}, {256, 2048, 64}} {
		w := testWeight(s[0], s[1], uint64(s[1]))
		check(fmt.Sprint("local_hessian ", s), w, kernels.NVFP4Options{Recipe: kernels.RecipeLocalHessian, Activations: testActivations(s[2], s[1], 9)})
	}
}

// seedTieWeight is synth.NVFP4SeedTie: the two GPT-QModel seeds tie at
// error 0 on every block and M = 4's codes must win.
func seedTieWeight(rows, cols int, seed uint64) kernels.Matrix {
	return kernels.Matrix{Rows: rows, Cols: cols, Data: synth.NVFP4SeedTie(rows, cols, seed)}
}

// TestGPUParityRecipeReport: the report from the GPU's quantizations
// equals the CPU backend's, every recipe.
func TestGPUParityRecipeReport(t *testing.T) {
	b := gpuBackend(t)
	ctx := context.Background()
	w := testWeight(256, 1024, 12)
	opt := kernels.ReportOptions{Recipes: []string{kernels.RecipeMax, kernels.RecipeMSE, kernels.RecipeFourSix, kernels.RecipeLeastSquares, kernels.RecipeLocalHessian}, Activations: testActivations(32, 1024, 5)}
	got, err := b.RecipeReport(ctx, w, opt, nil)
	if err != nil {
		t.Fatal(err)
	}
	want, err := cpu.New().RecipeReport(ctx, w, opt, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("report differs from the CPU backend's:\n%+v\n%+v", got.Recipes, want.Recipes)
	}
}
