#include "textflag.h"

// Constants, eight dwords each.
DATA c_abs<>+0(SB)/8, $0x7FFFFFFF7FFFFFFF
DATA c_abs<>+8(SB)/8, $0x7FFFFFFF7FFFFFFF
DATA c_abs<>+16(SB)/8, $0x7FFFFFFF7FFFFFFF
DATA c_abs<>+24(SB)/8, $0x7FFFFFFF7FFFFFFF
GLOBL c_abs<>(SB), RODATA|NOPTR, $32

DATA c_normm1<>+0(SB)/8, $0x007FFFFF007FFFFF
DATA c_normm1<>+8(SB)/8, $0x007FFFFF007FFFFF
DATA c_normm1<>+16(SB)/8, $0x007FFFFF007FFFFF
DATA c_normm1<>+24(SB)/8, $0x007FFFFF007FFFFF
GLOBL c_normm1<>(SB), RODATA|NOPTR, $32

DATA c_four<>+0(SB)/8, $0x0000000400000004
DATA c_four<>+8(SB)/8, $0x0000000400000004
DATA c_four<>+16(SB)/8, $0x0000000400000004
DATA c_four<>+24(SB)/8, $0x0000000400000004
GLOBL c_four<>(SB), RODATA|NOPTR, $32

DATA c_low20<>+0(SB)/8, $0x000FFFFF000FFFFF
DATA c_low20<>+8(SB)/8, $0x000FFFFF000FFFFF
DATA c_low20<>+16(SB)/8, $0x000FFFFF000FFFFF
DATA c_low20<>+24(SB)/8, $0x000FFFFF000FFFFF
GLOBL c_low20<>(SB), RODATA|NOPTR, $32

DATA c_seven<>+0(SB)/8, $0x0000000700000007
DATA c_seven<>+8(SB)/8, $0x0000000700000007
DATA c_seven<>+16(SB)/8, $0x0000000700000007
DATA c_seven<>+24(SB)/8, $0x0000000700000007
GLOBL c_seven<>(SB), RODATA|NOPTR, $32

// dword indexes 0, 2, 4, 6 (the low dword of each qword)
DATA c_evens<>+0(SB)/8, $0x0000000200000000
DATA c_evens<>+8(SB)/8, $0x0000000600000004
DATA c_evens<>+16(SB)/8, $0x0000000200000000
DATA c_evens<>+24(SB)/8, $0x0000000600000004
GLOBL c_evens<>(SB), RODATA|NOPTR, $32

// The E2M1 decision points as float32 bit patterns: .25 .75 1.25 1.75 2.5 3.5 5
DATA c_thr<>+0(SB)/4, $0x3E800000
DATA c_thr<>+4(SB)/4, $0x3F400000
DATA c_thr<>+8(SB)/4, $0x3FA00000
DATA c_thr<>+12(SB)/4, $0x3FE00000
DATA c_thr<>+16(SB)/4, $0x40200000
DATA c_thr<>+20(SB)/4, $0x40600000
DATA c_thr<>+24(SB)/4, $0x40A00000
GLOBL c_thr<>(SB), RODATA|NOPTR, $28

// CODES turns q = w·r (in Q) into E2M1 codes (dwords, in Q) and ANDs the
// lanes' "table path is exact" mask into Y7. Clobbers Y3-Y6.
#define CODES(Q) \
	VPAND Y15, Q, Y3 \
	VPSRLD $31, Q, Y4 \
	VPSLLD $3, Y4, Y4 \
	VPXOR Y5, Y5, Y5 \
	VPCMPGTD Y8, Y3, Y6 \
	VPSUBD Y6, Y5, Y5 \
	VPCMPGTD Y9, Y3, Y6 \
	VPSUBD Y6, Y5, Y5 \
	VPCMPGTD Y10, Y3, Y6 \
	VPSUBD Y6, Y5, Y5 \
	VPCMPGTD Y11, Y3, Y6 \
	VPSUBD Y6, Y5, Y5 \
	VPCMPGTD Y12, Y3, Y6 \
	VPSUBD Y6, Y5, Y5 \
	VPCMPGTD Y13, Y3, Y6 \
	VPSUBD Y6, Y5, Y5 \
	VPCMPGTD Y14, Y3, Y6 \
	VPSUBD Y6, Y5, Y5 \
	VPOR Y4, Y5, Q \
	VPCMPGTD c_normm1<>(SB), Y3, Y6 \
	VPAND Y6, Y7, Y7 \
	VPADDD c_four<>(SB), Y3, Y6 \
	VPAND c_low20<>(SB), Y6, Y6 \
	VPCMPGTD c_seven<>(SB), Y6, Y6 \
	VPAND Y6, Y7, Y7

// func encodeBlocksAVX2(dst *byte, w *float32, scales *byte, tab *float32, n int, slow *byte) int
// For each of n 16-blocks: codes of w·tab[scales[i]] (the reciprocal of the
// block's divisor) packed two a byte into dst[8i:8i+8], and slow[i] = 1 when
// some lane is not certainly exact (the caller redoes that block with the
// division); returns the number of such blocks.
TEXT ·encodeBlocksAVX2(SB), NOSPLIT, $0-56
	MOVQ dst+0(FP), DI
	MOVQ w+8(FP), SI
	MOVQ scales+16(FP), DX
	MOVQ tab+24(FP), R9
	MOVQ n+32(FP), CX
	MOVQ slow+40(FP), R8
	XORQ R10, R10
	VMOVDQU c_abs<>(SB), Y15
	VPBROADCASTD c_thr<>+0(SB), Y8
	VPBROADCASTD c_thr<>+4(SB), Y9
	VPBROADCASTD c_thr<>+8(SB), Y10
	VPBROADCASTD c_thr<>+12(SB), Y11
	VPBROADCASTD c_thr<>+16(SB), Y12
	VPBROADCASTD c_thr<>+20(SB), Y13
	VPBROADCASTD c_thr<>+24(SB), Y14
	TESTQ CX, CX
	JLE done
loop:
	MOVBLZX (DX), AX
	VBROADCASTSS (R9)(AX*4), Y0
	VMULPS (SI), Y0, Y1
	VMULPS 32(SI), Y0, Y2
	VPCMPEQD Y7, Y7, Y7
	CODES(Y1)
	CODES(Y2)
	// pair codes: the low byte of each qword = even | odd<<4
	VPSRLQ $28, Y1, Y3
	VPOR Y3, Y1, Y1
	VPSRLQ $28, Y2, Y3
	VPOR Y3, Y2, Y2
	VMOVDQU c_evens<>(SB), Y3
	VPERMD Y1, Y3, Y1
	VPERMD Y2, Y3, Y2
	VPACKUSDW X2, X1, X1
	VPACKUSWB X1, X1, X1
	VMOVQ X1, (DI)
	VMOVMSKPS Y7, AX
	XORL BX, BX
	CMPL AX, $0xFF
	SETNE BX
	MOVB BX, (R8)
	ADDQ BX, R10
	ADDQ $64, SI
	ADDQ $8, DI
	INCQ DX
	INCQ R8
	DECQ CX
	JNZ loop
done:
	MOVQ R10, ret+48(FP)
	VZEROUPPER
	RET

// func blockAmaxAVX2(dst *float32, w *float32, n int)
// dst[i] = the largest |w| of 16-block i, as its bit pattern (above
// 0x7F7FFFFF: inf or NaN).
TEXT ·blockAmaxAVX2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ w+8(FP), SI
	MOVQ n+16(FP), CX
	VMOVDQU c_abs<>(SB), Y15
	TESTQ CX, CX
	JLE adone
aloop:
	VPAND (SI), Y15, Y0
	VPAND 32(SI), Y15, Y1
	VPMAXUD Y1, Y0, Y0
	VEXTRACTI128 $1, Y0, X1
	VPMAXUD X1, X0, X0
	VPSHUFD $0x4E, X0, X1
	VPMAXUD X1, X0, X0
	VPSHUFD $0xB1, X0, X1
	VPMAXUD X1, X0, X0
	VMOVD X0, (DI)
	ADDQ $64, SI
	ADDQ $4, DI
	DECQ CX
	JNZ aloop
adone:
	VZEROUPPER
	RET

DATA c_maxk<>+0(SB)/4, $0x3F800000  // 1.0
DATA c_maxk<>+4(SB)/4, $0x3B000000  // 2^-9
DATA c_maxk<>+8(SB)/4, $0x43E00000  // 448
DATA c_maxk<>+12(SB)/4, $0x3C800000 // 2^-6
DATA c_maxk<>+16(SB)/4, $0x44000000 // 512
DATA c_maxk<>+20(SB)/4, $0x0007FFFF
DATA c_maxk<>+24(SB)/4, $0x00000001
DATA c_maxk<>+28(SB)/4, $0x000003C0 // 120<<3
GLOBL c_maxk<>(SB), RODATA|NOPTR, $32

// func maxScalesAVX2(dst *byte, bam *float32, six2 float32, n int)
// ModelOpt's max-recipe scale codes of n blocks (n a multiple of 8):
// s = bam / six2, 0 → 1, clamp [2^-9, 448], E4M3 round to nearest even.
TEXT ·maxScalesAVX2(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ bam+8(FP), SI
	VBROADCASTSS six2+16(FP), Y14
	MOVQ n+24(FP), CX
	VBROADCASTSS c_maxk<>+0(SB), Y13
	VBROADCASTSS c_maxk<>+4(SB), Y12
	VBROADCASTSS c_maxk<>+8(SB), Y11
	VBROADCASTSS c_maxk<>+12(SB), Y10
	VBROADCASTSS c_maxk<>+16(SB), Y9
	VPBROADCASTD c_maxk<>+20(SB), Y8
	VPBROADCASTD c_maxk<>+24(SB), Y7
	VPBROADCASTD c_maxk<>+28(SB), Y6
	VXORPS Y15, Y15, Y15
	SHRQ $3, CX
	JZ mdone
mloop:
	VMOVUPS (SI), Y0
	VDIVPS Y14, Y0, Y0
	VCMPPS $0, Y15, Y0, Y2
	VBLENDVPS Y2, Y13, Y0, Y0
	VMAXPS Y12, Y0, Y0
	VMINPS Y11, Y0, Y0
	VPSRLD $20, Y0, Y3
	VPAND Y7, Y3, Y3
	VPADDD Y8, Y0, Y4
	VPADDD Y3, Y4, Y4
	VPSRLD $20, Y4, Y4
	VPSUBD Y6, Y4, Y4
	VMULPS Y9, Y0, Y5
	VCVTPS2DQ Y5, Y5
	VCMPPS $1, Y10, Y0, Y2
	VBLENDVPS Y2, Y5, Y4, Y4
	VEXTRACTI128 $1, Y4, X5
	VPACKUSDW X5, X4, X4
	VPACKUSWB X4, X4, X4
	VMOVQ X4, (DI)
	ADDQ $32, SI
	ADDQ $8, DI
	DECQ CX
	JNZ mloop
mdone:
	VZEROUPPER
	RET

DATA c_one<>+0(SB)/4, $1
GLOBL c_one<>(SB), RODATA|NOPTR, $4

// func encodeBlocksAVX512(dst *byte, w *float32, scales *byte, tab *float32, n int, slow *byte) int
// encodeBlocksAVX2 with one 16-block a ZMM register and mask registers for
// the index count and the exactness flags; a weight of ±0 is exact here
// (code 0: ModelOpt gives -0 sign 0), so a block of zeros stays on the kernel.
TEXT ·encodeBlocksAVX512(SB), NOSPLIT, $0-56
	MOVQ dst+0(FP), DI
	MOVQ w+8(FP), SI
	MOVQ scales+16(FP), DX
	MOVQ tab+24(FP), R9
	MOVQ n+32(FP), CX
	MOVQ slow+40(FP), R8
	XORQ R10, R10
	VPBROADCASTD c_abs<>(SB), Z15
	VPBROADCASTD c_thr<>+0(SB), Z8
	VPBROADCASTD c_thr<>+4(SB), Z9
	VPBROADCASTD c_thr<>+8(SB), Z10
	VPBROADCASTD c_thr<>+12(SB), Z11
	VPBROADCASTD c_thr<>+16(SB), Z12
	VPBROADCASTD c_thr<>+20(SB), Z13
	VPBROADCASTD c_thr<>+24(SB), Z14
	VPBROADCASTD c_one<>(SB), Z16
	VPBROADCASTD c_normm1<>(SB), Z17
	VPBROADCASTD c_four<>(SB), Z18
	VPBROADCASTD c_low20<>(SB), Z19
	VPBROADCASTD c_seven<>(SB), Z20
	TESTQ CX, CX
	JLE zdone
zloop:
	MOVBLZX (DX), AX
	VBROADCASTSS (R9)(AX*4), Z0
	VMOVUPS (SI), Z2
	VMULPS Z2, Z0, Z1
	VPANDD Z15, Z1, Z3
	VPSRLD $31, Z1, Z5
	VPSLLD $3, Z5, Z5
	VPTESTNMD Z15, Z2, K5
	VPXORD Z5, Z5, K5, Z5
	VPCMPGTD Z8, Z3, K1
	VPADDD Z16, Z5, K1, Z5
	VPCMPGTD Z9, Z3, K1
	VPADDD Z16, Z5, K1, Z5
	VPCMPGTD Z10, Z3, K1
	VPADDD Z16, Z5, K1, Z5
	VPCMPGTD Z11, Z3, K1
	VPADDD Z16, Z5, K1, Z5
	VPCMPGTD Z12, Z3, K1
	VPADDD Z16, Z5, K1, Z5
	VPCMPGTD Z13, Z3, K1
	VPADDD Z16, Z5, K1, Z5
	VPCMPGTD Z14, Z3, K1
	VPADDD Z16, Z5, K1, Z5
	VPCMPGTD Z17, Z3, K2
	VPADDD Z18, Z3, Z6
	VPANDD Z19, Z6, Z6
	VPCMPGTD Z20, Z6, K2, K2
	KORW K5, K2, K2
	VPSRLQ $28, Z5, Z6
	VPORQ Z6, Z5, Z5
	VPMOVQB Z5, X6
	VMOVQ X6, (DI)
	KMOVW K2, AX
	XORL BX, BX
	CMPL AX, $0xFFFF
	SETNE BX
	MOVB BX, (R8)
	ADDQ BX, R10
	ADDQ $64, SI
	ADDQ $8, DI
	INCQ DX
	INCQ R8
	DECQ CX
	JNZ zloop
zdone:
	MOVQ R10, ret+48(FP)
	VZEROUPPER
	RET

DATA c_mags<>+0(SB)/4, $0x00000000  // E2M1 magnitudes 0 .5 1 1.5 2 3 4 6
DATA c_mags<>+4(SB)/4, $0x3F000000
DATA c_mags<>+8(SB)/4, $0x3F800000
DATA c_mags<>+12(SB)/4, $0x3FC00000
DATA c_mags<>+16(SB)/4, $0x40000000
DATA c_mags<>+20(SB)/4, $0x40400000
DATA c_mags<>+24(SB)/4, $0x40800000
DATA c_mags<>+28(SB)/4, $0x40C00000
DATA c_mags<>+32(SB)/4, $0x00000000
DATA c_mags<>+36(SB)/4, $0x00000000
DATA c_mags<>+40(SB)/4, $0x00000000
DATA c_mags<>+44(SB)/4, $0x00000000
DATA c_mags<>+48(SB)/4, $0x00000000
DATA c_mags<>+52(SB)/4, $0x00000000
DATA c_mags<>+56(SB)/4, $0x00000000
DATA c_mags<>+60(SB)/4, $0x00000000
GLOBL c_mags<>(SB), RODATA|NOPTR, $64

// func sweepAVX512(sums *float32, ok *uint16, a *float32, n int, recs *float32, divs *float32)
// The mse sweep's errors of one block for 16 candidate divisors, one a lane
// of a ZMM register: for each value a[j] = |w_j|, j < n, in element order,
// sums[c] += f32(f32(a_j − f32(e2m1(a_j·recs[c])·divs[c]))²), the same
// float32 operations in the same order as blockSSE. *ok has bit c set when
// candidate c took the table path exactly for every value (a zero product
// is exact: its term is a², whatever the divisor); the caller recomputes
// the others with the division, and every candidate whose reciprocal it
// passed as 0.
TEXT ·sweepAVX512(SB), NOSPLIT, $0-48
	MOVQ sums+0(FP), DI
	MOVQ ok+8(FP), R8
	MOVQ a+16(FP), SI
	MOVQ n+24(FP), R10
	MOVQ recs+32(FP), DX
	MOVQ divs+40(FP), R9
	VPBROADCASTD c_thr<>+0(SB), Z8
	VPBROADCASTD c_thr<>+4(SB), Z9
	VPBROADCASTD c_thr<>+8(SB), Z10
	VPBROADCASTD c_thr<>+12(SB), Z11
	VPBROADCASTD c_thr<>+16(SB), Z12
	VPBROADCASTD c_thr<>+20(SB), Z13
	VPBROADCASTD c_thr<>+24(SB), Z14
	VPBROADCASTD c_one<>(SB), Z16
	VPBROADCASTD c_normm1<>(SB), Z17
	VPBROADCASTD c_four<>(SB), Z18
	VPBROADCASTD c_low20<>(SB), Z19
	VPBROADCASTD c_seven<>(SB), Z20
	VMOVUPS c_mags<>(SB), Z21
	VMOVUPS (DX), Z22
	VMOVUPS (R9), Z23
	VPXORD Z24, Z24, Z24
	KXNORW K3, K3, K3
	XORQ BX, BX
selem:
	VBROADCASTSS (SI)(BX*4), Z0
	VMULPS Z22, Z0, Z1
	VPXORD Z5, Z5, Z5
	VPCMPGTD Z8, Z1, K1
	VPADDD Z16, Z5, K1, Z5
	VPCMPGTD Z9, Z1, K1
	VPADDD Z16, Z5, K1, Z5
	VPCMPGTD Z10, Z1, K1
	VPADDD Z16, Z5, K1, Z5
	VPCMPGTD Z11, Z1, K1
	VPADDD Z16, Z5, K1, Z5
	VPCMPGTD Z12, Z1, K1
	VPADDD Z16, Z5, K1, Z5
	VPCMPGTD Z13, Z1, K1
	VPADDD Z16, Z5, K1, Z5
	VPCMPGTD Z14, Z1, K1
	VPADDD Z16, Z5, K1, Z5
	VPCMPGTD Z17, Z1, K4
	VPADDD Z18, Z1, Z6
	VPANDD Z19, Z6, Z6
	VPCMPGTD Z20, Z6, K4, K4
	VPTESTNMD Z1, Z1, K5
	KORW K5, K4, K4
	KANDW K4, K3, K3
	VPERMPS Z21, Z5, Z6
	VMULPS Z23, Z6, Z6
	VSUBPS Z6, Z0, Z7
	VMULPS Z7, Z7, Z7
	VADDPS Z7, Z24, Z24
	INCQ BX
	CMPQ BX, R10
	JLT selem
	VMOVUPS Z24, (DI)
	KMOVW K3, AX
	MOVW AX, (R8)
	VZEROUPPER
	RET
