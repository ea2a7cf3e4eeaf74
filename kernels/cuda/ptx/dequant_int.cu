// Integer-code dequantization and one-pass statistics.
//
// Dequantization of compressed-tensors pack-quantized weights (1-8 bits, the
// bitstream layout of compressed-tensors >= 0.18 and the whole-values-a-word
// layout of <= 0.17), GPTQ (qweight packed along the inputs) and AWQ (eight
// interleaved nibbles a word along the outputs), with the arithmetic of
// formats/scheme: v = (code - zero) * scale in two IEEE roundings-free steps
// (the difference of two small integers is exact) and one rounded product,
// so that the results match the CPU decoders bit for bit.
//
// The client (kernels/cuda) hands every layout the same side tensors, built
// on the host from the checkpoint's small tensors exactly as formats/scheme
// reads them: scales as float32, the zero points as float32 values (GPTQ
// v1's stored z - 1 already plus one, the layout's midpoint when there are
// none, 0 for a symmetric compressed-tensors weight) in the scales' shape,
// and each input column's group (g_idx, or column / group size).
//
// Statistics: one pass over a module's values with block-level reductions:
// per thread the count, min, max, NaN and inf counts, codes at either end of
// their range, and float64 sums of d = x - K and d^2 with K the thread's
// first finite value; each block merges its threads' (n, mean, M2) with
// Chan, Golub and LeVeque's update in thread order and writes one partial;
// the client merges the partials in block order. Every value is also counted
// in a 65536-bucket table by its top 16 bits (kernels/cpu's histogram
// buckets), with warp-aggregated atomic adds.
#include "fp8.cuh"

// The layouts of the integer kernels.
#define LAYOUT_CT_BITSTREAM 0
#define LAYOUT_CT_PERWORD 1
#define LAYOUT_GPTQ 2
#define LAYOUT_AWQ 3

// An integer weight as the kernels see it: the logical [rows, cols] matrix
// (for GPTQ and AWQ rows are the outputs, cols the inputs).
struct int_src {
    const unsigned int *w; // the packed words
    const float *s, *z;    // scales and zero values: ct [rows, groups], gptq/awq [groups, rows]
    const int *gidx;       // the group of each column
    long long layout, bits, rows, cols, groups;
};

// int_field is the stored (unsigned) code of element (r, c).
__device__ __forceinline__ unsigned int int_field(const int_src &q, long long r, long long c) {
    unsigned int mask = (1u << q.bits) - 1;
    if (q.layout == LAYOUT_AWQ) {
        // word (c, r/8), nibble k holds column 8(r/8) + {0,2,4,6,1,3,5,7}[k]:
        // column j is in nibble {0,4,1,5,2,6,3,7}[j], packed as 0x73625140
        unsigned int word = q.w[c * (q.rows / 8) + r / 8];
        unsigned int k = (0x73625140u >> (4 * (unsigned int)(r & 7))) & 15;
        return (word >> (4 * k)) & 15;
    }
    if (q.layout == LAYOUT_GPTQ) { // column r is a bitstream over the inputs
        long long bit = c * q.bits, k = bit / 32;
        unsigned int off = (unsigned int)(bit % 32);
        unsigned long long v = q.w[k * q.rows + r];
        if (off + q.bits > 32) v |= (unsigned long long)q.w[(k + 1) * q.rows + r] << 32;
        return (unsigned int)(v >> off) & mask;
    }
    long long p, bit; // compressed-tensors: each row starts at a fresh word
    if (q.layout == LAYOUT_CT_PERWORD) {
        unsigned int per = 32 / (unsigned int)q.bits, cu = (unsigned int)c; // columns < 2^31
        p = (q.cols + per - 1) / per;
        bit = (long long)(cu / per) * 32 + (cu % per) * q.bits;
    } else {
        p = (q.cols * q.bits + 31) / 32;
        bit = c * q.bits;
    }
    const unsigned int *row = q.w + r * p;
    long long k = bit / 32;
    unsigned int off = (unsigned int)(bit % 32);
    unsigned long long v = row[k];
    if (off + q.bits > 32) v |= (unsigned long long)row[k + 1] << 32;
    return (unsigned int)(v >> off) & mask;
}

// int_value decodes element (r, c) and says whether its code is at either
// end of the code range.
__device__ __forceinline__ float int_value(const int_src &q, long long r, long long c, unsigned int *at_end) {
    unsigned int f = int_field(q, r, c);
    *at_end = (f == 0 || f == (1u << q.bits) - 1);
    long long g = q.gidx[c];
    if (q.layout == LAYOUT_CT_BITSTREAM || q.layout == LAYOUT_CT_PERWORD) {
        long long k = r * q.groups + g;
        int code = (int)f - (1 << (q.bits - 1)); // signed codes are stored + 2^(b-1)
        return __fmul_rn(__fsub_rn(__int2float_rn(code), q.z[k]), q.s[k]);
    }
    long long k = g * q.rows + r;
    return __fmul_rn(q.s[k], __fsub_rn(__int2float_rn((int)f), q.z[k]));
}

// A grid-stride walk over the elements [e0, e1) of a matrix with cols
// columns, keeping the row and column without a division an element.
struct walk {
    long long i, e1, r, c, step, dr, dc, cols;
};

__device__ __forceinline__ void walk_open(walk *w, long long e0, long long e1, long long cols) {
    w->i = e0 + blockIdx.x * (long long)blockDim.x + threadIdx.x;
    w->e1 = e1;
    w->cols = cols;
    w->r = w->i / cols;
    w->c = w->i % cols;
    w->step = (long long)gridDim.x * blockDim.x;
    w->dr = w->step / cols;
    w->dc = w->step % cols;
}

__device__ __forceinline__ void walk_next(walk *w) {
    w->i += w->step;
    w->r += w->dr;
    w->c += w->dc;
    if (w->c >= w->cols) {
        w->c -= w->cols;
        w->r++;
    }
}

// dequant_int writes rows [row0, row0+nrows) of the logical weight.
extern "C" __global__ void dequant_int(float *out, const unsigned int *w, const float *s, const float *z, const int *gidx,
                                       long long layout, long long bits, long long rows, long long cols, long long groups,
                                       long long row0, long long nrows) {
    int_src q = {w, s, z, gidx, layout, bits, rows, cols, groups};
    walk it;
    for (walk_open(&it, row0 * cols, (row0 + nrows) * cols, cols); it.i < it.e1; walk_next(&it)) {
        unsigned int e;
        out[it.i - row0 * cols] = int_value(q, it.r, it.c, &e);
    }
}

// ---- statistics ----

// A thread's (and then a block's) running statistics.
struct stats_acc {
    unsigned long long n, nan, inf, at_end;
    double k, s1, s2; // shift and shifted sums (threads); mean and M2 after stats_close
    float lo, hi;
};

__device__ __forceinline__ void stats_open(stats_acc *a) {
    a->n = a->nan = a->inf = a->at_end = 0;
    a->k = a->s1 = a->s2 = 0;
    a->lo = __int_as_float(0x7f800000u);
    a->hi = __int_as_float(0xff800000u);
}

__device__ __forceinline__ void stats_add(stats_acc *a, float x, unsigned int at_end, unsigned long long *hist) {
    unsigned int u = __float_as_uint(x);
    a->at_end += at_end;
    // the bucket of the top 16 bits, one atomic add for the lanes that share it
    unsigned int key = u >> 16;
#ifdef HOST_SHIM
    atomicAdd(&hist[key], 1ull);
#else
    unsigned int peers = __match_any_sync(__activemask(), key);
    if ((__ffs(peers) - 1) == (int)(threadIdx.x & 31)) atomicAdd(&hist[key], (unsigned long long)__popc(peers));
#endif
    if ((u & 0x7f800000u) == 0x7f800000u) {
        if (u & 0x7fffffu) a->nan++;
        else a->inf++;
        return;
    }
    if (a->n == 0) a->k = (double)x;
    a->n++;
    if (x < a->lo) a->lo = x;
    if (x > a->hi) a->hi = x;
    double d = (double)x - a->k;
    a->s1 += d;
    a->s2 += d * d;
}

// stats_close turns shifted sums into (mean, M2) in (k, s1).
__device__ __forceinline__ void stats_close(stats_acc *a) {
    if (a->n == 0) return;
    double n = (double)a->n;
    double mean = a->k + a->s1 / n, m2 = a->s2 - a->s1 * a->s1 / n;
    a->k = mean;
    a->s1 = m2 > 0 ? m2 : 0;
}

// stats_merge is Chan et al.'s update of a (closed) with b (closed).
__device__ __forceinline__ void stats_merge(stats_acc *a, const stats_acc *b) {
    a->nan += b->nan;
    a->inf += b->inf;
    a->at_end += b->at_end;
    if (b->lo < a->lo) a->lo = b->lo;
    if (b->hi > a->hi) a->hi = b->hi;
    if (b->n == 0) return;
    if (a->n == 0) {
        a->n = b->n;
        a->k = b->k;
        a->s1 = b->s1;
        return;
    }
    double na = (double)a->n, nb = (double)b->n, t = na + nb, d = b->k - a->k;
    a->k += d * nb / t;
    a->s1 += b->s1 + d * d * na * nb / t;
    a->n += b->n;
}

#define STATS_THREADS 256
// A block's partial: n, nan, inf, codes at an end (as unsigned long long),
// then mean, M2, min, max (as double): 8 values of 8 bytes.
#define STATS_PARTIAL 8

// stats_block_end merges the block's threads in a fixed order, in two
// levels of 16 (thread 16k merges threads 16k..16k+15 into its slot, then
// thread 0 merges the slots 0, 16, 32, ...), and writes the block's partial.
// Each level reads only slots of threads at or after its own, which lets
// testdata/host_int.cpp run the threads one after another, the last first.
__device__ void stats_block_end(stats_acc *acc, stats_acc *mine, double *part) {
    stats_close(mine);
    acc[threadIdx.x] = *mine;
    __syncthreads();
    if (threadIdx.x < 16) {
        unsigned int t0 = 16 * threadIdx.x;
        for (unsigned int t = t0 + 1; t < t0 + 16 && t < blockDim.x; t++) stats_merge(&acc[t0], &acc[t]);
    }
    __syncthreads();
    if (threadIdx.x != 0) return;
    stats_acc a = acc[0];
    for (unsigned int t = 16; t < blockDim.x; t += 16) stats_merge(&a, &acc[t]);
    double *p = part + STATS_PARTIAL * blockIdx.x;
    unsigned long long *u = (unsigned long long *)p;
    u[0] = a.n;
    u[1] = a.nan;
    u[2] = a.inf;
    u[3] = a.at_end;
    p[4] = a.k;
    p[5] = a.s1;
    p[6] = (double)a.lo;
    p[7] = (double)a.hi;
}

// stats_int: the statistics of elements [e0, e1) of an integer weight
// (row-major over the logical [rows, cols]).
extern "C" __global__ void stats_int(double *part, unsigned long long *hist, const unsigned int *w, const float *s,
                                     const float *z, const int *gidx, long long layout, long long bits, long long rows,
                                     long long cols, long long groups, long long e0, long long e1) {
    __shared__ stats_acc acc[STATS_THREADS];
    int_src q = {w, s, z, gidx, layout, bits, rows, cols, groups};
    stats_acc a;
    stats_open(&a);
    walk it;
    for (walk_open(&it, e0, e1, cols); it.i < it.e1; walk_next(&it)) {
        unsigned int e;
        float x = int_value(q, it.r, it.c, &e);
        stats_add(&a, x, e, hist);
    }
    stats_block_end(acc, &a, part);
}

// stats_nvfp4: elements [e0, e1) of an NVFP4 weight (16-value blocks, E4M3
// block scales times the global scale, as dequant_nvfp4); the codes at the
// end of the range are the E2M1 magnitudes 6.
extern "C" __global__ void stats_nvfp4(double *part, unsigned long long *hist, const unsigned char *packed,
                                       const unsigned char *scales, float global, long long e0, long long e1) {
    __shared__ stats_acc acc[STATS_THREADS];
    stats_acc a;
    stats_open(&a);
    for (long long i = e0 + blockIdx.x * (long long)blockDim.x + threadIdx.x; i < e1; i += (long long)gridDim.x * blockDim.x) {
        unsigned int nib = (packed[i / 2] >> (4 * (i & 1))) & 15;
        float d = __fmul_rn(e4m3_value(scales[i / 16]), global);
        stats_add(&a, __fmul_rn(e2m1_value(nib), d), (nib & 7) == 7, hist);
    }
    stats_block_end(acc, &a, part);
}

// stats_mxfp4: elements [e0, e1) of an MXFP4 weight (32-value blocks, E8M0
// scales).
extern "C" __global__ void stats_mxfp4(double *part, unsigned long long *hist, const unsigned char *packed,
                                       const unsigned char *scales, long long e0, long long e1) {
    __shared__ stats_acc acc[STATS_THREADS];
    stats_acc a;
    stats_open(&a);
    for (long long i = e0 + blockIdx.x * (long long)blockDim.x + threadIdx.x; i < e1; i += (long long)gridDim.x * blockDim.x) {
        unsigned int nib = (packed[i / 2] >> (4 * (i & 1))) & 15;
        stats_add(&a, __fmul_rn(e2m1_value(nib), e8m0_value(scales[i / 32])), (nib & 7) == 7, hist);
    }
    stats_block_end(acc, &a, part);
}

// stats_fp8: elements [e0, e1) of an FP8 weight with an R×C scale grid of
// scols columns (as dequant_fp8); the codes at the end of the range are
// those of the format's largest finite magnitude (448, 57344).
extern "C" __global__ void stats_fp8(double *part, unsigned long long *hist, const unsigned char *codes,
                                     const float *scales, long long cols, long long R, long long C, long long scols,
                                     long long inverse, long long e5m2, long long e0, long long e1) {
    __shared__ stats_acc acc[STATS_THREADS];
    stats_acc a;
    stats_open(&a);
    walk it;
    for (walk_open(&it, e0, e1, cols); it.i < it.e1; walk_next(&it)) {
        unsigned int c = codes[it.i];
        float v = e5m2 ? e5m2_value(c) : e4m3_value(c);
        unsigned int top = e5m2 ? ((c & 0x7f) == 0x7b) : ((c & 0x7f) == 0x7e);
        // 32-bit divisions: the client keeps rows and columns under 2^31
        float sc = scales[(long long)((unsigned int)it.r / (unsigned int)R) * scols + (unsigned int)it.c / (unsigned int)C];
        stats_add(&a, inverse ? __fdiv_rn(v, sc) : __fmul_rn(v, sc), top, hist);
    }
    stats_block_end(acc, &a, part);
}
