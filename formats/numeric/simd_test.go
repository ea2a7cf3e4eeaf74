package numeric

import (
	"math"
	"math/rand/v2"
	"testing"
)

// scaleCases are scales of every kind a checkpoint may hold.
var scaleCases = []float32{1, 0.0017, -3.5, 1e-30, math.Float32frombits(1), math.Float32frombits(0x007FFFFF), 6e37, 0,
	float32(math.Copysign(0, -1)), float32(math.Inf(1)), float32(math.NaN())}

func sameBits(a, b []float32) int {
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return i
		}
	}
	return -1
}

// DecodeE4M3Scaled equals a plain loop over the scalar decoder times the
// scale, bit for bit, on every code (NaN codes included) at every scale, with
// the kernel on and off.
func TestDecodeE4M3ScaledEveryCode(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	for _, simd := range []bool{false, true} {
		useAVX512 = simd && hasAVX512
		for _, n := range []int{0, 1, 15, 16, 17, 128, 256, 1000, 4099} {
			src := make([]byte, n)
			for i := range src {
				src[i] = byte(r.Uint32())
				if r.IntN(50) != 0 && src[i]&0x7F == 0x7F { // NaN codes rare but present
					src[i] ^= 1
				}
			}
			if n >= 256 {
				for c := range 256 {
					src[c] = byte(c)
				}
			}
			for _, s := range scaleCases {
				got, want := make([]float32, n), make([]float32, n)
				DecodeE4M3Scaled(got, src, s)
				for i, c := range src {
					want[i] = E4M3ToFloat32(c) * s
				}
				if i := sameBits(got, want); i >= 0 {
					t.Fatalf("simd %v n %d scale %v: code %#x gives %#x, want %#x", simd, n, s, src[i], math.Float32bits(got[i]), math.Float32bits(want[i]))
				}
			}
		}
	}
	useAVX512 = hasAVX512
}

// DecodeE2M1Blocks with 16-value blocks equals a plain nibble loop times
// each block's scale, bit for bit, kernel on and off, odd block counts and
// short scale lists included.
func TestDecodeE2M1Blocks16Kernel(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	for _, simd := range []bool{false, true} {
		useAVX512 = simd && hasAVX512
		for _, blocks := range []int{0, 1, 2, 3, 8, 33, 512} {
			src := make([]byte, 8*blocks)
			for i := range src {
				src[i] = byte(r.Uint32())
			}
			scales := make([]float32, blocks)
			for i := range scales {
				scales[i] = scaleCases[r.IntN(len(scaleCases))] * float32(1+r.IntN(4))
			}
			got, want := make([]float32, 16*blocks), make([]float32, 16*blocks)
			DecodeE2M1Blocks(got, src, scales, 16)
			for i, b := range src {
				s := scales[i/8]
				want[2*i] = E2M1ToFloat32(b&15) * s
				want[2*i+1] = E2M1ToFloat32(b>>4) * s
			}
			if i := sameBits(got, want); i >= 0 {
				t.Fatalf("simd %v blocks %d: value %d is %#x, want %#x", simd, blocks, i, math.Float32bits(got[i]), math.Float32bits(want[i]))
			}
		}
	}
	useAVX512 = hasAVX512
}

// The scaled decoders on one band of 1 MiB of output (in L2), Go loop and
// AVX-512 kernel.
func BenchmarkScaledPaths(b *testing.B) {
	const n = 256 << 10
	src, scales := benchSrc(n), blockScales(n)
	codes := append([]byte(nil), src...) // finite E4M3 codes, as a checkpoint holds
	for i, c := range codes {
		if c&0x7F == 0x7F {
			codes[i] = c - 1
		}
	}
	dst := make([]float32, n)
	for _, simd := range []bool{false, true} {
		name := map[bool]string{false: "go", true: "avx512"}[simd]
		run := func(f func()) func(b *testing.B) {
			return func(b *testing.B) {
				if simd && !hasAVX512 {
					b.Skip("no AVX-512")
				}
				defer func(old bool) { useAVX512 = old }(useAVX512)
				useAVX512 = simd
				b.SetBytes(4 * n)
				for b.Loop() {
					f()
				}
			}
		}
		b.Run("e2m1-blocks16/"+name, run(func() { DecodeE2M1Blocks(dst, src[:n/2], scales, 16) }))
		b.Run("e4m3-scaled/"+name, run(func() {
			for c := 0; c < n; c += 128 {
				DecodeE4M3Scaled(dst[c:c+128], codes[c:c+128], scales[c/16])
			}
		}))
		b.Run("e4m3-blocks/"+name, run(func() {
			for c := 0; c < n; c += 8192 { // rows of 8192, 128-code blocks
				DecodeE4M3Blocks(dst[c:c+8192], codes[c:c+8192], scales[c/128:], 128)
			}
		}))
	}
}

// DecodeE4M3Blocks equals the scalar decoder times each block's scale, bit
// for bit, kernel on and off: block sizes the kernel takes and ones it
// leaves to the table, NaN codes, a partial last block.
func TestDecodeE4M3BlocksKernel(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 14))
	for _, simd := range []bool{false, true} {
		useAVX512 = simd && hasAVX512
		for _, block := range []int{16, 32, 128, 24, 7} {
			for _, n := range []int{0, 5, 16, 130, 1000, 4096} {
				src := make([]byte, n)
				for i := range src {
					src[i] = byte(r.Uint32())
					if r.IntN(40) != 0 && src[i]&0x7F == 0x7F {
						src[i] ^= 1
					}
				}
				scales := make([]float32, (n+block-1)/block)
				for i := range scales {
					scales[i] = scaleCases[r.IntN(len(scaleCases))]
				}
				got, want := make([]float32, n), make([]float32, n)
				DecodeE4M3Blocks(got, src, scales, block)
				for i, c := range src {
					want[i] = E4M3ToFloat32(c) * scales[i/block]
				}
				if i := sameBits(got, want); i >= 0 {
					t.Fatalf("simd %v block %d n %d: code %#x at %d gives %#x, want %#x", simd, block, n, src[i], i, math.Float32bits(got[i]), math.Float32bits(want[i]))
				}
			}
		}
	}
	useAVX512 = hasAVX512
}
