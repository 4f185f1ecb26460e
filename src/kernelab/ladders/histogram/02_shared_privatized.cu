// Step 2, shared-memory privatized bins: each block counts into its own copy of the bins.
//
// The n atomics now hit shared memory (a few cycles, in the SM) and only bins + 1 atomics
// per block reach L2 when the block flushes its non-zero bins. Same-address shared atomics
// still serialise within a warp: the skewed case (32 lanes, one bin) is 32 steps per warp.
// Proof: lts__t_sectors_op_red.sum falls from n to at most blocks x (bins + 1); the
// serialised shared atomics show as wavefronts in
// l1tex__data_pipe_lsu_wavefronts_mem_shared_op_atom.sum.
#include "common.cuh"

template <typename T>
__device__ __forceinline__ void histogram_privatized(HISTOGRAM_ARGS) {
    __shared__ unsigned int local[MAX_BINS + 1];
    for (int b = threadIdx.x; b <= bins; b += blockDim.x) local[b] = 0;
    __syncthreads();
    const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
    for (long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
         i += stride)
        atomicAdd(&local[bin_of(values[i], bins)], 1u);
    __syncthreads();
    for (int b = threadIdx.x; b <= bins; b += blockDim.x)
        if (local[b]) atomicAdd(&counts[b], static_cast<count_t>(local[b]));
}

HISTOGRAM_ENTRIES(histogram_privatized)
