// W4A-FP8 GEMM on tensor cores (UNVERIFIED on a GPU so far: its host build,
// testdata/host_tc.cpp, emulates mma.sync's fragment layout as PTX ISA 7.8
// documents it; the parity test runs on the next GPU loan). bf16 holds every
// E4M3 value (4 significant bits, exponents 2^-9..2^8) and every centred
// INT4 code exactly, and their products exactly; mma.sync
// m16n8k16.bf16 accumulates a 128-group's sum in FP32 across its eight
// k-steps from zero. That sum equals kernels/cpu's exact integer group sum
// rounded once whenever its partial sums fit FP32's 24 bits (they do unless
// a group's sum passes 2^15 while it also holds activations below 2^-6 of
// the row's largest); the tensor core's own accumulation order and rounding
// are unspecified otherwise. Then, as kernels/cpu/w4a_fp8.go: the group term
// f32(P·scale) added over groups in float32 in group order, times the token
// scale (the bias added by the client).
#include "fp8.cuh"

// mma_m16n8k16_bf16: d = a·b + d for one warp (row-major A 16×16, column B
// 16×8, FP32 C/D), the fragments of PTX ISA §9.7.13.4.8. testdata/host_tc.cpp
// defines it for the CPU.
#ifndef MMA_M16N8K16_BF16
__device__ __forceinline__ void mma_m16n8k16_bf16(float *d, const unsigned *a, const unsigned *b) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
#endif

// bf16 bits of an exactly representable float (its low 16 bits are zero).
__device__ __forceinline__ unsigned short tc_bf16(float v) { return (unsigned short)(__float_as_uint(v) >> 16); }

#define TC_TM 64          // tokens a block
#define TC_TN 64          // outputs a block
#define TC_LD (128 + 8)   // shared row stride in bf16 (padding against bank conflicts)

// w4a_fp8_tc: y[t,n] for t < T, n < N (N % 32 == 0, K % 128 == 0). a [T,K]
// E4M3 codes, as [T] token scales, wq [N,K/2] uncentred INT4 codes (element
// 2j in the low nibble of byte j), ws [N,K/128] group scales. A block of 4
// warps computes 64 tokens × 64 outputs, warp w the tokens 16w..16w+15; per
// group the 64×128 activation and weight tiles are converted to bf16 in
// shared memory.
extern "C" __global__ void w4a_fp8_tc(float *y, const unsigned char *a, const float *as, const unsigned char *wq,
                                      const float *ws, long long T, long long K, long long N) {
    __shared__ __align__(16) unsigned short As[TC_TM * TC_LD];
    __shared__ __align__(16) unsigned short Bs[TC_TN * TC_LD];
    __shared__ unsigned short e4m3_bf16[256];
    int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, gq = lane >> 2, tq = lane & 3;
    long long t0 = (long long)blockIdx.y * TC_TM, n0 = (long long)blockIdx.x * TC_TN;
    for (int c = tid; c < 256; c += blockDim.x) {
        // NaN codes (never produced by the encoder) as 0
        unsigned e = (c >> 3) & 15, m = c & 7;
        e4m3_bf16[c] = (e == 15 && m == 7) ? 0 : tc_bf16(e4m3_value(c));
    }
    long long groups = K / 128;
    float acc[8][4], part[8][4];
    for (int j = 0; j < 8; j++)
        for (int r = 0; r < 4; r++) acc[j][r] = 0.f;
    for (long long g = 0; g < groups; g++) {
        __syncthreads(); // the previous group's tiles are read; the table is written
        for (int i = tid; i < TC_TM * 128; i += blockDim.x) {
            int r = i / 128, k = i % 128;
            long long t = t0 + r;
            As[r * TC_LD + k] = t < T ? e4m3_bf16[a[t * K + g * 128 + k]] : 0;
        }
        for (int i = tid; i < TC_TN * 64; i += blockDim.x) {
            int r = i / 64, kb = i % 64;
            long long n = n0 + r;
            unsigned q = n < N ? wq[n * (K / 2) + g * 64 + kb] : 0x88;
            Bs[r * TC_LD + 2 * kb] = tc_bf16((float)((int)(q & 15) - 8));
            Bs[r * TC_LD + 2 * kb + 1] = tc_bf16((float)((int)(q >> 4) - 8));
        }
        __syncthreads();
        for (int j = 0; j < 8; j++)
            for (int r = 0; r < 4; r++) part[j][r] = 0.f;
        const unsigned short *Aw = As + warp * 16 * TC_LD;
        for (int ks = 0; ks < 128; ks += 16) {
            unsigned af[4];
            af[0] = *(const unsigned *)&Aw[gq * TC_LD + ks + 2 * tq];
            af[1] = *(const unsigned *)&Aw[(gq + 8) * TC_LD + ks + 2 * tq];
            af[2] = *(const unsigned *)&Aw[gq * TC_LD + ks + 2 * tq + 8];
            af[3] = *(const unsigned *)&Aw[(gq + 8) * TC_LD + ks + 2 * tq + 8];
            for (int j = 0; j < 8; j++) {
                const unsigned short *Bn = Bs + (j * 8 + gq) * TC_LD + ks;
                unsigned bf[2];
                bf[0] = *(const unsigned *)&Bn[2 * tq];
                bf[1] = *(const unsigned *)&Bn[2 * tq + 8];
                mma_m16n8k16_bf16(part[j], af, bf);
            }
        }
        // acc += f32(P·scale), each output's group term in group order
        for (int j = 0; j < 8; j++) {
            long long n = n0 + j * 8 + 2 * tq;
            float s0 = n < N ? ws[n * groups + g] : 0.f, s1 = n + 1 < N ? ws[(n + 1) * groups + g] : 0.f;
            acc[j][0] = __fadd_rn(acc[j][0], __fmul_rn(part[j][0], s0));
            acc[j][1] = __fadd_rn(acc[j][1], __fmul_rn(part[j][1], s1));
            acc[j][2] = __fadd_rn(acc[j][2], __fmul_rn(part[j][2], s0));
            acc[j][3] = __fadd_rn(acc[j][3], __fmul_rn(part[j][3], s1));
        }
    }
    for (int j = 0; j < 8; j++) {
        long long n = n0 + j * 8 + 2 * tq;
        for (int h = 0; h < 2; h++) {
            long long t = t0 + warp * 16 + gq + 8 * h;
            if (t >= T) continue;
            if (n < N) y[t * N + n] = __fmul_rn(acc[j][2 * h], as[t]);
            if (n + 1 < N) y[t * N + n + 1] = __fmul_rn(acc[j][2 * h + 1], as[t]);
        }
    }
}
