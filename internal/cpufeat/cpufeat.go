// Package cpufeat reports which x86 vector instruction sets both the CPU
// and the operating system allow (CPUID bits, and the register state the OS
// saves per XCR0), for the packages that choose between assembly kernels
// and their Go twins. On other architectures every feature is false.
package cpufeat

// Features found at start-up.
var (
	// AVX2 with AVX and OSXSAVE, and the XMM and YMM state enabled.
	AVX2 = avx2
	// AVX512 is AVX-512 F with AVX2, and the opmask and ZMM state enabled.
	AVX512 = avx512
	// F16C converts between float16 and float32 (VCVTPH2PS).
	F16C = f16c
)
