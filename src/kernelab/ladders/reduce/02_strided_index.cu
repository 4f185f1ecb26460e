// Step 2: the same tree, but thread t works on index 2 * s * t, so the active threads are
// contiguous and whole warps retire together (no divergence inside a warp until the last
// five levels). The cost moves to shared memory: threads of a warp now touch words
// 2 * s apart, the same bank for many of them (a 2s-way conflict at stride s); the
// bank-conflict counter shows it.
// Bytes: n x sizeof(in_t) read, one float per block written.
#include "common.cuh"

template <typename T>
__device__ void strided_index(const T *x, index_t n, float *out) {
    __shared__ float s[REDUCE_BLOCK];
    const unsigned tid = threadIdx.x;
    const index_t i = (index_t)blockIdx.x * REDUCE_BLOCK + tid;
    s[tid] = i < n ? to_f32(x[i]) : 0.0f;
    __syncthreads();
    for (unsigned stride = 1; stride < REDUCE_BLOCK; stride *= 2) {
        const unsigned index = 2 * stride * tid;
        if (index < REDUCE_BLOCK) s[index] += s[index + stride];
        __syncthreads();
    }
    if (tid == 0) out[blockIdx.x] = s[0];
}

REDUCE_ENTRIES(reduce_02, strided_index)
