package cpu

import "github.com/quantscope/quantscope/internal/cpufeat"

// AVX2 kernels for the NVFP4 bandwidth loops (nvfp4_amd64.s). They compute
// the same codes as the Go fast path (nvfp4_fast.go): the E2M1 index by
// comparing |w·r| with the decision points, and a per-block flag whenever a
// lane is within 4 ulps of an interval edge, zero, or subnormal, for which
// the caller takes the exact division.

//go:noescape
func encodeBlocksAVX2(dst *byte, w *float32, scales *byte, tab *float32, n int, slow *byte) int

//go:noescape
func blockAmaxAVX2(dst *float32, w *float32, n int)

// hasAVX2 and hasAVX512 say whether the CPU and the OS allow the AVX2 and
// the AVX-512 F kernels.
var (
	hasAVX2   = cpufeat.AVX2
	hasAVX512 = cpufeat.AVX512
)

// useSIMD can be turned off by tests to compare both paths; useAVX512
// chooses the 512-bit encode kernel over the 256-bit one.
var (
	useSIMD   = hasAVX2
	useAVX512 = hasAVX512
)

//go:noescape
func encodeBlocksAVX512(dst *byte, w *float32, scales *byte, tab *float32, n int, slow *byte) int

// encodeBlocks runs the widest encode kernel the CPU has.
func encodeBlocks(dst *byte, w *float32, scales *byte, tab *float32, n int, slow *byte) int {
	if useAVX512 {
		return encodeBlocksAVX512(dst, w, scales, tab, n, slow)
	}
	return encodeBlocksAVX2(dst, w, scales, tab, n, slow)
}

func hasSIMD() bool { return hasAVX2 }

//go:noescape
func maxScalesAVX2(dst *byte, bam *float32, six2 float32, n int)

func hasAVX512Kernel() bool { return hasAVX512 }

//go:noescape
func sweepAVX512(sums *float32, ok *uint16, a *float32, n int, recs *float32, divs *float32)
