// Step 8: warp shuffles. Each warp sums its 32 lanes' registers with __shfl_down_sync (five
// register-to-register steps, no shared memory, no barrier); one float per warp goes to
// shared memory and warp 0 sums those. Shared-memory traffic drops from a 256-float tree
// to 8 floats per block, and the block needs one __syncthreads instead of four.
// Bytes: n x sizeof(in_t) read, one float per block (<= 1024) written.
#include "common.cuh"

template <typename T>
__device__ void warp_shuffle(const T *x, index_t n, float *out) {
    const index_t stride = (index_t)gridDim.x * REDUCE_BLOCK;
    float v = 0.0f;
    for (index_t i = (index_t)blockIdx.x * REDUCE_BLOCK + threadIdx.x; i < n; i += stride)
        v += to_f32(x[i]);
    v = block_sum(v);  // common.cuh: warp_sum in every warp, then in warp 0
    if (threadIdx.x == 0) out[blockIdx.x] = v;
}

REDUCE_ENTRIES(reduce_08, warp_shuffle)
