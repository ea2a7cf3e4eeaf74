// Element decoders shared by the kernels: exact, by bit construction, the
// values of formats/numeric's tables (E4M3FN, E5M2, E2M1, E8M0).
#pragma once

// A kernel's dynamic shared memory (a macro so that testdata/host.cpp can
// run the kernels' arithmetic on the CPU).
#ifndef DYNAMIC_SHARED
#define DYNAMIC_SHARED(type, name) extern __shared__ type name[]
#endif

__device__ __forceinline__ float e4m3_value(unsigned int c) {
    unsigned int s = (c >> 7) & 1, e = (c >> 3) & 15, m = c & 7;
    float v;
    if (e == 15 && m == 7) return __int_as_float(0x7fc00000u | (s << 31));
    if (e == 0) v = (float)m * 0x1p-9f;
    else v = __int_as_float(((e + 120) << 23) | (m << 20));
    return s ? -v : v;
}

__device__ __forceinline__ float e5m2_value(unsigned int c) {
    unsigned int s = (c >> 7) & 1, e = (c >> 2) & 31, m = c & 3;
    float v;
    if (e == 31) v = m ? __int_as_float(0x7fc00000u) : __int_as_float(0x7f800000u);
    else if (e == 0) v = (float)m * 0x1p-16f;
    else v = __int_as_float(((e + 112) << 23) | (m << 21));
    return s ? -v : v;
}

__device__ __constant__ float e2m1_mag[8] = {0.f, 0.5f, 1.f, 1.5f, 2.f, 3.f, 4.f, 6.f};

__device__ __forceinline__ float e2m1_value(unsigned int c) {
    float v = e2m1_mag[c & 7];
    return (c & 8) ? -v : v;
}

// e8m0_value is 2^(c-127); 0xFF is NaN.
__device__ __forceinline__ float e8m0_value(unsigned int c) {
    if (c == 255) return __int_as_float(0x7fc00000u);
    if (c == 0) return 0x1p-127f;
    return __int_as_float(c << 23);
}
