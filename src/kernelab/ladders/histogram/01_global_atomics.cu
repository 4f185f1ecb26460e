// Step 1, global atomics: every value is one atomicAdd on its bin in global memory.
//
// Simple and correct, but every one of the n atomics travels to L2, and atomics on the same
// address serialise there: with uniform values over few bins (MoE with 8 experts) and above
// all in the skewed case (every value in one bin) the L2 atomic unit of that one line is
// the bottleneck, not DRAM.
// Proof: lts__t_sectors_op_red.sum + lts__t_sectors_op_atom.sum = n (one L2 reduction per
// value).
#include "common.cuh"

template <typename T>
__device__ __forceinline__ void histogram_global(HISTOGRAM_ARGS) {
    const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
    for (long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
         i += stride)
        atomicAdd(&counts[bin_of(values[i], bins)], 1ULL);
}

HISTOGRAM_ENTRIES(histogram_global)
