// W4A-NVFP4 GEMM on tensor cores (UNVERIFIED on a GPU so far: its host
// build, testdata/host_tc.cpp, emulates mma.sync's fragment layout as PTX
// ISA 7.8 documents it; the parity test runs on the next GPU loan). Each
// activation value e2m1·e4m3 has at most 6 significant bits and the weight
// planes (high = floor((c+2)/4), low = c − 4·high) are in [−2, 2]: bf16
// holds them and their products exactly. Per 128-group two mma.sync
// m16n8k16.bf16 chains (low plane, high plane) sum L and H in FP32 from
// zero; each equals kernels/cpu/w4a_nvfp4_act.go's exact integer sum
// rounded once whenever its partial sums fit FP32's 24 bits. Then, in the
// CPU's order: f32(f32(L + f32(4·H))·scale) added over groups in group
// order, times the global scale (the bias added by the client).
#include "fp8.cuh"

#ifndef MMA_M16N8K16_BF16
__device__ __forceinline__ void mma_m16n8k16_bf16(float *d, const unsigned *a, const unsigned *b) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
#endif

__device__ __forceinline__ unsigned short nvtc_bf16(float v) { return (unsigned short)(__float_as_uint(v) >> 16); }

#define NVTC_TM 64        // tokens a block
#define NVTC_TN 32        // outputs a block
#define NVTC_LD (128 + 8) // shared row stride in bf16

// w4a_nvfp4_tc: y[t,n]; a [T,K/2] E2M1 codes (value 2j in the low nibble of
// byte j), as [T,K/16] E4M3 block-scale codes, wq [N,K/2] uncentred INT4
// codes, ws [N,K/128] group scales, global the activation's global scale.
// A block of 4 warps computes 64 tokens × 32 outputs, warp w the tokens
// 16w..16w+15.
extern "C" __global__ void w4a_nvfp4_tc(float *y, const unsigned char *a, const unsigned char *as,
                                        const unsigned char *wq, const float *ws, long long T, long long K,
                                        long long N, float global) {
    __shared__ __align__(16) unsigned short As[NVTC_TM * NVTC_LD];
    __shared__ __align__(16) unsigned short Bl[NVTC_TN * NVTC_LD];
    __shared__ __align__(16) unsigned short Bh[NVTC_TN * NVTC_LD];
    __shared__ float scale_val[256];
    int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, gq = lane >> 2, tq = lane & 3;
    long long t0 = (long long)blockIdx.y * NVTC_TM, n0 = (long long)blockIdx.x * NVTC_TN;
    for (int c = tid; c < 256; c += blockDim.x) {
        unsigned e = (c >> 3) & 15, m = c & 7;
        scale_val[c] = (e == 15 && m == 7) ? 0.f : e4m3_value(c); // NaN codes never produced
    }
    long long groups = K / 128;
    float acc[4][4], L[4][4], H[4][4];
    for (int j = 0; j < 4; j++)
        for (int r = 0; r < 4; r++) acc[j][r] = 0.f;
    for (long long g = 0; g < groups; g++) {
        __syncthreads();
        for (int i = tid; i < NVTC_TM * 64; i += blockDim.x) {
            int r = i / 64, kb = i % 64;
            long long t = t0 + r;
            unsigned short lo = 0, hi = 0;
            if (t < T) {
                unsigned x = a[t * (K / 2) + g * 64 + kb];
                float s = scale_val[as[t * (K / 16) + (g * 128 + 2 * kb) / 16]];
                lo = nvtc_bf16(__fmul_rn(e2m1_value(x & 15), s)); // exact: ≤ 6 significant bits
                hi = nvtc_bf16(__fmul_rn(e2m1_value(x >> 4), s));
            }
            As[r * NVTC_LD + 2 * kb] = lo;
            As[r * NVTC_LD + 2 * kb + 1] = hi;
        }
        for (int i = tid; i < NVTC_TN * 128; i += blockDim.x) {
            int r = i / 128, k = i % 128;
            long long n = n0 + r;
            int c = 0;
            if (n < N) {
                unsigned q = wq[n * (K / 2) + g * 64 + k / 2];
                c = (int)((k & 1) ? q >> 4 : q & 15) - 8;
            }
            int h = (c + 10) / 4 - 2; // floor((c+2)/4), c + 10 ≥ 2
            Bh[r * NVTC_LD + k] = nvtc_bf16((float)h);
            Bl[r * NVTC_LD + k] = nvtc_bf16((float)(c - 4 * h));
        }
        __syncthreads();
        for (int j = 0; j < 4; j++)
            for (int r = 0; r < 4; r++) L[j][r] = H[j][r] = 0.f;
        const unsigned short *Aw = As + warp * 16 * NVTC_LD;
        for (int ks = 0; ks < 128; ks += 16) {
            unsigned af[4];
            af[0] = *(const unsigned *)&Aw[gq * NVTC_LD + ks + 2 * tq];
            af[1] = *(const unsigned *)&Aw[(gq + 8) * NVTC_LD + ks + 2 * tq];
            af[2] = *(const unsigned *)&Aw[gq * NVTC_LD + ks + 2 * tq + 8];
            af[3] = *(const unsigned *)&Aw[(gq + 8) * NVTC_LD + ks + 2 * tq + 8];
            for (int j = 0; j < 4; j++) {
                int off = (j * 8 + gq) * NVTC_LD + ks + 2 * tq;
                unsigned bl[2] = {*(const unsigned *)&Bl[off], *(const unsigned *)&Bl[off + 8]};
                unsigned bh[2] = {*(const unsigned *)&Bh[off], *(const unsigned *)&Bh[off + 8]};
                mma_m16n8k16_bf16(L[j], af, bl);
                mma_m16n8k16_bf16(H[j], af, bh);
            }
        }
        for (int j = 0; j < 4; j++) {
            long long n = n0 + j * 8 + 2 * tq;
            float s0 = n < N ? ws[n * groups + g] : 0.f, s1 = n + 1 < N ? ws[(n + 1) * groups + g] : 0.f;
            for (int r = 0; r < 4; r++) {
                float v = __fadd_rn(L[j][r], __fmul_rn(4.f, H[j][r]));
                acc[j][r] = __fadd_rn(acc[j][r], __fmul_rn(v, (r & 1) ? s1 : s0));
            }
        }
    }
    for (int j = 0; j < 4; j++) {
        long long n = n0 + j * 8 + 2 * tq;
        for (int h = 0; h < 2; h++) {
            long long t = t0 + warp * 16 + gq + 8 * h;
            if (t >= T) continue;
            if (n < N) y[t * N + n] = __fmul_rn(acc[j][2 * h], global);
            if (n + 1 < N) y[t * N + n + 1] = __fmul_rn(acc[j][2 * h + 1], global);
        }
    }
}
