// host_quant2.cpp compiles fp8_quant.cu and nvfp4_recipes.cu for the CPU,
// as host.cpp does for the other kernels: each CUDA intrinsic replaced by
// the IEEE operation it names (x86-64 SSE single precision,
// -ffp-contract=off), the threads run one after another. host_quant2_test.go
// runs it against kernels/cpu: the kernels' logic and float32 order, not
// the GPU's own arithmetic (the parity tests on a GPU check that).
#include <algorithm>

#include "host_shim.h"

static dim blockIdx, threadIdx, blockDim, gridDim;
static inline void __syncthreads() {}

#include "../fp8_quant.cu"
#include "../nvfp4_recipes.cu"

// grid runs gx thread blocks of block threads each: every thread of a block
// before the next block. With block > 1 a kernel that synchronises is only
// right when its phases are separated per thread, so the kernels that use
// __syncthreads run with block 1 (each thread block one thread).
template <class F> static void grid(long long gx, long long block, F f) {
    blockDim = {(unsigned)block, 1, 1};
    gridDim = {(unsigned)gx, 1, 1};
    for (long long x = 0; x < gx; x++)
        for (long long t = 0; t < block; t++) {
            blockIdx = {(unsigned)x, 0, 0};
            threadIdx = {(unsigned)t, 0, 0};
            f();
        }
}

int main(int argc, char **argv) {
    std::string op = argc > 1 ? argv[1] : "";
    auto arg = [&](int i) { return atoll(argv[i]); };
    std::vector<unsigned char> in = readAll();
    std::vector<unsigned char> out;
    if (op == "cast") { // e5m2: floats → codes
        long long n = in.size() / 4;
        out.resize(n);
        grid(3, 5, [&] { fp8q_cast_all((const float *)in.data(), out.data(), n, arg(2)); });
    } else if (op == "fp8") { // rows cols R C inverse e5m2 per: weight → codes, scales
        // as the worker does: pieces of per rows (a multiple of R) through
        // all three kernels, or (per = 0) amax over the whole weight, then
        // the scales, then the codes in pieces of 7 rows
        long long rows = arg(2), cols = arg(3), R = arg(4), C = arg(5), inv = arg(6), e5 = arg(7), per = arg(8);
        long long scols = (cols + C - 1) / C, srows = (rows + R - 1) / R;
        float fmax = e5 ? 57344.f : 448.f;
        const float *w = (const float *)in.data();
        out.resize(rows * cols + 4 * srows * scols);
        unsigned char *codes = out.data();
        float *scales = (float *)(out.data() + rows * cols);
        std::vector<unsigned> amax(rows * scols);
        if (per > 0) {
            for (long long lo = 0; lo < rows; lo += per) {
                long long n = std::min(per, rows - lo);
                grid(5, 1, [&] { fp8q_amax(w + lo * cols, amax.data(), n, cols, C, scols); });
                grid(2, 3, [&] { fp8q_scales(amax.data(), scales + lo / R * scols, n, R, scols, fmax, inv); });
                grid(3, 4, [&] { fp8q_encode(w + lo * cols, scales + lo / R * scols, codes + lo * cols, lo, n, cols, R, C, scols, lo / R, fmax, inv, e5); });
            }
        } else {
            grid(5, 1, [&] { fp8q_amax(w, amax.data(), rows, cols, C, scols); });
            grid(2, 3, [&] { fp8q_scales(amax.data(), scales, rows, R, scols, fmax, inv); });
            for (long long lo = 0; lo < rows; lo += 7) {
                long long n = std::min(7LL, rows - lo);
                grid(3, 4, [&] { fp8q_encode(w + lo * cols, scales, codes + lo * cols, lo, n, cols, R, C, scols, 0, fmax, inv, e5); });
            }
        }
    } else if (op == "gptq") { // nblocks g refine: weight → packed, scales
        long long nb = arg(2);
        float g = strtof(argv[3], nullptr);
        out.resize(9 * nb);
        grid(3, 7, [&] { nvfp4_gptq((const float *)in.data(), out.data(), out.data() + 8 * nb, nb, g, arg(4)); });
    } else if (op == "hess") { // tokens cols piece: activations → H, summed over pieces of piece tokens
        long long T = arg(2), cols = arg(3), piece = arg(4);
        std::vector<float> acc(cols * 16, 0.f), next(cols * 16);
        for (long long lo = 0; lo < T; lo += piece) {
            long long n = std::min(piece, T - lo);
            grid(3, 5, [&] { nvfp4_hess_acc((const float *)in.data() + lo * cols, acc.data(), next.data(), n, cols, lo + n == T ? T : 0); });
            acc = next;
        }
        out.resize(4 * acc.size());
        memcpy(out.data(), acc.data(), out.size());
    } else if (op == "hessian") { // rows cols scale2: weight, H → packed, scales
        long long rows = arg(2), cols = arg(3);
        float s2 = strtof(argv[4], nullptr);
        const float *w = (const float *)in.data(), *H = w + rows * cols;
        long long nb = rows * cols / 16;
        out.resize(9 * nb);
        grid(4, 1, [&] { nvfp4_hessian(w, H, out.data(), out.data() + 8 * nb, rows, cols, s2); });
    } else {
        fprintf(stderr, "unknown op %s\n", op.c_str());
        return 2;
    }
    fwrite(out.data(), 1, out.size(), stdout);
    return 0;
}
