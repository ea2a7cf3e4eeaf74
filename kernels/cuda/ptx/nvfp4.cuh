// nvfp4.cuh: the NVFP4 encoding steps both weight-quantization sources
// (nvfp4_quant.cu: max, mse; nvfp4_recipes.cu: four_six, least_squares,
// local_hessian) share, in kernels/cpu's float32 order.
#ifndef QUANTSCOPE_NVFP4_CUH
#define QUANTSCOPE_NVFP4_CUH
#include "fp8.cuh"

// e2m1_index rounds a ≥ 0 to the nearest E2M1 magnitude, ties to even,
// saturating at 6 (ModelOpt's and GPT-QModel's thresholds); NaN gives 0.
__device__ __forceinline__ unsigned int e2m1_index(float a) {
    return (a > 0.25f) + (a >= 0.75f) + (a > 1.25f) + (a >= 1.75f) + (a > 2.5f) + (a >= 3.5f) + (a > 5.f);
}

// e4m3_scale casts a scale already clamped to [2^-9, 448] to E4M3 (nearest, ties even).
__device__ __forceinline__ unsigned int e4m3_scale(float s) {
    if (s < 0x1p-6f) return (unsigned int)__float2int_rn(__fmul_rn(s, 512.f));
    unsigned int bits = __float_as_uint(s);
    int e = (int)(bits >> 23) - 127;
    unsigned int m = bits & 0x7FFFFF, keep = m >> 20, rem = m & 0xFFFFF;
    unsigned int code = ((unsigned int)(e + 7) << 3) | keep;
    if (rem > 0x80000u || (rem == 0x80000u && (keep & 1))) code++;
    return min(code, 0x7Eu);
}

// encode writes the 8 packed bytes of 16 values with divisor d: ModelOpt's
// _cast_fp4, whose sign is the quotient's (q < 0), so -0 and a negative
// quotient that underflows to -0 give code 0.
__device__ __forceinline__ unsigned int e2m1_code(float x, float d) {
    float q = __fdiv_rn(x, d);
    return e2m1_index(fabsf(q)) | (q < 0.f ? 8u : 0u);
}

__device__ __forceinline__ void encode(unsigned char *dst, const float *x, float d) {
    for (int j = 0; j < 8; j++)
        dst[j] = (unsigned char)(e2m1_code(x[2 * j], d) | (e2m1_code(x[2 * j + 1], d) << 4));
}

#endif
