package numeric

import (
	"math/rand/v2"
	"testing"
	"unsafe"
)

// The bulk decoders are measured against a memmove of the same output size:
// SetBytes counts output bytes (4 per float32) so the MB/s columns compare.

const benchElems = 1 << 20 // 4 MiB of float32 output: past L2, as real tensors are

func benchSrc(n int) []byte {
	r := rand.New(rand.NewPCG(1, 2))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func BenchmarkMemmoveF32(b *testing.B) {
	src := make([]float32, benchElems)
	dst := make([]float32, benchElems)
	b.SetBytes(4 * benchElems)
	for b.Loop() {
		copy(dst, src)
	}
}

func BenchmarkDecodeE4M3(b *testing.B) {
	src := benchSrc(benchElems)
	dst := make([]float32, benchElems)
	b.SetBytes(4 * benchElems)
	for b.Loop() {
		DecodeE4M3(dst, src)
	}
}

func BenchmarkDecodeE2M1(b *testing.B) {
	src := benchSrc(benchElems / 2)
	dst := make([]float32, benchElems)
	b.SetBytes(4 * benchElems)
	for b.Loop() {
		DecodeE2M1(dst, src)
	}
}

// BenchmarkDecodeE2M1Blocks16 is NVFP4's inner loop: block-16 scales.
func BenchmarkDecodeE2M1Blocks16(b *testing.B) {
	src := benchSrc(benchElems / 2)
	scales := make([]float32, benchElems/16)
	for i := range scales {
		scales[i] = float32(i%7) + 0.5
	}
	dst := make([]float32, benchElems)
	b.SetBytes(4 * benchElems)
	for b.Loop() {
		DecodeE2M1Blocks(dst, src, scales, 16)
	}
}

func BenchmarkDecodeBF16(b *testing.B) {
	src := benchSrc(2 * benchElems)
	dst := make([]float32, benchElems)
	b.SetBytes(4 * benchElems)
	for b.Loop() {
		DecodeBF16(dst, src)
	}
}

var _ = unsafe.Sizeof(0)
