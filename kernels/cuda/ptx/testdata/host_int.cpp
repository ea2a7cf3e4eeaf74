// host_int.cpp compiles dequant_int.cu for the CPU, as host.cpp does the
// other kernels (each CUDA intrinsic replaced by the IEEE operation it
// names, -ffp-contract=off), for dequant_int_test.go. The statistics
// kernels run with their real block size: the threads of a block one after
// another, thread 0 last (it merges the block's threads after
// __syncthreads, which here means after every other thread has finished).
#include "host_shim.h"

#define HOST_SHIM
static dim blockIdx, threadIdx, blockDim, gridDim;
static inline void __syncthreads() {}
static inline void atomicAdd(unsigned long long *p, unsigned long long v) { *p += v; }

#include "../dequant_int.cu"

// launch runs gx blocks of bx threads, each block's threads from the last
// to the first.
template <class F> static void launch(unsigned gx, unsigned bx, F f) {
    blockDim = {bx, 1, 1};
    gridDim = {gx, 1, 1};
    for (unsigned b = 0; b < gx; b++)
        for (unsigned t = bx; t-- > 0;) {
            blockIdx = {b, 0, 0};
            threadIdx = {t, 0, 0};
            f();
        }
}

int main(int argc, char **argv) {
    std::string op = argc > 1 ? argv[1] : "";
    auto arg = [&](int i) { return atoll(argv[i]); };
    std::vector<unsigned char> in = readAll();
    std::vector<unsigned char> out;
    // int ops: layout bits rows cols groups words [e0 e1 blocks]; stdin:
    // words (4 bytes each), scales and zeros (groups*rows floats each), gidx (cols ints)
    if (op == "dequant_int" || op == "stats_int") {
        long long layout = arg(2), bits = arg(3), rows = arg(4), cols = arg(5), groups = arg(6), words = arg(7);
        const unsigned *w = (const unsigned *)in.data();
        const float *s = (const float *)(in.data() + 4 * words);
        const float *z = s + groups * rows;
        const int *gidx = (const int *)(z + groups * rows);
        if (op == "dequant_int") {
            // two launches over two halves of the rows, as the worker's steps
            long long half = rows / 2;
            out.resize(4 * rows * cols);
            launch(3, 7, [&] { dequant_int((float *)out.data(), w, s, z, gidx, layout, bits, rows, cols, groups, 0, half); });
            launch(3, 7, [&] { dequant_int((float *)out.data() + half * cols, w, s, z, gidx, layout, bits, rows, cols, groups, half, rows - half); });
        } else {
            long long e0 = arg(8), e1 = arg(9), blocks = arg(10);
            out.resize(8 * STATS_PARTIAL * blocks + 8 * 65536);
            unsigned long long *hist = (unsigned long long *)(out.data() + 8 * STATS_PARTIAL * blocks);
            launch(blocks, STATS_THREADS, [&] { stats_int((double *)out.data(), hist, w, s, z, gidx, layout, bits, rows, cols, groups, e0, e1); });
        }
    } else if (op == "stats_nvfp4" || op == "stats_mxfp4") { // n global e0 e1 blocks; stdin: packed, scales
        long long n = arg(2), e0 = arg(4), e1 = arg(5), blocks = arg(6);
        float g = strtof(argv[3], nullptr);
        out.resize(8 * STATS_PARTIAL * blocks + 8 * 65536);
        unsigned long long *hist = (unsigned long long *)(out.data() + 8 * STATS_PARTIAL * blocks);
        if (op == "stats_nvfp4")
            launch(blocks, STATS_THREADS, [&] { stats_nvfp4((double *)out.data(), hist, in.data(), in.data() + n / 2, g, e0, e1); });
        else
            launch(blocks, STATS_THREADS, [&] { stats_mxfp4((double *)out.data(), hist, in.data(), in.data() + n / 2, e0, e1); });
    } else if (op == "stats_fp8") { // rows cols R C inv e5m2 e0 e1 blocks; stdin: codes, scales
        long long rows = arg(2), cols = arg(3), R = arg(4), C = arg(5), e0 = arg(8), e1 = arg(9), blocks = arg(10);
        long long scols = (cols + C - 1) / C;
        out.resize(8 * STATS_PARTIAL * blocks + 8 * 65536);
        unsigned long long *hist = (unsigned long long *)(out.data() + 8 * STATS_PARTIAL * blocks);
        launch(blocks, STATS_THREADS, [&] { stats_fp8((double *)out.data(), hist, in.data(), (const float *)(in.data() + rows * cols), cols, R, C, scols, arg(6), arg(7), e0, e1); });
    } else {
        fprintf(stderr, "unknown op %s\n", op.c_str());
        return 2;
    }
    fwrite(out.data(), 1, out.size(), stdout);
    return 0;
}
