// What every step of the sum-reduction ladder shares: the input type, the fp32 accumulator,
// 64-bit indexing and the two entry points each step exports.
//
// Byte accounting, the same for every step: the first pass reads n x sizeof(in_t) bytes once
// and writes one float per block; the later passes (steps 1-9) read those partials again, a
// few KiB at most after step 7. Step 10 writes one value and nothing else reaches DRAM.
#pragma once

// Under host emulation (tests/cuda_host_emulation.hpp) the bf16 and fp16 types and their
// conversions come from the emulation header, with CUDA's rounding and NaN/inf semantics, so
// every dtype's kernels also run on the CPU.
#ifndef KERNELAB_HOST_EMULATION
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#endif

// The input dtype is a compile-time choice (-DREDUCE_DTYPE=0 fp32, 1 bf16, 2 fp16): one
// cubin per dtype, each with fp32 accumulation.
#ifndef REDUCE_DTYPE
#define REDUCE_DTYPE 0
#endif
#if REDUCE_DTYPE == 0
typedef float in_t;
#elif REDUCE_DTYPE == 1
typedef __nv_bfloat16 in_t;
#elif REDUCE_DTYPE == 2
typedef __half in_t;
#else
#error "REDUCE_DTYPE must be 0 (fp32), 1 (bf16) or 2 (fp16)"
#endif

// Threads per block, fixed for the whole ladder so the steps differ by technique only.
#ifndef REDUCE_BLOCK
#define REDUCE_BLOCK 256
#endif
#define WARP 32

typedef long long index_t;  // n may pass 2^31: every element index is 64-bit

__device__ __forceinline__ float to_f32(float v) { return v; }
__device__ __forceinline__ float to_f32(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float to_f32(__half v) { return __half2float(v); }

// 16 bytes of T: one 128-bit load (LDG.E.128) when the address is 16-byte aligned.
template <typename T>
struct __align__(16) Pack16 {
    T v[16 / sizeof(T)];
};

template <typename T>
__device__ __forceinline__ Pack16<T> load16(const T *p) {
#ifdef KERNELAB_HOST_EMULATION
    kernelab_emu::check_16b_aligned(p);
#endif
    return *reinterpret_cast<const Pack16<T> *>(p);
}

// A warp's sum by shuffles: five steps, no shared memory, no barrier.
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int offset = WARP / 2; offset > 0; offset >>= 1)
        v += __shfl_down_sync(0xffffffffu, v, offset);
    return v;
}

// The block's sum by shuffles: each warp sums its lanes, warp 0 sums the warps' sums.
// Valid in thread 0; every thread of the block must call it.
__device__ __forceinline__ float block_sum(float v) {
    __shared__ float warp_sums[REDUCE_BLOCK / WARP];
    const unsigned lane = threadIdx.x % WARP, warp = threadIdx.x / WARP;
    v = warp_sum(v);
    if (lane == 0) warp_sums[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < REDUCE_BLOCK / WARP ? warp_sums[lane] : 0.0f;
        v = warp_sum(v);
    }
    return v;
}

// Each step writes `template <typename T> __device__ void step(const T*, index_t, float*)`
// (out[blockIdx.x] = the block's sum) and exports two kernels: NAME reads the input dtype,
// NAME_partials reads the fp32 partial sums of the pass before.
#define REDUCE_ENTRIES(NAME, BODY)                                                            \
    extern "C" __global__ void __launch_bounds__(REDUCE_BLOCK)                                \
        NAME(const in_t *x, index_t n, float *out) {                                          \
        BODY<in_t>(x, n, out);                                                                \
    }                                                                                         \
    extern "C" __global__ void __launch_bounds__(REDUCE_BLOCK)                                \
        NAME##_partials(const float *x, index_t n, float *out) {                              \
        BODY<float>(x, n, out);                                                               \
    }
