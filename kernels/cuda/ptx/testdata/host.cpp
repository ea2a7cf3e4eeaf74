// host.cpp compiles the kernels' sources for the CPU, one thread at a time,
// with each CUDA intrinsic replaced by the IEEE operation it names (x86-64
// SSE single precision, -ffp-contract=off): ptx_test.go runs it against
// kernels/cpu so that the kernels' logic (indexing, codes, signs, the order
// of operations) is checked on a machine without a GPU. It does not check
// the GPU's own arithmetic, which the parity tests on a GPU do.
#include "host_shim.h"

static std::vector<unsigned char> dyn_smem;
#define DYNAMIC_SHARED(type, name) type *name = (type *)dyn_smem.data()
static dim blockIdx, threadIdx, blockDim, gridDim;
static inline void __syncthreads() {}

#include "../dequant.cu"
#include "../nvfp4_quant.cu"
#include "../w4a_fp8.cu"

// launch runs a kernel's threads one after another: blockDim 1, one block
// per item, so shared-memory fills complete before any use.
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
    std::vector<unsigned char> in = readAll();
    std::vector<unsigned char> out;
    if (op == "fp8") { // rows cols R C inv e5m2
        long long rows = arg(2), cols = arg(3), R = arg(4), C = arg(5);
        long long scols = (cols + C - 1) / C;
        out.resize(4 * rows * cols);
        grid(1, 1, [&] { dequant_fp8((float *)out.data(), in.data(), (const float *)(in.data() + rows * cols), 0, rows, cols, R, C, scols, arg(6), arg(7)); });
    } else if (op == "nvfp4" || op == "mxfp4") { // n [global]
        long long n = arg(2);
        out.resize(4 * n);
        if (op == "nvfp4") {
            float g = strtof(argv[3], nullptr);
            grid(1, 1, [&] { dequant_nvfp4((float *)out.data(), in.data(), in.data() + n / 2, n, g); });
        } else
            grid(1, 1, [&] { dequant_mxfp4((float *)out.data(), in.data(), in.data() + n / 2, n); });
    } else if (op == "max" || op == "mse") { // nblocks scale2
        long long nb = arg(2);
        float s2 = strtof(argv[3], nullptr), six2 = __fmul_rn(6.f, s2);
        out.resize(9 * nb);
        unsigned char *packed = out.data(), *scales = out.data() + 8 * nb;
        if (op == "max")
            grid(1, 1, [&] { nvfp4_max((const float *)in.data(), packed, scales, nb, s2, six2); });
        else
            grid(1, 1, [&] { nvfp4_mse((const float *)in.data(), packed, scales, nb, s2, six2); });
    } else if (op == "w4a") { // T K N
        long long T = arg(2), K = arg(3), N = arg(4);
        const unsigned char *a = in.data(), *p = a + T * K;
        const float *as = (const float *)p;
        const unsigned char *wq = p + 4 * T;
        const float *ws = (const float *)(wq + N * K / 2);
        out.resize(4 * T * N);
        dyn_smem.resize(K);
        grid(N, T, [&] { w4a_fp8((float *)out.data(), a, as, wq, ws, T, K, N); });
    } else {
        fprintf(stderr, "unknown op %s\n", op.c_str());
        return 2;
    }
    fwrite(out.data(), 1, out.size(), stdout);
    return 0;
}
