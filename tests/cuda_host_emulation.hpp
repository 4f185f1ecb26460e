// Run the SGEMM ladder's CUDA kernels on the CPU, for tests on machines without a GPU.
//
// Each CUDA thread of a block is a std::thread; __syncthreads is a std::barrier; __shared__
// arrays become function statics shared by the block's threads (blocks run one after the
// other); cp.async copies synchronously with the same zero-fill rule. What this checks is the
// kernels' logic: index math, edge tiles, the unaligned fallbacks, the pipeline's buffer
// rotation (a stage overwritten while another thread still reads it shows up as a wrong
// answer) and the launch geometry. What it cannot check: timing, real cp.async asynchrony,
// register limits. Included before the kernel source with `g++ -include`.
#pragma once

#include <algorithm>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#define KERNELAB_HOST_EMULATION 1

struct dim3 {
    unsigned x = 1, y = 1, z = 1;
};
struct float4 {  // no alignas: host code reinterprets float arrays freely
    float x, y, z, w;
};
inline float4 make_float4(float a, float b, float c, float d) { return {a, b, c, d}; }

inline thread_local dim3 threadIdx, blockIdx;
inline dim3 blockDim, gridDim;

namespace kernelab_emu {
inline std::barrier<> *block_barrier = nullptr;
constexpr size_t kDynamicSharedBytes = 232448;  // the H200's per-block opt-in maximum
alignas(16) inline unsigned char dynamic_smem[kDynamicSharedBytes];
inline size_t dynamic_smem_bytes = 0;
inline int faults = 0;

inline float *dynamic_shared() { return reinterpret_cast<float *>(dynamic_smem); }

inline void fault(const char *what, const void *p) {
    std::fprintf(stderr, "emulated fault: %s at %p\n", what, p);
    __atomic_add_fetch(&faults, 1, __ATOMIC_RELAXED);
}

inline void check_16b_aligned(const void *p) {
    if (reinterpret_cast<uintptr_t>(p) & 15) fault("misaligned 16-byte access", p);
}

// cp.async with src-size: copy src_bytes, zero the rest of the copy_bytes destination.
inline void copy_zero_fill(void *dst, const void *src, int src_bytes, int copy_bytes) {
    if (copy_bytes == 16) {
        check_16b_aligned(dst);
        check_16b_aligned(src);
    }
    if (src_bytes < 0 || src_bytes > copy_bytes) fault("bad cp.async src-size", src);
    const auto *d = static_cast<unsigned char *>(dst);
    if (d < dynamic_smem || d + copy_bytes > dynamic_smem + dynamic_smem_bytes)
        fault("cp.async outside the launch's dynamic shared memory", dst);
    std::memcpy(dst, src, src_bytes);
    std::memset(static_cast<unsigned char *>(dst) + src_bytes, 0, copy_bytes - src_bytes);
}
}  // namespace kernelab_emu

inline void __syncthreads() { kernelab_emu::block_barrier->arrive_and_wait(); }

#define __global__
#define __device__
#define __forceinline__ inline
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))
#define __launch_bounds__(...)
using std::max;
using std::min;

// Warp-level primitives, for the reduction ladder. The block's threads run freely, so a warp
// is emulated as a group of 32 consecutive threads that meet at a barrier of their own:
// __syncwarp is that barrier, and __shfl_down_sync writes every lane's value to a slot and
// reads lane + delta's after the barrier (a lane past the warp's end keeps its own value,
// as on the GPU). Blocks must be whole warps. Atomics are a mutex around the plain
// operation, and __threadfence is nothing because blocks run one after the other. What this
// cannot check: partial-warp masks (only the full mask is accepted; anything else is a
// fault), the memory ordering __threadfence provides between concurrent blocks (the last-
// block pattern's race shows up only on a GPU), and lockstep execution (a kernel that relies
// on it without __syncwarp may pass here).
namespace kernelab_emu {
constexpr unsigned kWarpSize = 32;
constexpr unsigned kMaxThreads = 1024;
inline std::barrier<> *warp_barriers[kMaxThreads / kWarpSize] = {};
inline float warp_slots[kMaxThreads];
inline std::mutex atomic_mutex;

inline unsigned linear_thread() { return threadIdx.x + blockDim.x * threadIdx.y; }

inline void warp_barrier() {
    std::barrier<> *barrier = warp_barriers[linear_thread() / kWarpSize];
    if (barrier == nullptr) {
        fault("warp primitive without a warp barrier (block not made of whole warps?)", nullptr);
        return;
    }
    barrier->arrive_and_wait();
}
}  // namespace kernelab_emu

inline void __syncwarp(unsigned mask = 0xffffffffu) {
    if (mask != 0xffffffffu) kernelab_emu::fault("__syncwarp with a partial mask", nullptr);
    kernelab_emu::warp_barrier();
}

inline float __shfl_down_sync(unsigned mask, float value, unsigned delta) {
    using namespace kernelab_emu;
    if (mask != 0xffffffffu) fault("__shfl_down_sync with a partial mask", nullptr);
    const unsigned t = linear_thread(), lane = t % kWarpSize;
    warp_barrier();  // every lane has read the slots of the previous shuffle
    warp_slots[t] = value;
    warp_barrier();  // every lane has written its value
    return lane + delta < kWarpSize ? warp_slots[t + delta] : value;
}

inline unsigned atomicAdd(unsigned *address, unsigned value) {
    std::lock_guard<std::mutex> lock(kernelab_emu::atomic_mutex);
    const unsigned old = *address;
    *address = old + value;
    return old;
}

inline float atomicAdd(float *address, float value) {
    std::lock_guard<std::mutex> lock(kernelab_emu::atomic_mutex);
    const float old = *address;
    *address = old + value;
    return old;
}

inline void __threadfence() {}

// ---- Atomics and warp collectives (the histogram ladder) ---------------------------------
//
// atomicAdd on 64-bit counters is a relaxed hardware atomic on the host (exact counts, any
// interleaving); the 32-bit one is the reduction ladder's, above.
// __match_any_sync emulates a lockstep warp: every lane posts its value to the warp's slot
// row, waits at the warp's barrier, reads the row, and waits again before the row is reused.
// The driver must create one barrier per warp (kernelab_emu_warp::warp_barriers) and launch
// blocks whose thread count is a multiple of 32. What this cannot check: a partial mask
// (only the full mask is emulated; any other is a fault), lanes that diverge and call the
// collective from different places, independent thread scheduling, atomic throughput.
namespace kernelab_emu_warp {
inline std::barrier<> **warp_barriers = nullptr;  // one per warp of the running block
inline long long exchange[32][32];                 // [warp][lane]: up to 1024 threads
}  // namespace kernelab_emu_warp

inline unsigned long long atomicAdd(unsigned long long *p, unsigned long long v) {
    return __atomic_fetch_add(p, v, __ATOMIC_RELAXED);
}
inline int __popc(unsigned int x) { return __builtin_popcount(x); }
inline int __ffs(int x) { return __builtin_ffs(x); }

inline unsigned int __match_any_sync(unsigned int mask, long long value) {
    using namespace kernelab_emu_warp;
    if (mask != 0xffffffffu) kernelab_emu::fault("__match_any_sync with a partial mask", nullptr);
    const unsigned linear = threadIdx.x + threadIdx.y * blockDim.x;
    const unsigned warp = linear / 32, lane = linear % 32;
    exchange[warp][lane] = value;
    warp_barriers[warp]->arrive_and_wait();
    unsigned int peers = 0;
    for (unsigned other = 0; other < 32; ++other)
        if (exchange[warp][other] == value) peers |= 1u << other;
    warp_barriers[warp]->arrive_and_wait();
    return peers;
}

// ---- __shfl_up_sync (the scan ladder) ---------------------------------------------------
//
// For any 4-byte or 8-byte trivially copyable type (the scan's float and int): like
// __shfl_down_sync above, every lane posts its value's bytes to its slot between two meetings
// of its warp's barrier (kernelab_emu::warp_barriers), then reads lane - delta's; a lane
// below delta keeps its own value, as on the GPU. Full mask only.
namespace kernelab_emu {
inline long long shuffle_slots[kMaxThreads];
}  // namespace kernelab_emu

template <typename T>
inline T __shfl_up_sync(unsigned mask, T value, unsigned delta) {
    using namespace kernelab_emu;
    static_assert(sizeof(T) <= sizeof(long long), "a shuffle moves at most 8 bytes");
    if (mask != 0xffffffffu) fault("__shfl_up_sync with a partial mask", nullptr);
    const unsigned t = linear_thread(), lane = t % kWarpSize;
    warp_barrier();  // every lane has read the slots of the previous shuffle
    std::memcpy(&shuffle_slots[t], &value, sizeof(T));
    warp_barrier();  // every lane has written its value
    if (lane < delta) return value;
    T result;
    std::memcpy(&result, &shuffle_slots[t - delta], sizeof(T));
    return result;
}

// ---- bf16 and fp16 storage types (the reduction ladder's narrow inputs) -------------------
//
// What cuda_bf16.h and cuda_fp16.h give the kernels, reduced to what a kernel that reads
// narrow inputs and accumulates in fp32 needs: 16-bit storage (sizeof 2, so a 16-byte pack
// holds 8 of them) and the conversions, with CUDA's semantics:
//   __bfloat162float, __half2float  widen exactly: every finite value, +-0, +-inf and the
//                                   subnormals (fp16) come out as the same real number;
//                                   a NaN stays a NaN (its payload is kept here).
//   __float2bfloat16, __float2half  round to nearest, ties to even (cvt.rn); a value past the
//                                   largest finite one rounds to +-inf, as on the device; a
//                                   NaN becomes the canonical NaN 0x7fff, as CUDA's does.
// No implicit conversions and no arithmetic operators: a kernel must convert explicitly (the
// ladder's to_f32), so one that does arithmetic on the 16-bit type fails to compile here.
// tests/ladders/reduce/test_half_types.py checks every 16-bit pattern and the rounding of
// float midpoints against numpy and torch.
struct __nv_bfloat16 {
    unsigned short __x;
};
struct __half {
    unsigned short __x;
};
static_assert(sizeof(__nv_bfloat16) == 2 && sizeof(__half) == 2, "16-bit storage");

namespace kernelab_emu {
inline uint32_t float_bits(float f) {
    uint32_t u;
    std::memcpy(&u, &f, sizeof u);
    return u;
}
inline float bits_float(uint32_t u) {
    float f;
    std::memcpy(&f, &u, sizeof f);
    return f;
}
}  // namespace kernelab_emu

inline float __bfloat162float(__nv_bfloat16 h) {
    return kernelab_emu::bits_float(static_cast<uint32_t>(h.__x) << 16);  // exact, NaN kept
}

inline __nv_bfloat16 __float2bfloat16(float f) {
    uint32_t u = kernelab_emu::float_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return {0x7fff};  // NaN: the canonical one
    u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even on the 16 bits dropped
    return {static_cast<unsigned short>(u >> 16)};  // a carry into the exponent may give inf
}

inline float __half2float(__half h) {
    const uint32_t sign = static_cast<uint32_t>(h.__x & 0x8000u) << 16;
    const uint32_t exponent = (h.__x >> 10) & 0x1fu, mantissa = h.__x & 0x3ffu;
    if (exponent == 0x1f)  // inf, or NaN with its payload (the quiet bit stays the quiet bit)
        return kernelab_emu::bits_float(sign | 0x7f800000u | (mantissa << 13));
    if (exponent != 0)  // normal: rebias 15 -> 127
        return kernelab_emu::bits_float(sign | ((exponent + 112u) << 23) | (mantissa << 13));
    // zero or subnormal: mantissa x 2^-24, exact in fp32
    const float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
    return sign ? -magnitude : magnitude;
}

inline __half __float2half(float f) {
    const uint32_t u = kernelab_emu::float_bits(f);
    const unsigned short sign = static_cast<unsigned short>((u >> 16) & 0x8000u);
    const uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return {0x7fff};  // NaN: the canonical one
    if (a >= 0x477ff000u) return {static_cast<unsigned short>(sign | 0x7c00u)};  // >= 65520: inf
    if (a >= 0x38800000u) {  // a normal half (>= 2^-14): rebias 127 -> 15, round 13 bits away
        uint32_t r = a - (112u << 23);
        r += 0xfffu + ((r >> 13) & 1u);
        return {static_cast<unsigned short>(sign | (r >> 13))};
    }
    // a subnormal half (or zero): |f| in units of 2^-24 (exact: a power-of-two scale), rounded
    // to nearest even by rint under the default rounding mode; 1024 is the smallest normal.
    const float units = std::rint(std::ldexp(kernelab_emu::bits_float(a), 24));
    return {static_cast<unsigned short>(sign | static_cast<unsigned short>(units))};
}
