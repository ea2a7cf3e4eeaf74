//go:build !amd64

package numeric

var hasAVX512, useAVX512 = false, false

func e2m1Blocks16SIMD(dst []float32, src []byte, scales []float32) int { return 0 }

func e4m3ScaledSIMD(dst []float32, src []byte, scale float32) int { return 0 }

func e4m3BlocksSIMD(dst []float32, src []byte, scales []float32, block int) int { return 0 }
