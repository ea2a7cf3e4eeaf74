//go:build !amd64

package cpu

// Without the AVX2 kernels every block takes the Go fast path.
var useSIMD = false

var useAVX512 = false

func encodeBlocks(dst *byte, w *float32, scales *byte, tab *float32, n int, slow *byte) int {
	panic("cpu: no SIMD kernels on this architecture")
}

func encodeBlocksAVX512(dst *byte, w *float32, scales *byte, tab *float32, n int, slow *byte) int {
	panic("cpu: no SIMD kernels on this architecture")
}

func encodeBlocksAVX2(dst *byte, w *float32, scales *byte, tab *float32, n int, slow *byte) int {
	panic("cpu: no SIMD kernels on this architecture")
}

func blockAmaxAVX2(dst *float32, w *float32, n int) {
	panic("cpu: no SIMD kernels on this architecture")
}

func hasSIMD() bool { return false }

func maxScalesAVX2(dst *byte, bam *float32, six2 float32, n int) {
	panic("cpu: no SIMD kernels on this architecture")
}

func hasAVX512Kernel() bool { return false }

func sweepAVX512(sums *float32, ok *uint16, a *float32, n int, recs *float32, divs *float32) {
	panic("cpu: no SIMD kernels on this architecture")
}
