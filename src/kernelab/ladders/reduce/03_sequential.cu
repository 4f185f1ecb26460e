// Step 3: sequential addressing. The stride starts at half the block and halves; thread t
// adds s[t + stride] into s[t]. A warp reads 32 consecutive words: no bank conflicts, and
// the active threads stay contiguous. Half the threads still idle from the first level on.
// Bytes: n x sizeof(in_t) read, one float per block written.
#include "common.cuh"

template <typename T>
__device__ void sequential(const T *x, index_t n, float *out) {
    __shared__ float s[REDUCE_BLOCK];
    const unsigned tid = threadIdx.x;
    const index_t i = (index_t)blockIdx.x * REDUCE_BLOCK + tid;
    s[tid] = i < n ? to_f32(x[i]) : 0.0f;
    __syncthreads();
    for (unsigned stride = REDUCE_BLOCK / 2; stride > 0; stride >>= 1) {
        if (tid < stride) s[tid] += s[tid + stride];
        __syncthreads();
    }
    if (tid == 0) out[blockIdx.x] = s[0];
}

REDUCE_ENTRIES(reduce_03, sequential)
