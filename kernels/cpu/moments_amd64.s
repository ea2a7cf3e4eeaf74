#include "textflag.h"

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
