// Step 10: one pass. Step 9's blocks each write their partial sum, then take a ticket from
// a global counter; the block that draws the last ticket knows every partial is written
// (each was published with __threadfence before its ticket) and sums them itself. No
// second launch: one kernel per reduction, which matters most for small n where the
// launch, not the bytes, is the cost. The last block resets the counter for the next call.
// Bytes: n x sizeof(in_t) read, gridDim.x floats written and read back (<= 8 KiB, in L2),
// one float written.
#include "common.cuh"

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

// out[0] = sum(x[0, n)); partials holds gridDim.x floats, counter starts (and ends) at 0.
extern "C" __global__ void __launch_bounds__(REDUCE_BLOCK)
    reduce_10(const in_t *x, index_t n, float *out, float *partials, unsigned *counter) {
    __shared__ bool last_block;
    float v = block_sum(thread_share(x, n));
    if (threadIdx.x == 0) {
        partials[blockIdx.x] = v;
        __threadfence();  // the partial is visible device-wide before the ticket is taken
        last_block = atomicAdd(counter, 1u) == gridDim.x - 1;
    }
    __syncthreads();
    if (!last_block) return;
    __threadfence();  // see every other block's partial
    v = 0.0f;
    for (unsigned b = threadIdx.x; b < gridDim.x; b += REDUCE_BLOCK)
        v += reinterpret_cast<volatile float *>(partials)[b];
    v = block_sum(v);
    if (threadIdx.x == 0) {
        out[0] = v;
        *counter = 0;  // ready for the next launch on this stream
    }
}
