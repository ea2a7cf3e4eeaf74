// Calibration reductions (calib/): per-column max |x| and Σ|x| of an
// activation [rows, cols] (act_max's amax is their max; awq_lite's x̄ the
// sums over rows), local_hessian's 16×16 block second moments, and the
// percentile pass's histogram of |x|. Each column's and each Hessian entry's
// sum runs over rows in row order in one thread, in kernels/cpu's and
// calib/'s float order, and the histogram counts are integers: the results
// equal the CPU's bit for bit.
#include "fp8.cuh"

// channel_stats: one thread a column: amax[c] = max_r |x[r,c]| (NaN when a
// value is NaN, as Go's max), sum[c] = Σ_r |x[r,c]| in float64, row order.
extern "C" __global__ void channel_stats(float *amax, double *sum, const float *x, long long rows, long long cols) {
    for (long long c = blockIdx.x * (long long)blockDim.x + threadIdx.x; c < cols; c += (long long)gridDim.x * blockDim.x) {
        float m = 0.f;
        double s = 0.0;
        for (long long r = 0; r < rows; r++) {
            float a = fabsf(x[r * cols + c]);
            m = (a != a || m != m) ? a + m : fmaxf(m, a);
            s = __dadd_rn(s, (double)a);
        }
        amax[c] = m;
        sum[c] = s;
    }
}

// block_hessians: h[n][i][j] = f32(Σ_r x[r,16n+i]·x[r,16n+j]) / rows, the
// float32 sum in row order (ModelOpt's _LocalHessianAccumulator as
// kernels/cpu computes it). One thread an entry.
extern "C" __global__ void block_hessians(float *h, const float *x, long long rows, long long cols) {
    long long n = cols * 16;
    for (long long k = blockIdx.x * (long long)blockDim.x + threadIdx.x; k < n; k += (long long)gridDim.x * blockDim.x) {
        long long b = k / 256, i = (k / 16) % 16, j = k % 16;
        const float *xi = x + 16 * b + i, *xj = x + 16 * b + j;
        float s = 0.f;
        for (long long r = 0; r < rows; r++) s = __fadd_rn(s, __fmul_rn(xi[r * cols], xj[r * cols]));
        h[k] = __fdiv_rn(s, (float)rows);
    }
}

// hist_zero clears n counts.
extern "C" __global__ void hist_zero(unsigned long long *c, long long n) {
    for (long long k = blockIdx.x * (long long)blockDim.x + threadIdx.x; k < n; k += (long long)gridDim.x * blockDim.x) c[k] = 0;
}

// abs_hist: counts[b] += #{x : min(floor(f64(|x|) / f64(max) · bins), bins−1) = b}
// (calib/'s percentile histogram); values above max, inf and NaN count in
// the last bin. A block counts in shared memory, then adds to counts.
extern "C" __global__ void abs_hist(unsigned long long *counts, const float *x, long long n, float mx, long long bins) {
    DYNAMIC_SHARED(unsigned int, local);
    for (long long b = threadIdx.x; b < bins; b += blockDim.x) local[b] = 0;
    __syncthreads();
    double dm = (double)mx, db = (double)bins;
    for (long long k = blockIdx.x * (long long)blockDim.x + threadIdx.x; k < n; k += (long long)gridDim.x * blockDim.x) {
        float a = fabsf(x[k]);
        long long b = bins - 1;
        if (a <= mx) b = min((long long)__dmul_rn(__ddiv_rn((double)a, dm), db), bins - 1);
        atomicAdd(&local[b], 1u);
    }
    __syncthreads();
    for (long long b = threadIdx.x; b < bins; b += blockDim.x)
        if (local[b]) atomicAdd(&counts[b], (unsigned long long)local[b]);
}
