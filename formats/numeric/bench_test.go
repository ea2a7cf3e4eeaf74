package numeric

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// The bulk decoders are measured against a memmove of the same output size:
// SetBytes counts output bytes (4 per float32) so the MB/s columns compare.
// Two sizes: 1 Mi values (4 MiB of output, mostly in cache) and 16 Mi values
// (64 MiB, an 8192×2048 projection decoded whole, far past the caches).
var benchSizes = []int{1 << 20, 16 << 20}

func sizeName(n int) string { return fmt.Sprintf("out=%dMiB", 4*n>>20) }

func benchSrc(n int) []byte {
	r := rand.New(rand.NewPCG(1, 2))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func forSizes(b *testing.B, f func(b *testing.B, n int)) {
	for _, n := range benchSizes {
		b.Run(sizeName(n), func(b *testing.B) { f(b, n) })
	}
}

func BenchmarkMemmoveF32(b *testing.B) {
	forSizes(b, func(b *testing.B, n int) {
		src := make([]float32, n)
		dst := make([]float32, n)
		b.SetBytes(4 * int64(n))
		for b.Loop() {
			copy(dst, src)
		}
	})
}

func BenchmarkDecodeE4M3(b *testing.B) {
	forSizes(b, func(b *testing.B, n int) {
		src := benchSrc(n)
		dst := make([]float32, n)
		b.SetBytes(4 * int64(n))
		for b.Loop() {
			DecodeE4M3(dst, src)
		}
	})
}

func BenchmarkDecodeE2M1(b *testing.B) {
	forSizes(b, func(b *testing.B, n int) {
		src := benchSrc(n / 2)
		dst := make([]float32, n)
		b.SetBytes(4 * int64(n))
		for b.Loop() {
			DecodeE2M1(dst, src)
		}
	})
}

func blockScales(n int) []float32 {
	scales := make([]float32, n/16)
	for i := range scales {
		scales[i] = float32(i%7) + 0.5
	}
	return scales
}

// BenchmarkDecodeE2M1Blocks16 is NVFP4's inner loop: block-16 scales.
func BenchmarkDecodeE2M1Blocks16(b *testing.B) {
	forSizes(b, func(b *testing.B, n int) {
		src, scales := benchSrc(n/2), blockScales(n)
		dst := make([]float32, n)
		b.SetBytes(4 * int64(n))
		for b.Loop() {
			DecodeE2M1Blocks(dst, src, scales, 16)
		}
	})
}

func BenchmarkDecodeBF16(b *testing.B) {
	forSizes(b, func(b *testing.B, n int) {
		src := benchSrc(2 * n)
		dst := make([]float32, n)
		b.SetBytes(4 * int64(n))
		for b.Loop() {
			DecodeBF16(dst, src)
		}
	})
}

// pairedRatio times a decoder and a memmove of the same output size in
// alternation, so that both see the same moment of a noisy machine, and
// reports the decoder's output bandwidth as a percentage of memmove's.
func pairedRatio(b *testing.B, n int, decode func()) {
	src := make([]float32, n)
	dst := make([]float32, n)
	var tMove, tDec time.Duration
	b.SetBytes(4 * int64(n))
	for b.Loop() {
		t0 := time.Now()
		copy(dst, src)
		t1 := time.Now()
		decode()
		t2 := time.Now()
		tMove += t1.Sub(t0)
		tDec += t2.Sub(t1)
	}
	b.ReportMetric(100*float64(tMove)/float64(tDec), "%memmove")
}

func BenchmarkRatioE4M3(b *testing.B) {
	forSizes(b, func(b *testing.B, n int) {
		src := benchSrc(n)
		dst := make([]float32, n)
		pairedRatio(b, n, func() { DecodeE4M3(dst, src) })
	})
}

func BenchmarkRatioE2M1Blocks16(b *testing.B) {
	forSizes(b, func(b *testing.B, n int) {
		src, scales := benchSrc(n/2), blockScales(n)
		dst := make([]float32, n)
		pairedRatio(b, n, func() { DecodeE2M1Blocks(dst, src, scales, 16) })
	})
}
