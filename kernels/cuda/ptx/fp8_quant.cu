// FP8 weight quantization (NUMERICS.md §0, §6): e4m3 or e5m2 codes with
// tensor, row or R×C block scales, stored as GPT-QModel's inverse scale
// (weight_scale_inv = f32(fp8_max / max(amax, tiny)), q = cast(clamp(w·s)))
// or as ModelOpt's / compressed-tensors' direct scale (scale = f32(amax /
// fp8_max), q = cast(clamp(w / scale))), in kernels/cpu's float32 order:
// true IEEE division (__fdiv_rn), no fused operations, so that codes and
// scales match the CPU bit for bit.
//
// Three kernels: fp8q_amax (the largest |w| of every row's C-wide column
// block), fp8q_scales (a region's amax over its R rows, then its scale) and
// fp8q_encode (the codes). The worker runs all three on one piece of rows
// when its regions lie inside it, else the first over the whole weight,
// then the second, then the third.
#include "fp8.cuh"

// fp8q_cast is formats/numeric's float32 → FP8 encoder (torch's
// round-to-nearest-even cast with finite saturation): NaN → 0x7F, |x| at
// or above the largest finite value (inf too) → ±max, the sign bit copied
// (-0 and a negative value that rounds to zero give 0x80).
__device__ __forceinline__ unsigned int fp8q_cast(float x, int e5m2) {
    unsigned int bits = __float_as_uint(x);
    unsigned int sign = (bits >> 24) & 0x80u, a = bits & 0x7FFFFFFFu;
    if (a > 0x7F800000u) return 0x7Fu;
    const unsigned int man = e5m2 ? 2u : 3u, bias = e5m2 ? 15u : 7u, maxCode = e5m2 ? 0x7Bu : 0x7Eu;
    const unsigned int maxBits = e5m2 ? 0x47600000u : 0x43E00000u; // 57344, 448
    if (a >= maxBits) return sign | maxCode;
    int e = (int)(a >> 23) - 127;
    const int minExp = 1 - (int)bias;
    unsigned int code;
    if (e < minExp) {
        // subnormal codes: multiples of 2^(minExp-man); the scaling is exact
        float q = __fmul_rn(__uint_as_float(a), e5m2 ? 65536.f : 512.f);
        code = (unsigned int)__float2int_rn(q); // ties to even; 1 << man is the smallest normal
    } else {
        unsigned int m = a & 0x7FFFFFu, sh = 23u - man;
        unsigned int keep = m >> sh, rem = m & ((1u << sh) - 1), half = 1u << (sh - 1);
        code = ((unsigned int)(e + (int)bias) << man) | keep;
        if (rem > half || (rem == half && (keep & 1))) code++; // a carry into the exponent is right too
    }
    return sign | (code < maxCode ? code : maxCode);
}

// fp8q_amax writes amax[r·scols + k], the largest |w| of row r's column
// block k (columns k·C .. min((k+1)·C, cols)), as float bits: magnitudes
// order as their bit patterns. One thread block a (row, column block),
// its threads striding over the columns, then a tree in shared memory.
// blockDim.x must be a power of two ≤ 256.
extern "C" __global__ void fp8q_amax(const float *w, unsigned int *amax, long long rows, long long cols,
                                     long long C, long long scols) {
    __shared__ unsigned int red[256];
    for (long long p = blockIdx.x; p < rows * scols; p += gridDim.x) {
        long long r = p / scols, k = p % scols;
        long long lo = k * C, hi = lo + C < cols ? lo + C : cols;
        unsigned int m = 0;
        for (long long c = lo + threadIdx.x; c < hi; c += blockDim.x) {
            unsigned int a = __float_as_uint(w[r * cols + c]) & 0x7FFFFFFFu;
            m = a > m ? a : m;
        }
        red[threadIdx.x] = m;
        __syncthreads();
        for (unsigned int s = blockDim.x / 2; s > 0; s >>= 1) {
            if (threadIdx.x < s) { unsigned int b = red[threadIdx.x + s]; if (b > red[threadIdx.x]) red[threadIdx.x] = b; }
            __syncthreads();
        }
        if (threadIdx.x == 0) amax[p] = red[0];
        __syncthreads();
    }
}

// fp8q_scale is kernels/cpu's fp8Scale: 1 for an all-zero region; inverse
// f32(fmax / max(amax, tiny)) held at the largest float32; direct
// f32(amax / fmax), the smallest float32 when that underflows to 0.
__device__ __forceinline__ float fp8q_scale(float amax, float fmax, long long inverse) {
    if (amax == 0.f) return 1.f;
    if (inverse) {
        float s = __fdiv_rn(fmax, fmaxf(amax, 0x1p-126f));
        return s > 0x1.fffffep127f ? 0x1.fffffep127f : s;
    }
    float s = __fdiv_rn(amax, fmax);
    return s == 0.f ? 0x1p-149f : s;
}

// fp8q_scales: scales[i·scols + k] from the amax of rows i·R .. (i+1)·R
// (up to rows) in column block k; one thread a region.
extern "C" __global__ void fp8q_scales(const unsigned int *amax, float *scales, long long rows, long long R,
                                       long long scols, float fmax, long long inverse) {
    long long n = (rows + R - 1) / R * scols;
    for (long long p = blockIdx.x * (long long)blockDim.x + threadIdx.x; p < n; p += (long long)gridDim.x * blockDim.x) {
        long long i = p / scols, k = p % scols;
        unsigned int m = 0;
        for (long long r = i * R; r < (i + 1) * R && r < rows; r++) { unsigned int a = amax[r * scols + k]; m = a > m ? a : m; }
        scales[p] = fp8q_scale(__uint_as_float(m), fmax, inverse);
    }
}

// fp8q_encode writes the codes of rows row0 .. row0+rows of the weight
// (w and codes hold those rows; scales holds the grid from region row
// srow0 on): v = f32(w·s) (inverse) or f32(w / s), clamped to ±fmax, cast.
extern "C" __global__ void fp8q_encode(const float *w, const float *scales, unsigned char *codes,
                                       long long row0, long long rows, long long cols, long long R, long long C,
                                       long long scols, long long srow0, float fmax, long long inverse, long long e5m2) {
    long long n = rows * cols;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        long long r = row0 + i / cols, c = i % cols;
        float s = scales[(r / R - srow0) * scols + c / C];
        float v = inverse ? __fmul_rn(w[i], s) : __fdiv_rn(w[i], s);
        v = fminf(fmaxf(v, -fmax), fmax);
        codes[i] = (unsigned char)fp8q_cast(v, (int)e5m2);
    }
}

// fp8q_cast_all casts n floats (a test of fp8q_cast on every edge case).
extern "C" __global__ void fp8q_cast_all(const float *x, unsigned char *codes, long long n, long long e5m2) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        codes[i] = (unsigned char)fp8q_cast(x[i], (int)e5m2);
}
