// NVFP4 weight quantization, ModelOpt's max and mse recipes (NUMERICS.md
// §1, §2), in kernels/cpu's float32 operation order: every division is the
// true IEEE division (__fdiv_rn, not CUDA's default approximate one) and no
// product is fused into a sum, so codes and scales match the CPU bit for bit.
#include "nvfp4.cuh"

__device__ __forceinline__ unsigned int max_code(float bamax, float six2) {
    float s = __fdiv_rn(bamax, six2);
    if (s == 0.f) s = 1.f;
    return e4m3_scale(fminf(fmaxf(s, 0x1p-9f), 448.f));
}

// nvfp4_max: one thread a 16-value block; nblocks = rows·cols/16.
extern "C" __global__ void nvfp4_max(const float *w, unsigned char *packed, unsigned char *scales,
                                     long long nblocks, float scale2, float six2) {
    for (long long k = blockIdx.x * (long long)blockDim.x + threadIdx.x; k < nblocks; k += (long long)gridDim.x * blockDim.x) {
        float x[16], bamax = 0.f;
        for (int j = 0; j < 16; j++) { x[j] = w[16 * k + j]; bamax = fmaxf(bamax, fabsf(x[j])); }
        unsigned int c = max_code(bamax, six2);
        scales[k] = (unsigned char)c;
        encode(packed + 8 * k, x, __fmul_rn(e4m3_value(c), scale2));
    }
}

// block_sse is Σ (|x| − f32(e2m1(|x/d|)·d))² summed in element order.
__device__ __forceinline__ float block_sse(const float *x, const float *a, float d) {
    float e = 0.f;
    for (int j = 0; j < 16; j++) {
        float v = __fmul_rn(e2m1_mag[e2m1_index(fabsf(__fdiv_rn(x[j], d)))], d);
        float diff = __fsub_rn(a[j], v);
        e = __fadd_rn(e, __fmul_rn(diff, diff));
    }
    return e;
}

// nvfp4_mse: ModelOpt's 126-code sweep. One thread a 16-value block, its
// values in registers, the 128 divisors in shared memory (one thread block
// a tile of blockDim.x blocks). As kernels/cpu's sweep: the max recipe's
// code and error first, then codes 1..126 in order, a code winning with a
// smaller error or an equal one and a lower code.
extern "C" __global__ void nvfp4_mse(const float *w, unsigned char *packed, unsigned char *scales,
                                     long long nblocks, float scale2, float six2) {
    __shared__ float div[128];
    for (int c = threadIdx.x; c < 128; c += blockDim.x) div[c] = __fmul_rn(e4m3_value(c), scale2);
    __syncthreads();
    for (long long k = blockIdx.x * (long long)blockDim.x + threadIdx.x; k < nblocks; k += (long long)gridDim.x * blockDim.x) {
        float a[16], x[16], bamax = 0.f;
        for (int j = 0; j < 16; j++) { x[j] = w[16 * k + j]; a[j] = fabsf(x[j]); bamax = fmaxf(bamax, a[j]); }
        unsigned int best = max_code(bamax, six2);
        float bestErr = block_sse(x, a, div[best]);
        for (unsigned int c = 1; c <= 0x7E; c++) {
            float e = block_sse(x, a, div[c]);
            if (e < bestErr || (e == bestErr && c < best)) { best = c; bestErr = e; }
        }
        scales[k] = (unsigned char)best;
        encode(packed + 8 * k, x, div[best]);
    }
}
