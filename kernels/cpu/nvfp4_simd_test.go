package cpu

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/quantscope/quantscope/kernels"
)

// TestSIMDAndGoPathsAgree quantizes the same weights with the AVX2 kernels
// and with the Go path (and both against the plain reference), on weights
// that put many values exactly on and next to E2M1 decision points, zeros,
// -0 and subnormals.
func TestSIMDAndGoPathsAgree(t *testing.T) {
	rows, cols := 64, 256
	r := rand.New(rand.NewPCG(8, 9))
	w := testWeights(rows, cols, 13)
	w[0] = 2688 // scale_2 = 1: decision points land on exact values
	pts := []float32{0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5, 0.5, 3}
	for i := 3 * cols; i < 40*cols; i++ {
		if r.IntN(3) == 0 {
			continue
		}
		p := pts[r.IntN(len(pts))] * float32(math.Ldexp(1, r.IntN(8)-2))
		b := int32(math.Float32bits(p)) + int32(r.IntN(9)-4)
		v := math.Float32frombits(uint32(b))
		if r.IntN(2) == 0 {
			v = -v
		}
		w[i] = v
	}
	for i := 40 * cols; i < 41*cols; i++ {
		w[i] = []float32{0, float32(math.Copysign(0, -1)), 1e-42, -1e-42, -1e-38, 7}[i%6]
	}
	saved, saved512 := useSIMD, useAVX512
	defer func() { useSIMD, useAVX512 = saved, saved512 }()
	var outs [3]*kernels.NVFP4Result
	for k, simd := range []bool{false, true, true} {
		if simd && (!hasSIMD() || k == 2 && !hasAVX512Kernel()) {
			t.Log("this CPU lacks a SIMD kernel: its row compares the Go path with itself")
			outs[k] = outs[0]
			continue
		}
		useSIMD, useAVX512 = simd, k == 2
		res, err := (&Backend{Workers: 2}).QuantizeNVFP4(context.Background(), mat(rows, cols, w), kernels.NVFP4Options{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		outs[k] = res
		codes, scales, _ := refNVFP4Max(w, rows, cols)
		for i, c := range unpack(res.Packed) {
			if c != codes[i] {
				t.Fatalf("simd=%v: element %d (w=%g, scale %#x): code %#x, reference %#x", simd, i, w[i], scales[i/16], c, codes[i])
			}
		}
	}
	for i := range outs[0].Packed {
		if outs[0].Packed[i] != outs[1].Packed[i] || outs[0].Packed[i] != outs[2].Packed[i] {
			t.Fatalf("byte %d: Go %#x, AVX2 %#x, AVX-512 %#x", i, outs[0].Packed[i], outs[1].Packed[i], outs[2].Packed[i])
		}
	}
}

// TestSIMDKernelNearDecisionPoints drives the AVX2 kernel directly with
// random divisors and values within a few ulps of d·t for every decision
// point t: every block it does not flag must hold exactly the division's
// codes, and the flag must be needed (some of these values round across a
// decision point through the reciprocal).
func TestSIMDKernelNearDecisionPoints(t *testing.T) {
	if !hasSIMD() {
		t.Skip("no AVX2 on this CPU; the Go path is tested by TestE2M1FastMatchesDivision")
	}
	r := rand.New(rand.NewPCG(10, 11))
	const nb = 4096
	w := make([]float32, 16*nb)
	ds, recs := make([]float32, nb), make([]float32, nb)
	pts := []float32{0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5}
	for n := range nb {
		d := float32(math.Ldexp(1+r.Float64(), r.IntN(40)-20))
		ds[n] = d
		recs[n], _ = fastDiv(d)
		for j := range 16 {
			if r.IntN(8) != 0 { // most values anywhere, some ±0, a few at a decision point
				w[16*n+j] = float32(r.NormFloat64()*3) * d
				if r.IntN(6) == 0 {
					w[16*n+j] = float32(math.Copysign(0, float64(1-2*r.IntN(2))))
				}
				continue
			}
			base := pts[r.IntN(len(pts))] * d
			v := math.Float32frombits(uint32(int32(math.Float32bits(base)) + int32(r.IntN(13)-6)))
			if r.IntN(2) == 0 {
				v = -v
			}
			w[16*n+j] = v
		}
	}
	kernels := map[string]func(dst *byte, w *float32, scales *byte, tab *float32, n int, slow *byte) int{"avx2": encodeBlocksAVX2}
	if hasAVX512Kernel() {
		kernels["avx512"] = encodeBlocksAVX512
	}
	for name, kernel := range kernels {
		t.Run(name, func(t *testing.T) { checkNearDecisionPoints(t, kernel, w, ds, recs) })
	}
}

func checkNearDecisionPoints(t *testing.T, kernel func(dst *byte, w *float32, scales *byte, tab *float32, n int, slow *byte) int, w, ds, recs []float32) {
	// one table entry a block: block n uses code n%256 of a table that
	// holds the block's reciprocal (tables are per plan in use; here each
	// call covers 256 blocks)
	nb := len(ds)
	dst, slow := make([]byte, 8*nb), make([]byte, nb)
	codes := make([]byte, 256)
	for i := range codes {
		codes[i] = byte(i)
	}
	nslow := 0
	for base := 0; base < nb; base += 256 {
		nslow += kernel(&dst[8*base], &w[16*base], &codes[0], &recs[base], 256, &slow[base])
	}
	flagged, needed := 0, 0
	for n := range nb {
		for j := range 16 {
			x := w[16*n+j]
			want := e2m1Code(x / ds[n])
			viaRec := e2m1Index(abs32(x) * recs[n])
			if viaRec != want&7 {
				needed++
				if slow[n] == 0 {
					t.Fatalf("block %d: %g/%g rounds across a decision point through the reciprocal and was not flagged", n, x, ds[n])
				}
			}
			if slow[n] != 0 {
				continue
			}
			if got := dst[8*n+j/2] >> (4 * (j % 2)) & 0xF; got != want {
				t.Fatalf("block %d element %d: %g/%g: code %#x, division %#x", n, j, x, ds[n], got, want)
			}
		}
		flagged += int(slow[n])
	}
	if nslow != flagged {
		t.Fatalf("kernel counted %d flagged blocks, flags say %d", nslow, flagged)
	}
	if needed == 0 || flagged == nb {
		t.Fatalf("%d values needed the exact path, %d of %d blocks flagged: the test does not exercise the margin", needed, flagged, nb)
	}
}

// TestMaxScalesSIMD: the AVX2 max-recipe scale codes against maxBlockScale
// on block amaxes over the whole range (zero, subnormal and clamped scales,
// E4M3 rounding ties).
func TestMaxScalesSIMD(t *testing.T) {
	if !hasSIMD() {
		t.Skip("no AVX2 on this CPU")
	}
	r := rand.New(rand.NewPCG(12, 13))
	for _, six2 := range []float32{1, 6, 0.0123, 3e-30, 7e20} {
		bam := make([]float32, 8*1024)
		for i := range bam {
			switch i % 4 {
			case 0:
				bam[i] = float32(math.Ldexp(r.Float64(), r.IntN(30)-20)) * six2
			case 1: // an E4M3 midpoint times six2 (a tie when the product is exact)
				c := byte(1 + r.IntN(0x7D))
				bam[i] = (numericE4M3(c) + numericE4M3(c+1)) / 2 * six2
			case 2:
				bam[i] = 0
			case 3:
				bam[i] = float32(r.Float64()) * 1e-3 * six2
			}
		}
		got := make([]byte, len(bam))
		maxScalesAVX2(&got[0], &bam[0], six2, len(bam))
		for i, b := range bam {
			if want := maxBlockScale(b, six2); got[i] != want {
				t.Fatalf("six2=%g amax=%g: code %#x, want %#x", six2, b, got[i], want)
			}
		}
	}
}

func numericE4M3(c byte) float32 { return e4m3Values[c] }

// TestMSEPathsAgree runs the mse recipe on the Go sweep and on the AVX-512
// sweep kernel, on random weights and on weights that are already NVFP4
// values (many exact zeros and exact E2M1 multiples, the case of
// re-quantizing a dequantized checkpoint), against the plain sweep.
func TestMSEPathsAgree(t *testing.T) {
	rows, cols := 48, 128
	w := testWeights(rows, cols, 17)
	r := rand.New(rand.NewPCG(14, 15))
	for i := 8 * cols; i < 30*cols; i++ {
		w[i] = float32([]float64{0, 0.5, 1, 1.5, 2, 3, 4, 6}[r.IntN(8)]) * 0.0078125 * float32(1-2*r.IntN(2))
	}
	saved, saved512 := useSIMD, useAVX512
	defer func() { useSIMD, useAVX512 = saved, saved512 }()
	for _, mode := range []struct{ simd, avx512 bool }{{false, false}, {true, false}, {true, true}} {
		if mode.simd && !hasSIMD() || mode.avx512 && !hasAVX512Kernel() {
			continue
		}
		useSIMD, useAVX512 = mode.simd, mode.avx512
		res, err := New().QuantizeNVFP4(context.Background(), mat(rows, cols, w), kernels.NVFP4Options{Recipe: "mse"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		for blk, c := range res.Scales {
			if want := refSweep(w[16*blk:16*blk+16], res.Scale2); c != want {
				t.Fatalf("%+v block %d: code %#x, plain sweep %#x", mode, blk, c, want)
			}
		}
	}
}

// TestSweepKernelExactness: every candidate the AVX-512 sweep kernel vouches
// for has exactly blockSSE's error, and every candidate for which the
// reciprocal would round some value across a decision point is not vouched
// for.
func TestSweepKernelExactness(t *testing.T) {
	if !hasAVX512Kernel() {
		t.Skip("no AVX-512 on this CPU")
	}
	r := rand.New(rand.NewPCG(16, 17))
	sw := newSweep(float32(math.Ldexp(1+r.Float64(), -7)))
	pts := []float32{0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5}
	needed, vouched := 0, 0
	for range 3000 {
		var w [16]float32
		for j := range w {
			c := 1 + r.IntN(0x7E)
			switch r.IntN(4) {
			case 0:
				w[j] = 0
			case 1:
				w[j] = float32(r.NormFloat64()) * sw.div[c] * 3
			default: // within a few ulps of a decision point of candidate c
				base := pts[r.IntN(len(pts))] * sw.div[c]
				w[j] = math.Float32frombits(uint32(int32(math.Float32bits(base)) + int32(r.IntN(9)-4)))
			}
		}
		var a [16]float32
		for j, x := range w {
			a[j] = abs32(x)
		}
		var sums [128]float32
		var ok [8]uint16
		for p := range 8 {
			sweepAVX512(&sums[16*p], &ok[p], &a[0], 16, &sw.rec[16*p], &sw.div[16*p])
		}
		for c := 1; c <= 0x7E; c++ {
			vouch := ok[c/16]>>(c%16)&1 == 1 && sw.fast[c]
			differs := false
			for _, x := range a {
				if e2m1Index(x*sw.rec[c]) != e2m1Index(x/sw.div[c]) {
					differs = true
				}
			}
			if differs {
				needed++
				if vouch {
					t.Fatalf("candidate %#x: the reciprocal rounds a value differently, and the kernel vouched for it", c)
				}
			}
			if vouch {
				vouched++
				if want := blockSSE(w[:], sw.div[c]); math.Float32bits(sums[c]) != math.Float32bits(want) {
					t.Fatalf("candidate %#x: kernel error %g, blockSSE %g", c, sums[c], want)
				}
			}
		}
	}
	if needed == 0 || vouched == 0 {
		t.Fatalf("needed %d, vouched %d: the test does not exercise both sides", needed, vouched)
	}
}
