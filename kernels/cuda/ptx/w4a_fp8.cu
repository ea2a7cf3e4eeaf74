// W4A-FP8 GEMM: E4M3 activation codes × centred INT4 weight codes. Each
// 128-group's dot product is an exact integer in units of 2^-9 (E4M3 values
// are multiples of 2^-9 and at most 448); it is converted to float32 once,
// scaled by the group scale, and accumulated over groups in float32 in group
// order, then scaled by the token scale: kernels/cpu/w4a_fp8.go's order, so
// the outputs match bit for bit (the bias is added by the client).
#include "fp8.cuh"

__device__ __forceinline__ int e4m3_units(unsigned int c) {
    // c's value times 512, exact; NaN codes are never produced by the encoder
    unsigned int e = (c >> 3) & 15, m = c & 7;
    int u;
    if (e == 15 && m == 7) u = 0;
    else if (e == 0) u = (int)m;
    else u = (int)(8 + m) << (e - 1);
    return (c & 0x80) ? -u : u;
}

// w4a_fp8: y[t,n] for t < T, n < N; a [T,K] codes, as [T] token scales,
// wq [N,K/2] uncentred INT4 codes q (c = q − 8), element 2j in the low
// nibble of byte j; ws [N,K/128] group scales. One thread an output; a
// block's threads share the token's K codes (K ≤ 32768) in shared memory.
extern "C" __global__ void w4a_fp8(float *y, const unsigned char *a, const float *as, const unsigned char *wq,
                                   const float *ws, long long T, long long K, long long N) {
    DYNAMIC_SHARED(unsigned char, codes); // K codes of token t
    __shared__ int units[256];
    long long t = blockIdx.y;
    long long n = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    for (int c = threadIdx.x; c < 256; c += blockDim.x) units[c] = e4m3_units(c);
    for (long long i = threadIdx.x; i < K; i += blockDim.x) codes[i] = a[t * K + i];
    __syncthreads();
    if (n >= N) return;
    const unsigned char *row = wq + n * (K / 2);
    long long groups = K / 128;
    float acc = 0.f;
    for (long long g = 0; g < groups; g++) {
        int s = 0;
        for (int j = 0; j < 64; j++) {
            unsigned int b = row[g * 64 + j];
            s += units[codes[g * 128 + 2 * j]] * ((int)(b & 15) - 8) + units[codes[g * 128 + 2 * j + 1]] * ((int)(b >> 4) - 8);
        }
        acc = __fadd_rn(acc, __fmul_rn(__fmul_rn(__int2float_rn(s), 0x1p-9f), ws[n * groups + g]));
    }
    y[t * N + n] = __fmul_rn(acc, as[t]);
}
