// host_tc.cpp runs the tensor-core kernels (w4a_fp8_tc.cu, w4a_nvfp4_tc.cu) on the CPU: each
// block's threads as real threads (std::barrier for __syncthreads), and
// mma.sync emulated for each warp from the fragment layout of PTX ISA
// §9.7.13.4.8 (m16n8k16, .row.col, bf16 → f32): the lanes deposit their
// fragments, the warp's A and B are assembled, each lane takes its four
// outputs. Products are exact and each k-step's sum is exact in double,
// then added to the FP32 accumulator with one rounding: the documented
// layout and the kernel's indexing are what this checks, not the tensor
// core's own rounding.
#include <barrier>
#include <thread>

#include "host_shim.h"

#define __align__(n) __attribute__((aligned(n)))
static thread_local dim threadIdx;
static dim blockIdx, blockDim, gridDim;
static std::barrier<> *block_bar;
static inline void __syncthreads() { block_bar->arrive_and_wait(); }

// warp emulation of mma.sync.m16n8k16.row.col.f32.bf16.bf16.f32
struct warpState {
    unsigned a[32][4], b[32][2];
    std::barrier<> *bar;
};
static warpState warps[32];
static float bf16f(unsigned short h) { return __int_as_float((unsigned)h << 16); }
#define MMA_M16N8K16_BF16
static void mma_m16n8k16_bf16(float *d, const unsigned *a, const unsigned *b) {
    int lane = threadIdx.x % 32;
    warpState &w = warps[threadIdx.x / 32];
    memcpy(w.a[lane], a, 16);
    memcpy(w.b[lane], b, 8);
    w.bar->arrive_and_wait();
    float A[16][16], B[16][8];
    for (int L = 0; L < 32; L++) {
        int g = L >> 2, t = L & 3;
        for (int h = 0; h < 2; h++) { // the lower-indexed element in the low half
            A[g][2 * t + h] = bf16f(w.a[L][0] >> (16 * h));
            A[g + 8][2 * t + h] = bf16f(w.a[L][1] >> (16 * h));
            A[g][2 * t + 8 + h] = bf16f(w.a[L][2] >> (16 * h));
            A[g + 8][2 * t + 8 + h] = bf16f(w.a[L][3] >> (16 * h));
            B[2 * t + h][g] = bf16f(w.b[L][0] >> (16 * h));
            B[2 * t + 8 + h][g] = bf16f(w.b[L][1] >> (16 * h));
        }
    }
    int g = lane >> 2, t = lane & 3;
    for (int r = 0; r < 4; r++) {
        int row = g + 8 * (r / 2), col = 2 * t + r % 2;
        double s = 0;
        for (int k = 0; k < 16; k++) s += (double)A[row][k] * (double)B[k][col];
        volatile float v = (float)((double)d[r] + s);
        d[r] = v;
    }
    w.bar->arrive_and_wait(); // every lane has read the fragments
}

#include "../w4a_fp8_tc.cu"
#include "../w4a_nvfp4_tc.cu"

int main(int argc, char **argv) {
    std::string op = argc > 1 ? argv[1] : "";
    if (op != "w4a_tc" && op != "w4a_nvfp4_tc") {
        fprintf(stderr, "unknown op %s\n", op.c_str());
        return 2;
    }
    long long T = atoll(argv[2]), K = atoll(argv[3]), N = atoll(argv[4]);
    bool nv = op == "w4a_nvfp4_tc";
    float global = nv ? strtof(argv[5], nullptr) : 0.f;
    std::vector<unsigned char> in = readAll(), out(4 * T * N);
    // fp8: codes [T,K], f32 token scales; nvfp4: codes [T,K/2], e4m3 scales [T,K/16]
    const unsigned char *a = in.data(), *p = nv ? a + T * K / 2 : a + T * K;
    const float *as = (const float *)p;
    const unsigned char *as8 = p;
    const unsigned char *wq = nv ? p + T * K / 16 : p + 4 * T;
    const float *ws = (const float *)(wq + N * K / 2);
    const int threads = 128;
    blockDim = {threads, 1, 1};
    gridDim = {(unsigned)((N + (nv ? 31 : 63)) / (nv ? 32 : 64)), (unsigned)((T + 63) / 64), 1};
    std::barrier<> bar(threads);
    block_bar = &bar;
    std::vector<std::barrier<> *> wb;
    for (int w = 0; w < threads / 32; w++) warps[w].bar = new std::barrier<>(32);
    for (unsigned by = 0; by < gridDim.y; by++)
        for (unsigned bx = 0; bx < gridDim.x; bx++) {
            blockIdx = {bx, by, 0};
            std::vector<std::thread> ts;
            for (int i = 0; i < threads; i++)
                ts.emplace_back([&, i] {
                    threadIdx = {(unsigned)i, 0, 0};
                    if (nv)
                        w4a_nvfp4_tc((float *)out.data(), a, as8, wq, ws, T, K, N, global);
                    else
                        w4a_fp8_tc((float *)out.data(), a, as, wq, ws, T, K, N);
                });
            for (auto &t : ts) t.join();
        }
    fwrite(out.data(), 1, out.size(), stdout);
    return 0;
}
