// What every scan step shares: the element types, the wrapping integer add, 64-bit indexing,
// and the tile scan of steps 3 and 4 (a block of 256 threads, 8 elements each).
//
// out[i] = x[0] + ... + x[i] (inclusive) or x[0] + ... + x[i - 1], out[0] = 0 (exclusive),
// chosen at run time by `exclusive`. fp32 adds in fp32 (as torch.cumsum does); int32 adds
// modulo 2^32 (two's complement wraparound, done in unsigned arithmetic so it is defined
// C++), which is the int64 prefix sum cast to int32.
// Bytes: the floor is read n x 4 + write n x 4; each step says what it moves beyond that.
#pragma once

#ifdef KERNELAB_HOST_EMULATION
#include <cstring>
#endif

#define SCAN_THREADS 256
#define SCAN_WARPS (SCAN_THREADS / 32)
#define SCAN_ITEMS 8
#define SCAN_TILE (SCAN_THREADS * SCAN_ITEMS)  // 2048 elements a tile in steps 3 and 4
#define FULL_MASK 0xffffffffu

typedef long long index_t;  // n may pass 2^31: every element index is 64-bit

template <typename T>
__device__ __forceinline__ T scan_add(T a, T b) {
    return a + b;
}
template <>
__device__ __forceinline__ int scan_add<int>(int a, int b) {
    return static_cast<int>(static_cast<unsigned>(a) + static_cast<unsigned>(b));
}

// A tile of SCAN_TILE elements staged in shared memory with one pad word per 32, so thread t
// reading its 8 consecutive elements (words 8t..8t+7) hits 32 different banks across a warp.
#define PADDED(i) ((i) + ((i) >> 5))
#define SCAN_SMEM_WORDS PADDED(SCAN_TILE)

// Load x[base, base + SCAN_TILE) coalesced (consecutive threads, consecutive addresses) into
// shared memory, then give each thread its 8 consecutive elements (the "blocked"
// arrangement a serial per-thread scan needs). Elements past n read as 0.
template <typename T>
__device__ __forceinline__ void load_tile(const T *x, index_t n, index_t base, T *smem,
                                          T (&items)[SCAN_ITEMS]) {
    __syncthreads();  // the previous user of smem (a loop's last tile) is done with it
#pragma unroll
    for (int k = 0; k < SCAN_ITEMS; ++k) {
        const int i = k * SCAN_THREADS + threadIdx.x;
        smem[PADDED(i)] = base + i < n ? x[base + i] : T(0);
    }
    __syncthreads();
#pragma unroll
    for (int k = 0; k < SCAN_ITEMS; ++k) items[k] = smem[PADDED(threadIdx.x * SCAN_ITEMS + k)];
}

// The exclusive prefix of this thread's total within the block, and the block's total (in
// every thread): a warp scan by shuffles (5 steps), the 8 warp totals through shared memory.
template <typename T>
__device__ __forceinline__ T block_exclusive(T thread_total, T *block_total) {
    __shared__ T warp_totals[SCAN_WARPS];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    T inclusive = thread_total;
#pragma unroll
    for (int offset = 1; offset < 32; offset <<= 1) {
        const T up = __shfl_up_sync(FULL_MASK, inclusive, offset);
        if (lane >= offset) inclusive = scan_add(up, inclusive);
    }
    T exclusive = __shfl_up_sync(FULL_MASK, inclusive, 1);
    if (lane == 0) exclusive = T(0);
    if (lane == 31) warp_totals[warp] = inclusive;
    __syncthreads();
    T warp_prefix = T(0), total = T(0);
#pragma unroll
    for (int w = 0; w < SCAN_WARPS; ++w) {
        if (w == warp) warp_prefix = total;
        total = scan_add(total, warp_totals[w]);
    }
    __syncthreads();  // every thread has read warp_totals before a next call rewrites them
    *block_total = total;
    return scan_add(warp_prefix, exclusive);
}

// Finish a tile: each thread scans its 8 elements serially from `running` (everything before
// them: the tile's prefix, the warps before, the lanes before), then the tile goes back out
// through shared memory, coalesced. Only elements below n are written.
template <typename T>
__device__ __forceinline__ void store_tile(T *out, index_t n, index_t base, T *smem,
                                           const T (&items)[SCAN_ITEMS], T running,
                                           int exclusive) {
#pragma unroll
    for (int k = 0; k < SCAN_ITEMS; ++k) {
        const T next = scan_add(running, items[k]);
        smem[PADDED(threadIdx.x * SCAN_ITEMS + k)] = exclusive ? running : next;
        running = next;
    }
    __syncthreads();
#pragma unroll
    for (int k = 0; k < SCAN_ITEMS; ++k) {
        const int i = k * SCAN_THREADS + threadIdx.x;
        if (base + i < n) out[base + i] = smem[PADDED(i)];
    }
}

template <typename T>
__device__ __forceinline__ T thread_sum(const T (&items)[SCAN_ITEMS]) {
    T sum = items[0];
#pragma unroll
    for (int k = 1; k < SCAN_ITEMS; ++k) sum = scan_add(sum, items[k]);
    return sum;
}

// Steps 1 and 2 scan tiles independently and then add each tile's offset: out[i] += the
// exclusive prefix of the tile sums, offsets[i / tile], for every tile but the first.
// Bytes: read and write n x 4 again (the price of scan-then-propagate).
// A grid-stride loop, so the grid stays within CUDA's limit at any n.
template <typename T, int TILE>
__device__ __forceinline__ void add_offsets(index_t n, T *out, const T *offsets) {
    const index_t stride = static_cast<index_t>(gridDim.x) * blockDim.x;
    for (index_t i = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x + TILE; i < n;
         i += stride)
        out[i] = scan_add(offsets[i / TILE], out[i]);
}

// One extern "C" entry per element type, so the launcher finds each kernel by a plain name.
#define SCAN_ENTRIES(name, PARAMS, ARGS)                                                      \
    extern "C" __global__ void __launch_bounds__(SCAN_THREADS) name##_f32 PARAMS(float) {      \
        name<float> ARGS;                                                                      \
    }                                                                                          \
    extern "C" __global__ void __launch_bounds__(SCAN_THREADS) name##_i32 PARAMS(int) {        \
        name<int> ARGS;                                                                        \
    }

// The single-pass steps' (4 and 5) tile descriptors: one 64-bit word a tile, its status in
// the high half and its value's 32 bits in the low half, so one store publishes both and one
// load reads a consistent pair. The caller zeroes them (STATUS_EMPTY) before each launch.
#define STATUS_EMPTY 0ull
#define STATUS_AGGREGATE 1ull
#define STATUS_PREFIX 2ull

typedef unsigned long long descriptor_t;

template <typename T>
__device__ __forceinline__ descriptor_t pack(descriptor_t status, T value) {
    unsigned bits;
    memcpy(&bits, &value, sizeof(bits));
    return (status << 32) | bits;
}

template <typename T>
__device__ __forceinline__ T unpack(descriptor_t word) {
    const unsigned bits = static_cast<unsigned>(word);
    T value;
    memcpy(&value, &bits, sizeof(value));
    return value;
}
