#include "textflag.h"

// Interleave indices for VPERMT2PS: low nibbles' values (table 1) and high
// nibbles' (table 2) into output order, first and second 16 values.
DATA e2m1_ilo<>+0(SB)/8, $0x0000001000000000
DATA e2m1_ilo<>+8(SB)/8, $0x0000001100000001
DATA e2m1_ilo<>+16(SB)/8, $0x0000001200000002
DATA e2m1_ilo<>+24(SB)/8, $0x0000001300000003
DATA e2m1_ilo<>+32(SB)/8, $0x0000001400000004
DATA e2m1_ilo<>+40(SB)/8, $0x0000001500000005
DATA e2m1_ilo<>+48(SB)/8, $0x0000001600000006
DATA e2m1_ilo<>+56(SB)/8, $0x0000001700000007
GLOBL e2m1_ilo<>(SB), RODATA|NOPTR, $64

DATA e2m1_ihi<>+0(SB)/8, $0x0000001800000008
DATA e2m1_ihi<>+8(SB)/8, $0x0000001900000009
DATA e2m1_ihi<>+16(SB)/8, $0x0000001A0000000A
DATA e2m1_ihi<>+24(SB)/8, $0x0000001B0000000B
DATA e2m1_ihi<>+32(SB)/8, $0x0000001C0000000C
DATA e2m1_ihi<>+40(SB)/8, $0x0000001D0000000D
DATA e2m1_ihi<>+48(SB)/8, $0x0000001E0000000E
DATA e2m1_ihi<>+56(SB)/8, $0x0000001F0000000F
GLOBL e2m1_ihi<>(SB), RODATA|NOPTR, $64

// func e2m1Blocks16AVX512(dst *float32, src *byte, scales *float32, pairs int, tab *[16]float32)
//
// pairs pairs of NVFP4 blocks: 16 bytes (32 nibbles, low first) and two
// scales become 32 float32 tab[nibble]·scale.
TEXT ·e2m1Blocks16AVX512(SB), NOSPLIT, $0-40
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ scales+16(FP), DX
	MOVQ pairs+24(FP), CX
	MOVQ tab+32(FP), AX
	VMOVUPS (AX), Z20
	VMOVDQU32 e2m1_ilo<>(SB), Z21
	VMOVDQU32 e2m1_ihi<>(SB), Z22
	MOVL $15, AX
	VPBROADCASTD AX, Z23

loop:
	TESTQ CX, CX
	JZ    done
	VPMOVZXBD (SI), Z1
	VPANDD    Z23, Z1, Z2      // low nibbles
	VPSRLD    $4, Z1, Z3       // high nibbles
	VPERMPS   Z20, Z2, Z4      // their values
	VPERMPS   Z20, Z3, Z5
	VMOVAPS   Z4, Z6
	VPERMT2PS Z5, Z21, Z4      // values 0..15 in order
	VPERMT2PS Z5, Z22, Z6      // values 16..31
	VBROADCASTSS (DX), Z7
	VBROADCASTSS 4(DX), Z8
	VMULPS    Z7, Z4, Z4
	VMULPS    Z8, Z6, Z6
	VMOVUPS   Z4, (DI)
	VMOVUPS   Z6, 64(DI)
	ADDQ $16, SI
	ADDQ $8, DX
	ADDQ $128, DI
	DECQ CX
	JMP  loop

done:
	VZEROUPPER
	RET

// func e4m3ScaledAVX512(dst *float32, src *byte, n int, scale float32) int
//
// dst[i] = e4m3(src[i])·scale, sixteen codes an iteration: the code's bits
// placed in a float16 (sign, then exponent and mantissa shifted by 7: the
// value times 2^-8, subnormals included), widened by VCVTPH2PS, multiplied
// by 256 (exact) and then by scale (the one rounding, as the table's
// value·scale). It stops before the first group of sixteen holding a NaN
// code (S.1111.111) and returns how many codes it wrote.
TEXT ·e4m3ScaledAVX512(SB), NOSPLIT, $0-40
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	VBROADCASTSS scale+24(FP), Z15
	MOVL $0x43800000, AX        // 256
	VPBROADCASTD AX, Z14
	MOVL $0xBF80, AX
	VPBROADCASTW AX, Y13        // sign and exponent/mantissa bits
	MOVL $0x3F80, AX
	VPBROADCASTW AX, Y12        // all-ones exponent and mantissa: NaN
	XORQ BX, BX

loop:
	LEAQ 16(BX), R8
	CMPQ R8, CX
	JGT  done
	VPMOVSXBW (SI)(BX*1), Y1
	VPSLLW    $7, Y1, Y1
	VPAND     Y13, Y1, Y1
	VPAND     Y12, Y1, Y2
	VPCMPEQW  Y12, Y2, Y2
	VPMOVMSKB Y2, AX
	TESTL     AX, AX
	JNZ       done
	VCVTPH2PS Y1, Z1
	VMULPS    Z14, Z1, Z1
	VMULPS    Z15, Z1, Z1
	VMOVUPS   Z1, (DI)(BX*4)
	MOVQ      R8, BX
	JMP       loop

done:
	MOVQ BX, ret+32(FP)
	VZEROUPPER
	RET

// func e4m3BlocksAVX512(dst *float32, src *byte, n int, scales *float32, block int) int
//
// e4m3ScaledAVX512 over a run of blocks of block codes (a multiple of 16),
// code i times scales[i/block]: one call a row instead of one a block. It
// stops before the first group of sixteen holding a NaN code and returns
// how many codes it wrote.
TEXT ·e4m3BlocksAVX512(SB), NOSPLIT, $0-48
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	MOVQ scales+24(FP), DX
	MOVQ block+32(FP), R9
	MOVL $0x43800000, AX        // 256
	VPBROADCASTD AX, Z14
	MOVL $0xBF80, AX
	VPBROADCASTW AX, Y13
	MOVL $0x3F80, AX
	VPBROADCASTW AX, Y12
	XORQ BX, BX
	XORQ R10, R10               // position in the block

bloop:
	LEAQ 16(BX), R8
	CMPQ R8, CX
	JGT  bdone
	CMPQ R10, R9
	JLT  bsame
	ADDQ $4, DX                 // next block's scale
	XORQ R10, R10
bsame:
	VPMOVSXBW (SI)(BX*1), Y1
	VPSLLW    $7, Y1, Y1
	VPAND     Y13, Y1, Y1
	VPAND     Y12, Y1, Y2
	VPCMPEQW  Y12, Y2, Y2
	VPMOVMSKB Y2, AX
	TESTL     AX, AX
	JNZ       bdone
	VBROADCASTSS (DX), Z15
	VCVTPH2PS Y1, Z1
	VMULPS    Z14, Z1, Z1
	VMULPS    Z15, Z1, Z1
	VMOVUPS   Z1, (DI)(BX*4)
	MOVQ      R8, BX
	ADDQ      $16, R10
	JMP       bloop

bdone:
	MOVQ BX, ret+40(FP)
	VZEROUPPER
	RET
