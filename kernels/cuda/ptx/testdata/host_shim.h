// host_shim.h is what every host driver of the kernels (host*.cpp) shares:
// the CUDA keywords made plain C++, the thread-index type, each CUDA
// intrinsic the kernels use replaced by the IEEE single-precision operation
// it names (volatile, so that each is one rounding and nothing is contracted
// or kept wider; the drivers are built with -ffp-contract=off), and the
// reading of stdin. A driver declares its own thread indices,
// __syncthreads, atomics and launch loop, as it runs threads its own way.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#define __global__
#define __device__
#define __forceinline__ inline
#define __constant__
#define __shared__ static
struct dim { unsigned x, y, z; };

static inline float __int_as_float(unsigned v) { float f; memcpy(&f, &v, 4); return f; }
static inline float __int_as_float(int v) { return __int_as_float((unsigned)v); }
static inline float __uint_as_float(unsigned v) { return __int_as_float(v); }
static inline unsigned __float_as_uint(float f) { unsigned v; memcpy(&v, &f, 4); return v; }
static inline float __fdiv_rn(float a, float b) { volatile float r = a / b; return r; }
static inline float __fmul_rn(float a, float b) { volatile float r = a * b; return r; }
static inline float __fadd_rn(float a, float b) { volatile float r = a + b; return r; }
static inline float __fsub_rn(float a, float b) { volatile float r = a - b; return r; }
static inline float __int2float_rn(int s) { volatile float r = (float)s; return r; }
static inline int __float2int_rn(float x) { return (int)nearbyintf(x); }
static inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }

// readAll reads stdin to its end: the kernel's inputs, laid out by the test.
static std::vector<unsigned char> readAll() {
    std::vector<unsigned char> b;
    unsigned char buf[1 << 16];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, stdin)) > 0) b.insert(b.end(), buf, buf + n);
    return b;
}
