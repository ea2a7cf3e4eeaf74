// Dequantization kernels: packed codes and scales in, float32 out, with the
// arithmetic of kernels/cpu and formats/scheme (one IEEE rounding per
// product, no fused operations), so that the results match bit for bit.
#include "fp8.cuh"

// dequant_fp8: out[r,c] = v(code)·scale or v(code)/scale (inverse), the
// scale at [r/R, c/C] of a grid with scols columns. Tensor scales are
// R = rows, C = cols; row scales R = 1, C = cols. The rows given are rows
// row0.. of the weight; scales is the whole grid.
extern "C" __global__ void dequant_fp8(float *out, const unsigned char *codes, const float *scales,
                                       long long row0, long long rows, long long cols, long long R, long long C,
                                       long long scols, long long inverse, long long e5m2) {
    long long n = rows * cols;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        long long r = row0 + i / cols, c = i % cols;
        float v = e5m2 ? e5m2_value(codes[i]) : e4m3_value(codes[i]);
        float s = scales[(r / R) * scols + c / C];
        out[i] = inverse ? __fdiv_rn(v, s) : __fmul_rn(v, s);
    }
}

// dequant_nvfp4: 16-value blocks, element 2j in the low nibble of byte j;
// out = e2m1 · f32(f32(e4m3 scale) · global). global is weight_scale_2, or
// f32(1 / weight_global_scale) for compressed-tensors (the client computes it).
extern "C" __global__ void dequant_nvfp4(float *out, const unsigned char *packed, const unsigned char *scales,
                                         long long n, float global) {
    for (long long j = blockIdx.x * (long long)blockDim.x + threadIdx.x; j < n / 2; j += (long long)gridDim.x * blockDim.x) {
        unsigned int b = packed[j];
        float d = __fmul_rn(e4m3_value(scales[(2 * j) / 16]), global);
        out[2 * j] = __fmul_rn(e2m1_value(b & 15), d);
        out[2 * j + 1] = __fmul_rn(e2m1_value(b >> 4), d);
    }
}

// dequant_mxfp4: 32-value blocks with E8M0 scales.
extern "C" __global__ void dequant_mxfp4(float *out, const unsigned char *packed, const unsigned char *scales, long long n) {
    for (long long j = blockIdx.x * (long long)blockDim.x + threadIdx.x; j < n / 2; j += (long long)gridDim.x * blockDim.x) {
        unsigned int b = packed[j];
        float d = e8m0_value(scales[(2 * j) / 32]);
        out[2 * j] = __fmul_rn(e2m1_value(b & 15), d);
        out[2 * j + 1] = __fmul_rn(e2m1_value(b >> 4), d);
    }
}
