package numeric

import "github.com/quantscope/quantscope/internal/cpufeat"

// AVX-512 kernels for the two scaled decoders (simd_amd64.s); the Go loops
// in e2m1.go and scaled.go compute the same values bit for bit (tested).

//go:noescape
func e2m1Blocks16AVX512(dst *float32, src *byte, scales *float32, pairs int, tab *[16]float32)

//go:noescape
func e4m3ScaledAVX512(dst *float32, src *byte, n int, scale float32) int

//go:noescape
func e4m3BlocksAVX512(dst *float32, src *byte, n int, scales *float32, block int) int

// hasAVX512 says whether AVX-512 F (with F16C and AVX2 for the 256-bit
// steps) is usable.
var hasAVX512 = cpufeat.AVX512 && cpufeat.F16C

// useAVX512 can be turned off by tests to compare both paths.
var useAVX512 = hasAVX512

var e2m1Tab16 = func() (t [16]float32) {
	for i := range t {
		t[i] = E2M1ToFloat32(byte(i))
	}
	return t
}()

// e2m1Blocks16SIMD decodes as many whole pairs of 16-value blocks as it
// can and returns how many blocks it did.
func e2m1Blocks16SIMD(dst []float32, src []byte, scales []float32) int {
	pairs := min(len(src)/16, len(scales)/2, len(dst)/32)
	if !useAVX512 || pairs == 0 {
		return 0
	}
	e2m1Blocks16AVX512(&dst[0], &src[0], &scales[0], pairs, &e2m1Tab16)
	return 2 * pairs
}

// e4m3ScaledSIMD decodes a prefix of src; it returns its length.
func e4m3ScaledSIMD(dst []float32, src []byte, scale float32) int {
	if !useAVX512 || len(src) < 16 {
		return 0
	}
	return e4m3ScaledAVX512(&dst[0], &src[0], len(src), scale)
}

// e4m3BlocksSIMD decodes a prefix of src, code i times scales[i/block];
// it returns the prefix's length (a multiple of 16).
func e4m3BlocksSIMD(dst []float32, src []byte, scales []float32, block int) int {
	if !useAVX512 || len(src) < 16 || block%16 != 0 || len(scales) < (len(src)+block-1)/block {
		return 0
	}
	return e4m3BlocksAVX512(&dst[0], &src[0], len(src), &scales[0], block)
}
