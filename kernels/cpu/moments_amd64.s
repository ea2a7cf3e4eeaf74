#include "textflag.h"

DATA c_expm<>+0(SB)/8, $0x7F8000007F800000
DATA c_expm<>+8(SB)/8, $0x7F8000007F800000
DATA c_expm<>+16(SB)/8, $0x7F8000007F800000
DATA c_expm<>+24(SB)/8, $0x7F8000007F800000
GLOBL c_expm<>(SB), RODATA|NOPTR, $32

// func momentsAVX512(v *float32, n int, k float64, l *lanes)
//
// The main loop of acc.addMoments, sixteen values an iteration, value i in
// lane i%16 exactly as lanes.add does it in Go: s1 += x−k, s2 += (x−k)²
// (a multiply then an add, no FMA), lo = x < lo ? x : lo, hi = x > hi ? x :
// hi, and the largest exponent field seen (to spot NaN or ±inf). n is a
// multiple of 16. Layout of lanes: s1 [16]float64 at 0, s2 at 128, lo
// [16]float32 at 256, hi at 320, exp [16]uint32 at 384.
TEXT ·momentsAVX512(SB), NOSPLIT, $0-32
	MOVQ v+0(FP), SI
	MOVQ n+8(FP), CX
	VBROADCASTSD k+16(FP), Z15
	MOVQ l+24(FP), DI
	VMOVUPD 0(DI), Z0
	VMOVUPD 64(DI), Z1
	VMOVUPD 128(DI), Z2
	VMOVUPD 192(DI), Z3
	VMOVUPS 256(DI), Z4
	VMOVUPS 320(DI), Z5
	VMOVDQU32 384(DI), Z7
	MOVL $0x7F800000, AX
	VPBROADCASTD AX, Z6

loop:
	CMPQ CX, $16
	JLT  done
	VMOVUPS (SI), Z8
	VPANDD  Z6, Z8, Z9
	VPMAXUD Z9, Z7, Z7
	VMINPS  Z4, Z8, Z4          // lo = x < lo ? x : lo
	VMAXPS  Z5, Z8, Z5          // hi = x > hi ? x : hi
	VCVTPS2PD Y8, Z10
	VEXTRACTF64X4 $1, Z8, Y11
	VCVTPS2PD Y11, Z11
	VSUBPD  Z15, Z10, Z10       // d = x − k
	VSUBPD  Z15, Z11, Z11
	VADDPD  Z10, Z0, Z0         // s1 += d
	VADDPD  Z11, Z1, Z1
	VMULPD  Z10, Z10, Z10
	VMULPD  Z11, Z11, Z11
	VADDPD  Z10, Z2, Z2         // s2 += d·d
	VADDPD  Z11, Z3, Z3
	ADDQ    $64, SI
	SUBQ    $16, CX
	JMP     loop

done:
	VMOVUPD Z0, 0(DI)
	VMOVUPD Z1, 64(DI)
	VMOVUPD Z2, 128(DI)
	VMOVUPD Z3, 192(DI)
	VMOVUPS Z4, 256(DI)
	VMOVUPS Z5, 320(DI)
	VMOVDQU32 Z7, 384(DI)
	VZEROUPPER
	RET

// func momentsAVX2(v *float32, n int, k float64, l *lanes)
//
// momentsAVX512 on 256-bit registers: the same sixteen lanes, value i in
// lane i%16, so the sums are the same bit for bit.
TEXT ·momentsAVX2(SB), NOSPLIT, $0-32
	MOVQ v+0(FP), SI
	MOVQ n+8(FP), CX
	VBROADCASTSD k+16(FP), Y15
	MOVQ l+24(FP), DI
	VMOVUPD 0(DI), Y0           // s1 lanes 0-3
	VMOVUPD 32(DI), Y1          // 4-7
	VMOVUPD 64(DI), Y2          // 8-11
	VMOVUPD 96(DI), Y3          // 12-15
	VMOVUPD 128(DI), Y4         // s2 lanes 0-3
	VMOVUPD 160(DI), Y5
	VMOVUPD 192(DI), Y6
	VMOVUPD 224(DI), Y7
	VMOVUPS 256(DI), Y8         // lo lanes 0-7
	VMOVUPS 288(DI), Y9         // lo 8-15
	VMOVUPS 320(DI), Y10        // hi 0-7
	VMOVUPS 352(DI), Y11        // hi 8-15
	VMOVDQU 384(DI), Y12        // exp 0-7
	VMOVDQU 416(DI), Y13        // exp 8-15

aloop:
	CMPQ CX, $16
	JLT  adone
	VMOVUPS (SI), Y14           // x 0-7
	VPAND   c_expm<>(SB), Y14, Y15
	VPMAXUD Y15, Y12, Y12
	VMINPS  Y8, Y14, Y8         // lo = x < lo ? x : lo
	VMAXPS  Y10, Y14, Y10       // hi = x > hi ? x : hi
	VMOVUPS 32(SI), Y14         // x 8-15
	VPAND   c_expm<>(SB), Y14, Y15
	VPMAXUD Y15, Y13, Y13
	VMINPS  Y9, Y14, Y9
	VMAXPS  Y11, Y14, Y11
	VBROADCASTSD k+16(FP), Y15
	VCVTPS2PD (SI), Y14         // lanes 0-3
	VSUBPD  Y15, Y14, Y14
	VADDPD  Y14, Y0, Y0
	VMULPD  Y14, Y14, Y14
	VADDPD  Y14, Y4, Y4
	VCVTPS2PD 16(SI), Y14
	VSUBPD  Y15, Y14, Y14
	VADDPD  Y14, Y1, Y1
	VMULPD  Y14, Y14, Y14
	VADDPD  Y14, Y5, Y5
	VCVTPS2PD 32(SI), Y14
	VSUBPD  Y15, Y14, Y14
	VADDPD  Y14, Y2, Y2
	VMULPD  Y14, Y14, Y14
	VADDPD  Y14, Y6, Y6
	VCVTPS2PD 48(SI), Y14
	VSUBPD  Y15, Y14, Y14
	VADDPD  Y14, Y3, Y3
	VMULPD  Y14, Y14, Y14
	VADDPD  Y14, Y7, Y7
	ADDQ    $64, SI
	SUBQ    $16, CX
	JMP     aloop

adone:
	VMOVUPD Y0, 0(DI)
	VMOVUPD Y1, 32(DI)
	VMOVUPD Y2, 64(DI)
	VMOVUPD Y3, 96(DI)
	VMOVUPD Y4, 128(DI)
	VMOVUPD Y5, 160(DI)
	VMOVUPD Y6, 192(DI)
	VMOVUPD Y7, 224(DI)
	VMOVUPS Y8, 256(DI)
	VMOVUPS Y9, 288(DI)
	VMOVUPS Y10, 320(DI)
	VMOVUPS Y11, 352(DI)
	VMOVDQU Y12, 384(DI)
	VMOVDQU Y13, 416(DI)
	VZEROUPPER
	RET
