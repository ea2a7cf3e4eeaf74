// NVFP4 weight quantization, the recipes beyond max and mse: GPT-QModel's
// four_six and least_squares block algorithms (NUMERICS.md §5, global scale
// f32(amax / 1792)) and ModelOpt's local_hessian (§3: the 126-code sweep
// with the block error dwᵀ H_n dw, H_n the 16×16 second moment of input
// block n). One thread a 16-value block, in kernels/cpu's float32 order
// (every sum in element order, true IEEE division, no fused operations),
// so that the chosen codes and scales match the CPU bit for bit.
#include "nvfp4.cuh"

// nvr_cast_scale clamps a block scale to [2^-9, 448] and casts it to E4M3
// (nearest, ties even): kernels/cpu's castScale.
__device__ __forceinline__ unsigned int nvr_cast_scale(float s) { return e4m3_scale(fminf(fmaxf(s, 0x1p-9f), 448.f)); }

// nvr_div is a block's divisor f32(f32(e4m3(code)) · scale_2).
__device__ __forceinline__ float nvr_div(unsigned int c, float scale2) { return __fmul_rn(e4m3_value(c), scale2); }

// nvr_sse is Σ (|x| − f32(e2m1(|x/d|)·d))² in element order (kernels/cpu's blockSSE).
__device__ __forceinline__ float nvr_sse(const float *x, float d) {
    float e = 0.f;
    for (int j = 0; j < 16; j++) {
        float v = __fmul_rn(e2m1_mag[e2m1_index(fabsf(__fdiv_rn(x[j], d)))], d);
        float diff = __fsub_rn(fabsf(x[j]), v);
        e = __fadd_rn(e, __fmul_rn(diff, diff));
    }
    return e;
}

// nvr_ls_refine is GPT-QModel's refine(values): the least-squares scale of
// the E2M1 values (x's sign) the block takes with divisor d, Σx·v /
// max(Σv², 1), back to a block scale over g; 0x38 (1.0) when every value is 0.
__device__ __forceinline__ unsigned int nvr_ls_refine(const float *x, float d, float g) {
    float den = 0.f, num = 0.f;
    for (int j = 0; j < 16; j++) {
        float v = e2m1_mag[e2m1_index(fabsf(__fdiv_rn(x[j], d)))];
        if (x[j] < 0.f) v = -v;
        den = __fadd_rn(den, __fmul_rn(v, v));
        num = __fadd_rn(num, __fmul_rn(x[j], v));
    }
    if (!(den > 0.f)) return 0x38u;
    float opt = __fdiv_rn(num, fmaxf(den, 1.f));
    return nvr_cast_scale(__fdiv_rn(opt, g));
}

// nvfp4_gptq: one thread a 16-value block (nblocks = rows·cols/16) with
// global scale g. Seeds M = 4 then M = 6: f32(bamax / f32(M·g)) (0x38 for
// a zero block), each kept when its error is strictly below the best so
// far (which starts at +inf, the code at 0x38 = 1.0, GPT-QModel's
// best_local: M = 4 wins a tie; when every error is +inf the code stays
// 0x38, as on the CPU). least_squares (refine ≠ 0) then refines
// each seed's values, then the best's once more, each kept only when
// strictly better.
extern "C" __global__ void nvfp4_gptq(const float *w, unsigned char *packed, unsigned char *scales,
                                      long long nblocks, float g, long long refine) {
    for (long long k = blockIdx.x * (long long)blockDim.x + threadIdx.x; k < nblocks; k += (long long)gridDim.x * blockDim.x) {
        float x[16], bamax = 0.f;
        for (int j = 0; j < 16; j++) { x[j] = w[16 * k + j]; bamax = fmaxf(bamax, fabsf(x[j])); }
        unsigned int best = 0x38u, seed[2];
        float bestErr = __int_as_float(0x7f800000);
        for (int s = 0; s < 2; s++) {
            float m = s == 0 ? 4.f : 6.f;
            unsigned int c = 0x38u;
            if (bamax > 0.f) c = nvr_cast_scale(__fdiv_rn(bamax, __fmul_rn(m, g)));
            seed[s] = c;
            float e = nvr_sse(x, nvr_div(c, g));
            if (e < bestErr) { best = c; bestErr = e; }
        }
        if (refine) {
            for (int s = 0; s < 3; s++) {
                unsigned int c = nvr_ls_refine(x, nvr_div(s < 2 ? seed[s] : best, g), g);
                float e = nvr_sse(x, nvr_div(c, g));
                if (e < bestErr) { best = c; bestErr = e; }
            }
        }
        scales[k] = (unsigned char)best;
        encode(packed + 8 * k, x, nvr_div(best, g));
    }
}

// nvfp4_hess_acc adds tokens rows of activations x [tokens, cols] to the
// running sums acc[n·256 + i·16 + j] = Σ_t x[t, 16n+i]·x[t, 16n+j] (one
// thread an entry, the tokens in order, so that sums over successive
// pieces of tokens equal one sum over all of them); when total > 0 the
// piece is the last and each entry is then divided by total (ModelOpt's
// normalisation by the token count).
extern "C" __global__ void nvfp4_hess_acc(const float *x, const float *acc, float *out, long long tokens,
                                          long long cols, long long total) {
    long long n = cols * 16;
    for (long long p = blockIdx.x * (long long)blockDim.x + threadIdx.x; p < n; p += (long long)gridDim.x * blockDim.x) {
        long long b = p / 256, i = p / 16 % 16, j = p % 16;
        const float *xi = x + 16 * b + i, *xj = x + 16 * b + j;
        float h = acc[p];
        for (long long t = 0; t < tokens; t++) h = __fadd_rn(h, __fmul_rn(xi[t * cols], xj[t * cols]));
        if (total > 0) h = __fdiv_rn(h, (float)total);
        out[p] = h;
    }
}

// nvr_hloss is dwᵀ H dw with dw = x − f32(e2m1(x/d)·d) signed: Σ_i dw_i ·
// (Σ_j H_ij dw_j), both sums in index order (kernels/cpu's hessianLoss).
__device__ __forceinline__ float nvr_hloss(const float *x, float d, const float *h) {
    float dw[16];
    for (int i = 0; i < 16; i++) {
        unsigned int c = e2m1_code(x[i], d);
        float v = e2m1_mag[c & 7];
        if (c & 8) v = -v;
        dw[i] = __fsub_rn(x[i], __fmul_rn(v, d));
    }
    float loss = 0.f;
    for (int i = 0; i < 16; i++) {
        float hd = 0.f;
        for (int j = 0; j < 16; j++) hd = __fadd_rn(hd, __fmul_rn(h[16 * i + j], dw[j]));
        loss = __fadd_rn(loss, __fmul_rn(dw[i], hd));
    }
    return loss;
}

// nvfp4_hessian: local_hessian for rows × cols of weight with the
// normalised second moments H [cols/16][16][16]. One thread block a tile of
// blockDim.x rows in one column block n, H_n and the 128 divisors in
// shared memory; one thread a 16-value block, codes 1..126 in order, a code
// winning with a strictly smaller loss (so the first minimum, and code 1
// when no loss is below +inf).
extern "C" __global__ void nvfp4_hessian(const float *w, const float *H, unsigned char *packed, unsigned char *scales,
                                         long long rows, long long cols, float scale2) {
    __shared__ float h[256];
    __shared__ float div[128];
    for (int c = threadIdx.x; c < 128; c += blockDim.x) div[c] = nvr_div(c, scale2);
    long long nb = cols / 16, rt = (rows + blockDim.x - 1) / blockDim.x;
    for (long long tile = blockIdx.x; tile < nb * rt; tile += gridDim.x) {
        long long n = tile % nb, r = tile / nb * blockDim.x + threadIdx.x;
        __syncthreads();
        for (int e = threadIdx.x; e < 256; e += blockDim.x) h[e] = H[256 * n + e];
        __syncthreads();
        if (r >= rows) continue;
        long long k = r * nb + n;
        float x[16];
        for (int j = 0; j < 16; j++) x[j] = w[16 * k + j];
        unsigned int best = 1;
        float bestErr = __int_as_float(0x7f800000);
        for (unsigned int c = 1; c <= 0x7E; c++) {
            float e = nvr_hloss(x, div[c], h);
            if (e < bestErr) { best = c; bestErr = e; }
        }
        scales[k] = (unsigned char)best;
        encode(packed + 8 * k, x, div[best]);
    }
}
