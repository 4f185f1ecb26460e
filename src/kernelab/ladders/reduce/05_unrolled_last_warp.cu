// Step 5: unroll the last warp. Below stride 32 only one warp works, so the block-wide
// barrier is wasted: warp 0 finishes alone with __syncwarp between its levels (the old
// "volatile and no barrier" form is a race since Volta's independent thread scheduling;
// the __syncwarp keeps it correct at almost no cost). Fewer __syncthreads, fewer
// instructions per element.
// Bytes: n x sizeof(in_t) read, one float per 512 elements written.
#include "common.cuh"

template <typename T>
__device__ void unrolled_last_warp(const T *x, index_t n, float *out) {
    __shared__ float s[REDUCE_BLOCK];
    const unsigned tid = threadIdx.x;
    const index_t i = (index_t)blockIdx.x * (2 * REDUCE_BLOCK) + tid;
    float v = i < n ? to_f32(x[i]) : 0.0f;
    if (i + REDUCE_BLOCK < n) v += to_f32(x[i + REDUCE_BLOCK]);
    s[tid] = v;
    __syncthreads();
    for (unsigned stride = REDUCE_BLOCK / 2; stride > WARP; stride >>= 1) {
        if (tid < stride) s[tid] += s[tid + stride];
        __syncthreads();
    }
    if (tid < WARP) {
        volatile float *w = s;
        float sum = w[tid];
        for (unsigned stride = WARP; stride > 0; stride >>= 1) {
            sum += w[tid + stride];  // reads s[tid + stride] before any lane overwrites it
            __syncwarp();
            w[tid] = sum;
            __syncwarp();
        }
        if (tid == 0) out[blockIdx.x] = sum;
    }
}

REDUCE_ENTRIES(reduce_05, unrolled_last_warp)
