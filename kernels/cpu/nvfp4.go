package cpu

import (
	"context"
	"fmt"
	"math"

	"github.com/quantscope/quantscope/formats/numeric"
	"github.com/quantscope/quantscope/kernels"
)

// NVFP4 arithmetic, in float32 with one rounding per operation in the
// producers' order (NUMERICS.md §1, §2, §5). Go may fuse a*b+c into one
// FMA on some targets; every product that feeds a sum is converted to
// float32 explicitly, which the spec says rounds it.

const (
	e4m3MinScale = 0x1p-9 // the smallest E4M3 subnormal, the clamp's floor
	e4m3MaxScale = 448
)

// e4m3Values decodes every E4M3 code.
var e4m3Values = func() (t [256]float32) {
	for c := range 256 {
		t[c] = numeric.E4M3ToFloat32(byte(c))
	}
	return t
}()

// e2m1Mag is the magnitude of E2M1 codes 0..7.
var e2m1Mag = [8]float32{0, 0.5, 1, 1.5, 2, 3, 4, 6}

// e2m1Index rounds |x| to the nearest E2M1 magnitude index, ties to the even
// mantissa, saturating at 6: ModelOpt's searchsorted on the bounds plus the
// three upward ties, GPT-QModel's thresholds (> .25, >= .75, > 1.25,
// >= 1.75, > 2.5, >= 3.5, > 5).
func e2m1Index(a float32) byte {
	var i byte
	if a > 0.25 {
		i++
	}
	if a >= 0.75 {
		i++
	}
	if a > 1.25 {
		i++
	}
	if a >= 1.75 {
		i++
	}
	if a > 2.5 {
		i++
	}
	if a >= 3.5 {
		i++
	}
	if a > 5 {
		i++
	}
	return i
}

// e2m1Code is ModelOpt's _cast_fp4: sign = (x < 0), so -0 gives code 0 and
// a negative value that rounds to zero gives code 8.
func e2m1Code(x float32) byte {
	i := e2m1Index(abs32(x))
	if x < 0 {
		i |= 8
	}
	return i
}

// e2m1Value is the signed value of a code.
func e2m1Value(c byte) float32 {
	v := e2m1Mag[c&7]
	if c&8 != 0 {
		return -v
	}
	return v
}

// castScale is the clamp to [2^-9, 448] and the E4M3 cast of a block scale.
func castScale(s float32) byte {
	return e4m3Scale(min(max(s, e4m3MinScale), e4m3MaxScale))
}

// blockDivisor is the divisor of a block's elements, f32(f32(scale)·scale_2).
func blockDivisor(code byte, scale2 float32) float32 { return e4m3Values[code] * scale2 }

// encodeBlock writes the packed codes of 16 values with divisor d.
func encodeBlock(dst []byte, w []float32, d float32) {
	r, ok := fastDiv(d)
	encodeBlockRec(dst, w, d, r, ok)
}

// encodeBlockRec is encodeBlock with d's reciprocal from fastDiv given.
func encodeBlockRec(dst []byte, w []float32, d, r float32, ok bool) {
	w = w[:16]
	dst = dst[:8]
	if ok {
		var c [16]byte
		for j, x := range w {
			// e2m1CodeFast, inlined by hand: this loop is the quantizer's
			// bandwidth. r > 0, so x·r carries x's sign.
			qb := math.Float32bits(x * r)
			q := qb &^ (1 << 31)
			if q < 0x00800000 || (q+4)&0xFFFFF < 8 {
				c[j] = e2m1Code(x / d)
			} else {
				c[j] = e2m1ByTop12[q>>20&0x7FF] | byte(qb>>31)<<3
			}
		}
		for j := range 8 {
			dst[j] = c[2*j] | c[2*j+1]<<4
		}
		return
	}
	for j := range 8 {
		lo := e2m1Code(w[2*j] / d)
		hi := e2m1Code(w[2*j+1] / d)
		dst[j] = lo | hi<<4
	}
}

// blockSSE is the squared error of the values a file holds for this block
// with divisor d: Σ (w - f32(e2m1(w/d)·d))², summed in element order.
func blockSSE(w []float32, d float32) float32 {
	w = w[:16]
	var e float32
	if r, ok := fastDiv(d); ok {
		for _, x := range w {
			a := abs32(x)
			diff := a - float32(e2m1Mag[e2m1IndexFast(a, d, r)]*d)
			e += float32(diff * diff)
		}
		return e
	}
	for _, x := range w {
		v := float32(e2m1Mag[e2m1Index(abs32(x/d))] * d)
		diff := abs32(x) - v
		e += float32(diff * diff)
	}
	return e
}

// modelOptScale2 is ModelOpt's global scale f32(amax / 2688). An all-zero
// weight would give 0 and NaN block scales in ModelOpt; it gets 1 here (every
// block scale is then 1.0, every code 0).
func modelOptScale2(amax float32) (float32, error) {
	if amax == 0 {
		return 1, nil
	}
	return globalScale(amax, 6*448)
}

// globalScale is f32(amax / den), refused when the smallest block scale
// times it underflows float32 (the block divisors would be 0).
func globalScale(amax, den float32) (float32, error) {
	g := amax / den
	if float32(e4m3MinScale*g) == 0 {
		return 0, fmt.Errorf("rule nvfp4-global-scale: weight amax %g gives global scale %g, too small for float32 block divisors", amax, g)
	}
	return g, nil
}

// maxBlockScale is ModelOpt's max recipe for one block: the product
// f32(6·scale_2) first, one division, s == 0 → 1 before the clamp, E4M3.
func maxBlockScale(bamax, six2 float32) byte {
	s := bamax / six2
	if s == 0 {
		s = 1
	}
	return castScale(s)
}

// nvfp4Plan is what a recipe needs for every block: the global scale and a
// chooser of one block's scale code. n is the block's index along the row,
// bamax the block's largest |w|.
type nvfp4Plan struct {
	scale2 float32
	choose func(w []float32, n int, bamax float32) byte
	six2   float32 // the max recipe's f32(6·scale_2); 0 for the others
}

// QuantizeNVFP4 implements kernels.Quantizer.
func (b *Backend) QuantizeNVFP4(ctx context.Context, w kernels.Matrix, opt kernels.NVFP4Options, p kernels.Progress) (*kernels.NVFP4Result, error) {
	if err := checkNVFP4(w); err != nil {
		return nil, err
	}
	amax, err := b.globalAmax(ctx, w)
	if err != nil {
		return nil, err
	}
	plan, err := b.plan(ctx, w, amax, opt)
	if err != nil {
		return nil, err
	}
	return b.runPlan(ctx, w, plan, p)
}

func checkNVFP4(w kernels.Matrix) error {
	if err := checkWeight(w); err != nil {
		return err
	}
	if w.Cols%16 != 0 {
		return fmt.Errorf("rule nvfp4-shape: %d input columns are not a multiple of NVFP4's 16-value block", w.Cols)
	}
	return nil
}

// plan sets up a recipe.
func (b *Backend) plan(ctx context.Context, w kernels.Matrix, amax float32, opt kernels.NVFP4Options) (*nvfp4Plan, error) {
	switch opt.Recipe {
	case kernels.RecipeMax, "":
		s2, err := modelOptScale2(amax)
		if err != nil {
			return nil, err
		}
		six2 := 6 * s2
		return &nvfp4Plan{s2, func(_ []float32, _ int, bamax float32) byte { return maxBlockScale(bamax, six2) }, six2}, nil
	case kernels.RecipeMSE:
		s2, err := modelOptScale2(amax)
		if err != nil {
			return nil, err
		}
		sw := newSweep(s2)
		return &nvfp4Plan{s2, func(x []float32, _ int, bamax float32) byte { return sw.bestSSE(x, bamax) }, 0}, nil
	case kernels.RecipeLocalHessian:
		s2, err := modelOptScale2(amax)
		if err != nil {
			return nil, err
		}
		if opt.Activations == nil {
			return nil, fmt.Errorf("rule local-hessian-data: local_hessian needs calibration activations [tokens, %d] (--data FILE)", w.Cols)
		}
		hs, err := b.blockHessians(ctx, *opt.Activations, w.Cols)
		if err != nil {
			return nil, err
		}
		if err := lossesFit(hs, amax); err != nil {
			return nil, err
		}
		sw := newSweep(s2)
		return &nvfp4Plan{s2, func(x []float32, n int, _ float32) byte { return sw.bestHessian(x, &hs[n]) }, 0}, nil
	case kernels.RecipeFourSix, kernels.RecipeLeastSquares:
		g := float32(1)
		if amax != 0 {
			var err error
			if g, err = globalScale(amax, 448*4); err != nil {
				return nil, err
			}
		}
		refine := opt.Recipe == kernels.RecipeLeastSquares
		return &nvfp4Plan{g, func(x []float32, _ int, bamax float32) byte { return gptqmodelBlock(x, bamax, g, refine) }, 0}, nil
	}
	return nil, fmt.Errorf("rule nvfp4-recipe: unknown recipe %q (want max, mse, four_six, least_squares or local_hessian)", opt.Recipe)
}

// runPlan chooses every block's scale and encodes its elements as §1 does.
func (b *Backend) runPlan(ctx context.Context, w kernels.Matrix, plan *nvfp4Plan, p kernels.Progress) (*kernels.NVFP4Result, error) {
	nb := w.Cols / 16
	res := &kernels.NVFP4Result{
		Packed: make([]byte, len(w.Data)/2),
		Scales: make([]byte, w.Rows*nb),
		Scale2: plan.scale2,
		Rows:   w.Rows, Cols: w.Cols,
	}
	// every block divisor this plan can use, and its reciprocal
	var divs, recs [128]float32
	var fast [128]bool
	for c := range divs {
		divs[c] = blockDivisor(byte(c), plan.scale2)
		recs[c], fast[c] = fastDiv(divs[c])
	}
	// the SIMD kernels' reciprocal table: 0 where the division must decide
	// (the kernel flags a block whose products are all 0)
	var simdRecs [256]float32
	for c := range recs {
		if fast[c] {
			simdRecs[c] = recs[c]
		}
	}
	simd := useSIMD
	err := b.eachRows(ctx, w.Rows, w.Cols, p, func(lo, hi int) error {
		var slow []byte
		if simd {
			slow = make([]byte, nb)
		}
		bam := make([]float32, nb) // the row's block amaxes (finite: globalAmax checked)
		for r := lo; r < hi; r++ {
			rowBlockAmax(bam, w.Data[r*w.Cols:(r+1)*w.Cols])
			if simd {
				// the row's scales first, then its elements on the SIMD kernel;
				// a block it flags is redone with the exact division
				vec := 0
				if plan.six2 != 0 { // the max recipe's codes, eight blocks at a time
					vec = nb &^ 7
					if vec > 0 {
						maxScalesAVX2(&res.Scales[r*nb], &bam[0], plan.six2, vec)
					}
				}
				for n := vec; n < nb; n++ {
					i := r*w.Cols + 16*n
					res.Scales[r*nb+n] = plan.choose(w.Data[i:i+16], n, bam[n]) & 0x7F
				}
				if encodeBlocks(&res.Packed[r*w.Cols/2], &w.Data[r*w.Cols], &res.Scales[r*nb], &simdRecs[0], nb, &slow[0]) > 0 {
					for n, s := range slow {
						if s != 0 {
							i := r*w.Cols + 16*n
							c := res.Scales[r*nb+n]
							encodeBlockRec(res.Packed[i/2:i/2+8], w.Data[i:i+16], divs[c], recs[c], fast[c])
						}
					}
				}
				continue
			}
			for n := range nb {
				i := r*w.Cols + 16*n
				x := w.Data[i : i+16]
				c := plan.choose(x, n, bam[n]) & 0x7F // a chooser gives positive codes 0x01..0x7E
				res.Scales[r*nb+n] = c
				encodeBlockRec(res.Packed[i/2:i/2+8], x, divs[c], recs[c], fast[c])
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}

// Dequantize returns the values an NVFP4 result stores, as a reader
// computes them: e2m1 · f32(f32(scale) · scale_2).
func dequantNVFP4(r *kernels.NVFP4Result) []float32 {
	out := make([]float32, r.Rows*r.Cols)
	nb := r.Cols / 16
	for i := range out {
		c := r.Packed[i/2] >> (4 * (i & 1))
		blk := (i/r.Cols)*nb + (i%r.Cols)/16
		out[i] = e2m1Value(c) * blockDivisor(r.Scales[blk], r.Scale2)
	}
	return out
}
