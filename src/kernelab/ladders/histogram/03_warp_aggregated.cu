// Step 3, warp-aggregated atomics: lanes that hold the same bin add once, together.
//
// __match_any_sync gives each lane the mask of lanes holding the same bin; the lowest of them
// adds the mask's popcount. A warp then issues one shared atomic per distinct bin instead
// of one per lane: 1 instead of 32 in the skewed case; with uniform values over 8 bins
// at most 8, over 256 bins nearly 32 (little to gain, and the match costs a few cycles).
// The loop runs per warp (the bound is the warp's first index), so all 32 lanes reach
// __match_any_sync together; lanes past n hold bin -1 and add nothing.
// Proof: the shared-atomic wavefronts fall by up to 32x in the skewed case
// (l1tex__data_pipe_lsu_wavefronts_mem_shared_op_atom.sum); lts__t_sectors_op_red.sum stays as
// in step 2.
#include "common.cuh"

template <typename T>
__device__ __forceinline__ void histogram_warp_aggregated(HISTOGRAM_ARGS) {
    __shared__ unsigned int local[MAX_BINS + 1];
    for (int b = threadIdx.x; b <= bins; b += blockDim.x) local[b] = 0;
    __syncthreads();
    const int lane = threadIdx.x & 31;
    const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
    for (long long base = static_cast<long long>(blockIdx.x) * blockDim.x + (threadIdx.x & ~31);
         base < n; base += stride) {
        const long long i = base + lane;
        const int bin = i < n ? bin_of(values[i], bins) : -1;
        const unsigned int peers = __match_any_sync(0xffffffffu, bin);
        if (bin >= 0 && lane == __ffs(peers) - 1) atomicAdd(&local[bin], __popc(peers));
    }
    __syncthreads();
    for (int b = threadIdx.x; b <= bins; b += blockDim.x)
        if (local[b]) atomicAdd(&counts[b], static_cast<count_t>(local[b]));
}

HISTOGRAM_ENTRIES(histogram_warp_aggregated)
