// Step 1, the teaching kernel: a tree in shared memory with interleaved addressing.
// Each thread loads one element; at stride s the threads whose index is a multiple of 2s
// add their neighbour s away. `tid % (2 * s) == 0` leaves most lanes of every warp idle
// and divergent: the branch efficiency counter shows it, and the modulo is slow besides.
// Bytes: n x sizeof(in_t) read, one float per block written (ceil(n / 256) of them).
#include "common.cuh"

template <typename T>
__device__ void interleaved(const T *x, index_t n, float *out) {
    __shared__ float s[REDUCE_BLOCK];
    const unsigned tid = threadIdx.x;
    const index_t i = (index_t)blockIdx.x * REDUCE_BLOCK + tid;
    s[tid] = i < n ? to_f32(x[i]) : 0.0f;
    __syncthreads();
    for (unsigned stride = 1; stride < REDUCE_BLOCK; stride *= 2) {
        if (tid % (2 * stride) == 0) s[tid] += s[tid + stride];
        __syncthreads();
    }
    if (tid == 0) out[blockIdx.x] = s[0];
}

REDUCE_ENTRIES(reduce_01, interleaved)
