// Step 4: the first add during the load. Each block covers 2 x 256 elements and each thread
// adds its two before the tree, so no thread idles at the first level and half as many
// blocks run the tree. Achieved occupancy and DRAM throughput rise.
// Bytes: n x sizeof(in_t) read, one float per 512 elements written.
#include "common.cuh"

template <typename T>
__device__ void first_add_during_load(const T *x, index_t n, float *out) {
    __shared__ float s[REDUCE_BLOCK];
    const unsigned tid = threadIdx.x;
    const index_t i = (index_t)blockIdx.x * (2 * REDUCE_BLOCK) + tid;
    float v = i < n ? to_f32(x[i]) : 0.0f;
    if (i + REDUCE_BLOCK < n) v += to_f32(x[i + REDUCE_BLOCK]);
    s[tid] = v;
    __syncthreads();
    for (unsigned stride = REDUCE_BLOCK / 2; stride > 0; stride >>= 1) {
        if (tid < stride) s[tid] += s[tid + stride];
        __syncthreads();
    }
    if (tid == 0) out[blockIdx.x] = s[0];
}

REDUCE_ENTRIES(reduce_04, first_add_during_load)
