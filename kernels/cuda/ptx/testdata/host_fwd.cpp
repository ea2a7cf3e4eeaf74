// host_fwd.cpp compiles the forward-pass kernels' sources (w4a_nvfp4.cu,
// llama.cu, calib.cu) for the CPU, as host.cpp does for the others: each
// CUDA intrinsic replaced by the IEEE operation it names (x86-64 SSE,
// -ffp-contract=off), one thread a block run one after another, so that
// host_fwd_test.go can compare the kernels' logic with kernels/cpu and
// model/ on a machine without a GPU. The GPU's own arithmetic (its exp,
// cos, its reduction order with many threads) is the parity tests' to check.
#include "host_shim.h"

static std::vector<unsigned char> dyn_smem;
#define DYNAMIC_SHARED(type, name) type *name = (type *)dyn_smem.data()
static dim blockIdx, threadIdx, blockDim, gridDim;
static inline double __dadd_rn(double a, double b) { volatile double r = a + b; return r; }
static inline double __dmul_rn(double a, double b) { volatile double r = a * b; return r; }
static inline double __ddiv_rn(double a, double b) { volatile double r = a / b; return r; }
static inline double __dsqrt_rn(double a) { volatile double r = std::sqrt(a); return r; }
static inline float __double2float_rn(double d) { volatile float r = (float)d; return r; }
static inline void __syncthreads() {}
static inline unsigned atomicAdd(unsigned *p, unsigned v) { unsigned o = *p; *p += v; return o; }
static inline unsigned long long atomicAdd(unsigned long long *p, unsigned long long v) { auto o = *p; *p += v; return o; }
static inline unsigned atomicMax(unsigned *p, unsigned v) { unsigned o = *p; if (v > o) *p = v; return o; }

static inline long long min(long long a, long long b) { return a < b ? a : b; }

#include "../w4a_nvfp4.cu"
#include "../llama.cu"
#include "../calib.cu"

// grid runs a kernel's blocks one after another, one thread each (blockDim
// 1): a block's loops over its threads' shares then run in index order.
template <class F> static void grid(long long gx, long long gy, F f) {
    blockDim = {1, 1, 1};
    gridDim = {(unsigned)gx, (unsigned)gy, 1};
    threadIdx = {0, 0, 0};
    for (long long y = 0; y < gy; y++)
        for (long long x = 0; x < gx; x++) {
            blockIdx = {(unsigned)x, (unsigned)y, 0};
            f();
        }
}

int main(int argc, char **argv) {
    std::string op = argc > 1 ? argv[1] : "";
    auto arg = [&](int i) { return atoll(argv[i]); };
    auto argf = [&](int i) { return strtof(argv[i], nullptr); };
    std::vector<unsigned char> in = readAll();
    std::vector<unsigned char> out;
    const unsigned char *p = in.data();
    if (op == "w4a_nvfp4") { // T K N global
        long long T = arg(2), K = arg(3), N = arg(4);
        float g = argf(5);
        const unsigned char *a = p, *as = a + T * K / 2, *wq = as + T * K / 16;
        const float *ws = (const float *)(wq + N * K / 2);
        out.resize(4 * T * N);
        dyn_smem.resize(K / 2 + K / 16);
        grid(N, T, [&] { w4a_nvfp4((float *)out.data(), a, as, wq, ws, T, K, N, g); });
    } else if (op == "rms_norm") { // rows cols eps
        long long rows = arg(2), cols = arg(3);
        out.resize(4 * rows * cols);
        grid(1, 1, [&] { rms_norm((float *)out.data(), (const float *)p, (const float *)p + rows * cols, rows, cols, argf(4)); });
    } else if (op == "rope") { // T heads d
        long long T = arg(2), heads = arg(3), d = arg(4);
        out.resize(4 * T * heads * d);
        grid(1, 1, [&] { rope((float *)out.data(), (const float *)p, (const float *)p + T * heads * d, T, heads, d); });
    } else if (op == "attention") { // T heads kvheads d scale
        long long T = arg(2), heads = arg(3), kv = arg(4), d = arg(5);
        const float *q = (const float *)p, *k = q + T * heads * d, *v = k + T * kv * d;
        out.resize(4 * T * heads * d);
        dyn_smem.resize(4 * T);
        grid(T, heads, [&] { attention((float *)out.data(), q, k, v, T, heads, kv, d, argf(6)); });
    } else if (op == "swiglu") { // n
        long long n = arg(2);
        out.resize(4 * n);
        grid(1, 1, [&] { swiglu((float *)out.data(), (const float *)p, (const float *)p + n, n); });
    } else if (op == "channel_stats") { // rows cols
        long long rows = arg(2), cols = arg(3);
        out.resize(12 * cols);
        grid(1, 1, [&] { channel_stats((float *)out.data(), (double *)(out.data() + 4 * cols), (const float *)p, rows, cols); });
    } else if (op == "block_hessians") { // rows cols
        long long rows = arg(2), cols = arg(3);
        out.resize(4 * 16 * cols);
        grid(1, 1, [&] { block_hessians((float *)out.data(), (const float *)p, rows, cols); });
    } else if (op == "abs_hist") { // n max bins
        long long n = arg(2), bins = arg(4);
        out.resize(8 * bins);
        dyn_smem.resize(4 * bins);
        grid(1, 1, [&] { hist_zero((unsigned long long *)out.data(), bins); });
        grid(3, 1, [&] { abs_hist((unsigned long long *)out.data(), (const float *)p, n, argf(3), bins); });
    } else {
        fprintf(stderr, "unknown op %s\n", op.c_str());
        return 2;
    }
    fwrite(out.data(), 1, out.size(), stdout);
    return 0;
}
