// Step 6: the whole tree unrolled at compile time. The block size is a template parameter,
// so every `if (kBlock >= ...)` is decided by the compiler: no loop counter, no compare,
// no branch per level, only the adds and the barriers that are really needed.
// Bytes: n x sizeof(in_t) read, one float per 512 elements written.
#include "common.cuh"

// The tree over s[0, kBlock), valid in thread 0; every thread of the block calls it.
template <unsigned kBlock>
__device__ __forceinline__ float unrolled_tree(float *s, unsigned tid) {
    if (kBlock >= 1024) { if (tid < 512) s[tid] += s[tid + 512]; __syncthreads(); }
    if (kBlock >= 512) { if (tid < 256) s[tid] += s[tid + 256]; __syncthreads(); }
    if (kBlock >= 256) { if (tid < 128) s[tid] += s[tid + 128]; __syncthreads(); }
    if (kBlock >= 128) { if (tid < 64) s[tid] += s[tid + 64]; __syncthreads(); }
    float sum = 0.0f;
    if (tid < WARP) {
        volatile float *w = s;
        sum = w[tid];
#pragma unroll
        for (unsigned stride = WARP; stride > 0; stride >>= 1) {
            sum += w[tid + stride];
            __syncwarp();
            w[tid] = sum;
            __syncwarp();
        }
    }
    return sum;
}

template <typename T>
__device__ void fully_unrolled(const T *x, index_t n, float *out) {
    __shared__ float s[REDUCE_BLOCK];
    const unsigned tid = threadIdx.x;
    const index_t i = (index_t)blockIdx.x * (2 * REDUCE_BLOCK) + tid;
    float v = i < n ? to_f32(x[i]) : 0.0f;
    if (i + REDUCE_BLOCK < n) v += to_f32(x[i + REDUCE_BLOCK]);
    s[tid] = v;
    __syncthreads();
    const float sum = unrolled_tree<REDUCE_BLOCK>(s, tid);
    if (tid == 0) out[blockIdx.x] = sum;
}

REDUCE_ENTRIES(reduce_06, fully_unrolled)
