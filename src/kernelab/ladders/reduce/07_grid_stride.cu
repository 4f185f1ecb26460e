// Step 7: many elements per thread. A fixed grid (enough blocks to fill every SM, at most
// 1024) walks the array with a grid stride; each thread sums its share in a register and
// only then enters the tree, so the tree's cost is paid once per thread, not once per two
// elements, and the second pass reads at most 1024 partials. Loads of consecutive threads
// stay coalesced. DRAM throughput is the counter that should now approach its peak.
// Bytes: n x sizeof(in_t) read, one float per block (<= 1024) written.
#include "common.cuh"

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
__device__ void grid_stride(const T *x, index_t n, float *out) {
    __shared__ float s[REDUCE_BLOCK];
    const unsigned tid = threadIdx.x;
    const index_t stride = (index_t)gridDim.x * REDUCE_BLOCK;
    float v = 0.0f;
    for (index_t i = (index_t)blockIdx.x * REDUCE_BLOCK + tid; i < n; i += stride)
        v += to_f32(x[i]);
    s[tid] = v;
    __syncthreads();
    const float sum = unrolled_tree<REDUCE_BLOCK>(s, tid);
    if (tid == 0) out[blockIdx.x] = sum;
}

REDUCE_ENTRIES(reduce_07, grid_stride)
