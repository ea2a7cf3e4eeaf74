// W4A-NVFP4 GEMM: NVFP4 activations (E2M1 codes, E4M3 block scales of 16
// values, one float32 global scale) × centred INT4 weight codes held as
// GPT-QModel's two exact E2M1 planes, high = floor((c+2)/4) and
// low = c − 4·high. kernels/cpu/w4a_nvfp4_act.go's arithmetic: each value
// a_i·s_b is an integer in units of 2^-10 (E2M1 halves × E4M3 units of
// 2^-9); per 128-group the low and high plane sums L and H are exact
// integers (|sum| < 2^31), each converted to float32 once and scaled by
// 2^-10; the group term f32(f32(L + f32(4·H))·scale) is added over groups
// in float32 in group order, then multiplied by the global scale. Integer
// sums are exact in any order, so the outputs equal the CPU's bit for bit
// (the bias is added by the client, after, as the CPU does).
#include "fp8.cuh"

// e4m3 code → its value times 512 (an exact integer; NaN codes give 0,
// the quantizer never produces them).
__device__ __forceinline__ int nv_e4m3_units(unsigned int c) {
    unsigned int e = (c >> 3) & 15, m = c & 7;
    int u;
    if (e == 15 && m == 7) u = 0;
    else if (e == 0) u = (int)m;
    else u = (int)(8 + m) << (e - 1);
    return (c & 0x80) ? -u : u;
}

// e2m1 code → its value times 2 (an exact integer).
__device__ __forceinline__ int nv_e2m1_halves(unsigned int c) {
    const int mag[8] = {0, 1, 2, 3, 4, 6, 8, 12};
    int v = mag[c & 7];
    return (c & 8) ? -v : v;
}

// w4a_nvfp4: y[t,n] for t < T, n < N. a [T,K/2] E2M1 codes, value 2j in the
// low nibble of byte j; as [T,K/16] E4M3 block-scale codes; wq [N,K/2]
// uncentred INT4 codes q (c = q − 8), element 2j in the low nibble of byte
// j; ws [N,K/128] group scales; global the activation's global scale. One
// thread an output; a block's threads share token t's codes and scales
// (K/2 + K/16 bytes, K ≤ 32768) in shared memory.
extern "C" __global__ void w4a_nvfp4(float *y, const unsigned char *a, const unsigned char *as,
                                     const unsigned char *wq, const float *ws, long long T, long long K,
                                     long long N, float global) {
    DYNAMIC_SHARED(unsigned char, smem); // K/2 code bytes, then K/16 scale codes
    __shared__ int units[256];
    __shared__ int halves[16];
    __shared__ int lowp[16], highp[16]; // planes of q = c + 8
    long long t = blockIdx.y;
    long long n = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    for (int c = threadIdx.x; c < 256; c += blockDim.x) units[c] = nv_e4m3_units(c);
    for (int c = threadIdx.x; c < 16; c += blockDim.x) {
        halves[c] = nv_e2m1_halves(c);
        int cc = c - 8, h = (cc + 2 + 8) / 4 - 2; // floor((cc+2)/4): cc+2+8 ≥ 0
        highp[c] = h;
        lowp[c] = cc - 4 * h;
    }
    unsigned char *codes = smem, *scales = smem + K / 2;
    for (long long i = threadIdx.x; i < K / 2; i += blockDim.x) codes[i] = a[t * (K / 2) + i];
    for (long long i = threadIdx.x; i < K / 16; i += blockDim.x) scales[i] = as[t * (K / 16) + i];
    __syncthreads();
    if (n >= N) return;
    const unsigned char *row = wq + n * (K / 2);
    long long groups = K / 128;
    float acc = 0.f;
    for (long long g = 0; g < groups; g++) {
        int L = 0, H = 0;
        for (int b = 0; b < 8; b++) { // the group's eight 16-value blocks
            long long blk = g * 8 + b;
            int su = units[scales[blk]], l = 0, h = 0;
            for (int j = 0; j < 8; j++) {
                unsigned int x = codes[blk * 8 + j], w = row[blk * 8 + j];
                int x0 = halves[x & 15], x1 = halves[x >> 4];
                l += x0 * lowp[w & 15] + x1 * lowp[w >> 4];
                h += x0 * highp[w & 15] + x1 * highp[w >> 4];
            }
            // Σ_i (a_i·s_b)·p_i = s_b·Σ_i a_i·p_i: the same integer
            L += su * l;
            H += su * h;
        }
        float lf = __fmul_rn(__int2float_rn(L), 0x1p-10f);
        float hf = __fmul_rn(__int2float_rn(H), 0x1p-10f);
        acc = __fadd_rn(acc, __fmul_rn(__fadd_rn(lf, __fmul_rn(4.f, hf)), ws[n * groups + g]));
    }
    y[t * N + n] = __fmul_rn(acc, global);
}
