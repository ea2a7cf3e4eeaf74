// The Llama decoder layer's other operations, in the float32 operation order
// of model/ (HF's LlamaRMSNorm, rotate_half RoPE, eager causal GQA
// attention, SwiGLU): every product and sum rounded once (no fused
// multiply-adds: the generated PTX has none), true IEEE division and square
// root. What is not the CPU's bit for bit: exp, cos and sin are CUDA's
// double-precision functions (≤ 2 ulp in double) where model/ uses Go's
// math package, both rounded to float32, so a value within a few double ulp
// of a float32 rounding boundary can round the other way (1 float32 ulp);
// and RMSNorm's float64 sum of squares is a block reduction in another order
// than the CPU's (relative difference ≤ cols·2^-52 before the float32
// rounding). The parity tests state the resulting bounds.
#include "fp8.cuh"

// rms_norm: y[r,:] = w ⊙ f32(x[r,:]·rsqrt), rsqrt = f32(1/√(f32(f32(Σx²/cols)
// + eps))) with Σx² in float64. One thread block a row (blockDim ≤ 256).
extern "C" __global__ void rms_norm(float *y, const float *x, const float *w, long long rows, long long cols, float eps) {
    __shared__ double part[256];
    __shared__ float rs;
    for (long long r = blockIdx.x; r < rows; r += gridDim.x) {
        const float *row = x + r * cols;
        double s = 0.0;
        for (long long i = threadIdx.x; i < cols; i += blockDim.x) {
            double v = (double)row[i];
            s = __dadd_rn(s, __dmul_rn(v, v));
        }
        part[threadIdx.x] = s;
        __syncthreads();
        if (threadIdx.x == 0) {
            double ss = 0.0;
            for (unsigned int k = 0; k < blockDim.x; k++) ss = __dadd_rn(ss, part[k]);
            float variance = __double2float_rn(__ddiv_rn(ss, (double)cols));
            rs = __double2float_rn(__ddiv_rn(1.0, __dsqrt_rn((double)__fadd_rn(variance, eps))));
        }
        __syncthreads();
        float q = rs;
        for (long long i = threadIdx.x; i < cols; i += blockDim.x) y[r * cols + i] = __fmul_rn(w[i], __fmul_rn(row[i], q));
        __syncthreads();
    }
}

// rope: x [T, heads·d] → y, each head rotated as HF's x·cos + rotate_half(x)·sin
// at position t: angle f32(t·inv[i]), cos and sin of it in double rounded
// to float32. One thread an (t, head, i < d/2) pair.
extern "C" __global__ void rope(float *y, const float *x, const float *inv, long long T, long long heads, long long d) {
    long long half = d / 2, n = T * heads * half;
    for (long long k = blockIdx.x * (long long)blockDim.x + threadIdx.x; k < n; k += (long long)gridDim.x * blockDim.x) {
        long long i = k % half, th = k / half, t = th / heads;
        double a = (double)__fmul_rn((float)t, inv[i]);
        float c = __double2float_rn(cos(a)), s = __double2float_rn(sin(a));
        long long o = th * d + i;
        float x1 = x[o], x2 = x[o + half];
        y[o] = __fsub_rn(__fmul_rn(x1, c), __fmul_rn(x2, s));
        y[o + half] = __fadd_rn(__fmul_rn(x2, c), __fmul_rn(x1, s));
    }
}

// attention: causal GQA, one thread block a (query i, head h): the scores
// q·k_j (float32 sums in element order) times scale for j ≤ i in shared
// memory, their max, f32(exp(s − max)) in double, the sum of those in key
// order (one thread), p_j = s_j / sum, then each output element Σ_j p_j·v_j
// in key order. Query head h reads KV head h/(heads/kvheads). scale is
// f32(1/√d), computed by the client as model/ does.
extern "C" __global__ void attention(float *out, const float *q, const float *k, const float *v, long long T,
                                     long long heads, long long kvheads, long long d, float scale) {
    DYNAMIC_SHARED(float, s); // T scores, then probabilities
    __shared__ float qs[256];
    __shared__ float stat[2]; // max, sum
    long long i = blockIdx.x, h = blockIdx.y;
    long long kh = h / (heads / kvheads), qc = heads * d, kc = kvheads * d;
    for (long long e = threadIdx.x; e < d; e += blockDim.x) qs[e] = q[i * qc + h * d + e];
    __syncthreads();
    for (long long j = threadIdx.x; j <= i; j += blockDim.x) {
        const float *kj = k + j * kc + kh * d;
        float dot = 0.f;
        for (long long e = 0; e < d; e++) dot = __fadd_rn(dot, __fmul_rn(qs[e], kj[e]));
        s[j] = __fmul_rn(dot, scale);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        float mx = -__int_as_float(0x7f800000u);
        for (long long j = 0; j <= i; j++) mx = fmaxf(mx, s[j]);
        stat[0] = mx;
    }
    __syncthreads();
    float mx = stat[0];
    for (long long j = threadIdx.x; j <= i; j += blockDim.x) s[j] = __double2float_rn(exp((double)__fsub_rn(s[j], mx)));
    __syncthreads();
    if (threadIdx.x == 0) {
        float sum = 0.f;
        for (long long j = 0; j <= i; j++) sum = __fadd_rn(sum, s[j]);
        stat[1] = sum;
    }
    __syncthreads();
    float sum = stat[1];
    for (long long j = threadIdx.x; j <= i; j += blockDim.x) s[j] = __fdiv_rn(s[j], sum);
    __syncthreads();
    for (long long e = threadIdx.x; e < d; e += blockDim.x) {
        float o = 0.f;
        for (long long j = 0; j <= i; j++) o = __fadd_rn(o, __fmul_rn(s[j], v[j * kc + kh * d + e]));
        out[i * qc + h * d + e] = o;
    }
}

// swiglu: y = f32(silu(g)·u), silu(g) = f32(g / f32(1 + f32(exp(−g)))) with
// exp in double, as model/'s silu.
extern "C" __global__ void swiglu(float *y, const float *g, const float *u, long long n) {
    for (long long k = blockIdx.x * (long long)blockDim.x + threadIdx.x; k < n; k += (long long)gridDim.x * blockDim.x) {
        float x = g[k];
        float e = __double2float_rn(exp((double)(-x)));
        y[k] = __fmul_rn(__fdiv_rn(x, __fadd_rn(1.f, e)), u[k]);
    }
}
