// Step 9: 128-bit loads. Each thread reads 16 bytes per load (4 fp32 or 8 bf16/fp16, one
// LDG.E.128 in the SASS) instead of one element: a quarter to an eighth of the load
// instructions for the same bytes, more bytes in flight per thread, so the memory system
// saturates with fewer warps. A pointer not 16-byte aligned (a tensor view at an odd
// offset) is read element by element up to the first aligned address, and so is the tail.
// Bytes: n x sizeof(in_t) read, one float per block (<= 1024) written.
#include "common.cuh"

// The sum of this thread's share of x[0, n): a scalar head up to 16-byte alignment, the
// aligned body in 16-byte packs with a grid stride, a scalar tail.
template <typename T>
__device__ __forceinline__ float thread_share(const T *x, index_t n) {
    constexpr int kVec = 16 / sizeof(T);
    const index_t thread = (index_t)blockIdx.x * REDUCE_BLOCK + threadIdx.x;
    const index_t threads = (index_t)gridDim.x * REDUCE_BLOCK;
    const unsigned misalignment = (unsigned)(reinterpret_cast<size_t>(x) % 16) / sizeof(T);
    index_t head = misalignment ? kVec - misalignment : 0;
    if (head > n) head = n;
    float v = 0.0f;
    if (thread < head) v += to_f32(x[thread]);
    const T *body = x + head;
    const index_t packs = (n - head) / kVec;
    for (index_t p = thread; p < packs; p += threads) {
        const Pack16<T> pack = load16(body + p * kVec);
        float partial = 0.0f;
#pragma unroll
        for (int k = 0; k < kVec; ++k) partial += to_f32(pack.v[k]);
        v += partial;
    }
    for (index_t i = head + packs * kVec + thread; i < n; i += threads) v += to_f32(x[i]);
    return v;
}

template <typename T>
__device__ void vector_loads(const T *x, index_t n, float *out) {
    const float v = block_sum(thread_share(x, n));
    if (threadIdx.x == 0) out[blockIdx.x] = v;
}

REDUCE_ENTRIES(reduce_09, vector_loads)
