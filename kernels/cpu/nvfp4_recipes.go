package cpu

import (
	"context"
	"fmt"
	"math"

	"github.com/quantscope/quantscope/kernels"
)

// sweep is ModelOpt's FP8 scale sweep (NUMERICS.md §2): every positive
// finite E4M3 code 0x01..0x7E as the block scale, the error of the values
// the file would hold, the lowest code at the minimum (strict <).
type sweep struct {
	six2 float32      // f32(6·scale_2), for the max recipe's code
	div  [128]float32 // div[c] = f32(f32(e4m3(c)) · scale_2); codes 0 and 0x7F unused
	rec  [128]float32 // rec[c] = f32(1/div[c]) where fast[c], else 0 (the SIMD sweep's table)
	fast [128]bool
}

func newSweep(scale2 float32) *sweep {
	s := &sweep{six2: 6 * scale2}
	for c := 1; c <= 0x7E; c++ {
		s.div[c] = blockDivisor(byte(c), scale2)
		s.rec[c], s.fast[c] = fastDiv(s.div[c])
		if !s.fast[c] {
			s.rec[c] = 0
		}
	}
	return s
}

// bestSSESIMD is bestSSE on the AVX-512 sweep kernel, sixteen candidates a
// call: max's code first (its error bounds the others), then each group of
// sixteen whose largest value's term alone does not already exceed the best
// error (a float32 sum of non-negative terms is at least each term), the
// candidates the kernel cannot vouch for recomputed with the division, the
// first minimum kept.
func (s *sweep) bestSSESIMD(w []float32, bamax float32) byte {
	var a [16]float32
	for j, x := range w[:16] {
		a[j] = abs32(x)
	}
	best := maxBlockScale(bamax, s.six2)
	bestErr := blockSSE(w, s.div[best])
	top := [1]float32{bamax}
	var sums [16]float32
	var ok uint16
	for base := 0; base < 128; base += 16 {
		sweepAVX512(&sums[0], &ok, &top[0], 1, &s.rec[base], &s.div[base])
		skip := true
		for i, t := range sums {
			c := base + i
			if c >= 1 && c <= 0x7E && (t < bestErr || t == bestErr && c < int(best) || !s.fast[c] || ok>>i&1 == 0) {
				skip = false
				break
			}
		}
		if skip {
			continue
		}
		sweepAVX512(&sums[0], &ok, &a[0], 16, &s.rec[base], &s.div[base])
		for i, e := range sums {
			c := base + i
			if c < 1 || c > 0x7E {
				continue
			}
			if !s.fast[c] || ok>>i&1 == 0 {
				e = blockSSE(w, s.div[c])
			}
			if e < bestErr || e == bestErr && c < int(best) {
				best, bestErr = byte(c), e
			}
		}
	}
	return best
}

// bestSSE is the mse recipe's code for one block: the lowest code whose
// squared error (blockSSE's, summed in element order) is least.
//
// It finds the same code as trying all 126 in order, with less work:
// max's code is tried first, so a near-best error is known early; a float32
// running sum of non-negative terms never decreases, so a candidate is
// dropped as soon as its partial sum shows it cannot beat the best (a tie
// still wins for a lower code); and once a candidate rounds every value to
// zero, every larger one has the same error and cannot win.
func (s *sweep) bestSSE(w []float32, bamax float32) byte {
	w = w[:16]
	if useSIMD && useAVX512 {
		return s.bestSSESIMD(w, bamax)
	}
	best := maxBlockScale(bamax, s.six2)
	top := maxIndex(w)
	bestErr, _ := s.sseUnder(w, top, int(best), float32(math.Inf(1)), false)
	for c := 1; c <= 0x7E; c++ {
		if c != int(best) {
			if e, ok := s.sseUnder(w, top, c, bestErr, c > int(best)); ok {
				best, bestErr = byte(c), e
			}
		}
		if e2m1Index(bamax/s.div[c]) == 0 {
			break
		}
	}
	return best
}

// sseUnder is blockSSE(w, div[c]) when it beats limit (below it, or equal
// to it when !strict), else false as soon as the partial sum shows it
// cannot.
// top is the index of the block's largest |w|.
func (s *sweep) sseUnder(w []float32, top, c int, limit float32, strict bool) (float32, bool) {
	d := s.div[c]
	if !s.fast[c] {
		e := blockSSE(w, d)
		return e, e < limit || (!strict && e == limit)
	}
	r := s.rec[c]
	// the largest value's term bounds the sum from below (a float32 sum of
	// non-negative terms is at least each term), so it is looked at first;
	// the sum itself still runs in element order
	if t := termSSE(w[top], d, r); t > limit || (strict && t == limit) {
		return t, false
	}
	var e float32
	for _, x := range w {
		a := abs32(x)
		q := math.Float32bits(a * r)
		var i byte
		if q < 0x00800000 || (q+4)&0xFFFFF < 8 {
			i = e2m1Index(a / d)
		} else {
			i = e2m1ByTop12[q>>20&0x7FF]
		}
		diff := a - float32(e2m1Mag[i]*d)
		e += float32(diff * diff)
		if e > limit || (strict && e == limit) {
			return e, false
		}
	}
	return e, true
}

// hessian16 is one input block's normalised second moment H = Σ x xᵀ / tokens.
type hessian16 [16][16]float32

// blockHessians computes H_n for every 16-wide input block of the
// activations [tokens, in]: a float32 sum over tokens, then the division by
// the token count (ModelOpt's _LocalHessianAccumulator).
func (b *Backend) blockHessians(ctx context.Context, x kernels.Matrix, in int) ([]hessian16, error) {
	if x.Cols != in {
		return nil, fmt.Errorf("rule local-hessian-data: calibration activations have %d columns, the weight has %d inputs", x.Cols, in)
	}
	if x.Rows <= 0 || len(x.Data) != x.Rows*x.Cols {
		return nil, fmt.Errorf("rule local-hessian-data: calibration activations hold %d values for %d tokens × %d inputs", len(x.Data), x.Rows, x.Cols)
	}
	var amax float32
	for i, v := range x.Data {
		if !(abs32(v) <= math.MaxFloat32) {
			return nil, fmt.Errorf("rule local-hessian-data: activation [%d, %d] is %v; calibration data must be finite", i/x.Cols, i%x.Cols, v)
		}
		amax = max(amax, abs32(v))
	}
	nb := in / 16
	hs := make([]hessian16, nb)
	// Parallel over input blocks (each H_n is independent): rows of the
	// "matrix" of blocks, one block a row.
	err := b.eachRows(ctx, nb, 16*16*x.Rows/16, nil, func(lo, hi int) error {
		for n := lo; n < hi; n++ {
			h := &hs[n]
			for t := range x.Rows {
				v := x.Data[t*x.Cols+16*n : t*x.Cols+16*n+16]
				for i := range 16 {
					for j := range 16 {
						h[i][j] += float32(v[i] * v[j])
					}
				}
			}
			tok := float32(x.Rows)
			for i := range 16 {
				for j := range 16 {
					h[i][j] /= tok
				}
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	// Finite activations can still have sums of products past float32's
	// range; every candidate's loss would then be Inf or NaN and the sweep
	// would pick a code by its comparisons' accident.
	for n := range hs {
		for i := range 16 {
			for j := range 16 {
				if v := hs[n][i][j]; !(abs32(v) <= math.MaxFloat32) {
					return nil, fmt.Errorf("rule local-hessian-data: the second moment of input block %d (columns %d-%d) overflows float32 (Σ x xᵀ over %d tokens, activations up to %g); calibration data this large must be scaled down", n, 16*n, 16*n+15, x.Rows, amax)
				}
			}
		}
	}
	return hs, nil
}

// lossesFit refuses moments under which a candidate's loss dwᵀ H dw could
// leave float32's range: every candidate would tie at Inf (or lose to NaN)
// and the sweep would keep a code by accident. q(w) has w's sign, so |dw| ≤
// max(|w|, |q(w)|), and |q(w)| ≤ 6·d with d at most 448 · amax / 2688 =
// amax / 6 (up to float32 rounding): |dw| is about amax at most, and 256
// terms of max|H| · (2·amax)² bound the loss with room for the rounding.
func lossesFit(hs []hessian16, amax float32) error {
	var hmax float32
	for n := range hs {
		for i := range 16 {
			for j := range 16 {
				hmax = max(hmax, abs32(hs[n][i][j]))
			}
		}
	}
	a := 2 * float64(amax)
	if bound := 256 * float64(hmax) * a * a; bound > math.MaxFloat32/2 {
		return fmt.Errorf("rule local-hessian-data: the weighted block errors could overflow float32 (second moments up to %g, weights up to %g: a bound of %g); calibration data or weights this large must be scaled down", hmax, amax, bound)
	}
	return nil
}

// hessianLoss is dwᵀ H dw with dw = w − q(w) signed, in float32:
// Σ_i dw_i · (Σ_j H_ij dw_j), both sums in index order. With H = I it is
// exactly the plain squared error.
func hessianLoss(w []float32, d float32, h *hessian16) float32 {
	var dw [16]float32
	for i, x := range w[:16] {
		dw[i] = x - float32(e2m1Value(e2m1Code(x/d))*d)
	}
	var loss float32
	for i := range 16 {
		var hd float32
		for j := range 16 {
			hd += float32(h[i][j] * dw[j])
		}
		loss += float32(dw[i] * hd)
	}
	return loss
}

// bestHessian is the local_hessian recipe's code for one block.
func (s *sweep) bestHessian(w []float32, h *hessian16) byte {
	best, bestErr := byte(1), float32(math.Inf(1))
	for c := 1; c <= 0x7E; c++ {
		if e := hessianLoss(w, s.div[c], h); e < bestErr {
			best, bestErr = byte(c), e
		}
	}
	return best
}

// GPT-QModel's block algorithms (activation_floatx.py:210-297), shared by
// the weight recipes four_six / least_squares and the W4A-NVFP4 activations.
const (
	blockNvidia           = iota // seed M = 6 only
	blockFourSix                 // seeds M = 4 then M = 6
	blockLeastSquares            // four_six plus the least-squares refinements
	blockLeastSquaresGrid        // least_squares plus codes best±8 (clamped to 1..126)
)

// gptqmodelBlock is GPT-QModel's _nvfp4_mse_quantize_blocks for one block
// (NUMERICS.md §5) with global scale g: seeds M = 4 then M = 6 (M = 4 wins a
// tie), and for least_squares the refinement of each seed's values, then of
// the best values once more, each kept only when strictly better.
func gptqmodelBlock(w []float32, bamax, g float32, refine bool) byte {
	if refine {
		return gptqmodelBlockAlg(w, bamax, g, blockLeastSquares)
	}
	return gptqmodelBlockAlg(w, bamax, g, blockFourSix)
}

// gptqmodelBlockAlg is one block's scale code under block algorithm alg:
// the seeds inverse = f32(bamax / f32(M·g)) (1 for a zero block), clamped
// to [2^-9, 448] and cast to E4M3, each kept when its SSE is strictly lower
// than the best so far (which starts at +Inf, the code at 1.0 = 0x38 as
// GPT-QModel's best_local); then the refinements.
func gptqmodelBlockAlg(w []float32, bamax, g float32, alg int) byte {
	w = w[:16]
	bestCode, bestErr := byte(0x38), float32(math.Inf(1)) // best_local = ones_like(...) in E4M3: 1.0 until a seed is better
	seeds := []float32{4, 6}
	if alg == blockNvidia {
		seeds = seeds[1:]
	}
	var seedCodes [2]byte
	for k, m := range seeds {
		c := byte(0x38) // where(block_amax > 0, …, 1)
		if bamax > 0 {
			c = castScale(bamax / float32(m*g))
		}
		seedCodes[k] = c
		if e := blockSSE(w, blockDivisor(c, g)); e < bestErr {
			bestCode, bestErr = c, e
		}
	}
	if alg == blockNvidia || alg == blockFourSix {
		return bestCode
	}
	try := func(c byte) {
		if e := blockSSE(w, blockDivisor(c, g)); e < bestErr {
			bestCode, bestErr = c, e
		}
	}
	for _, c := range seedCodes {
		try(lsRefine(w, blockDivisor(c, g), g))
	}
	try(lsRefine(w, blockDivisor(bestCode, g), g))
	if alg == blockLeastSquaresGrid {
		center := int(bestCode)
		for off := -8; off <= 8; off++ {
			try(byte(min(max(center+off, 1), 126)))
		}
	}
	return bestCode
}

// lsRefine is GPT-QModel's refine(values): the least-squares scale of the
// E2M1 values the block takes with divisor d, opt = Σx·v / max(Σv², 1),
// back to a block scale opt / g, clamped and cast (1 when every value is 0).
func lsRefine(w []float32, d, g float32) byte {
	var den, num float32
	for _, x := range w[:16] {
		v := e2m1Mag[e2m1Index(abs32(x/d))]
		if x < 0 {
			v = -v
		}
		den += float32(v * v)
		num += float32(x * v)
	}
	if !(den > 0) {
		return 0x38
	}
	opt := num / max(den, 1)
	return castScale(opt / g)
}

// termSSE is one value's term of blockSSE with divisor d (r = f32(1/d)).
func termSSE(x, d, r float32) float32 {
	a := abs32(x)
	q := math.Float32bits(a * r)
	var i byte
	if q < 0x00800000 || (q+4)&0xFFFFF < 8 {
		i = e2m1Index(a / d)
	} else {
		i = e2m1ByTop12[q>>20&0x7FF]
	}
	diff := a - float32(e2m1Mag[i]*d)
	return float32(diff * diff)
}

// maxIndex is the index of the largest |w| of a block.
func maxIndex(w []float32) int {
	k, m := 0, uint32(0)
	for j, v := range w[:16] {
		if a := math.Float32bits(v) &^ (1 << 31); a > m {
			k, m = j, a
		}
	}
	return k
}
