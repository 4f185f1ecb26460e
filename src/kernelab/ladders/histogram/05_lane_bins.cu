// Step 5, a copy of the bins per lane: shared atomics that never share a bank within a warp.
//
// A warp's shared atomic is served one bank at a time: in step 4, 32 lanes adding to 32
// random bins of 256 land several to a bank (bin b lives in bank b mod 32), and the atomic
// replays once per extra lane on the busiest bank. Lanes on the very same bin cost nothing
// extra (ATOMS.POPC.INC adds their count at once), so the cost is different bins, same bank:
// uniform data over many bins, the common case.
// Here, for bins <= LANE_BINS (256, every byte value), the block keeps 32 copies of its bins,
// one per lane index, interleaved so that lane l's copy of bin b is word b x 32 + l: always
// bank l. A warp's 32 atomics then touch 32 banks, one wavefront whatever the values (the 8
// warps of the block share lane l's copy, so it stays an atomic). The copies cost
// (bins + 1) x 32 x 4 bytes (32.9 KiB at 256 bins: 6 blocks an SM); the flush sums a bin's 32
// copies (thread b starts at copy b mod 32, so a warp's reads hit 32 banks) and adds the sum
// to the global count once, as before. More bins than LANE_BINS count as step 4 does, into
// one copy in the same shared array.
// Loads are step 4's (for_each_value_by_units: 16-byte units, HISTOGRAM_LOADS in flight).
// Bytes: read n x itemsize, write (bins + 1) x 8, as every step.
// Proof: l1tex__data_pipe_lsu_wavefronts_mem_shared_op_atom.sum falls against step 4 to about
// one wavefront per warp-wide atomic (uniform ids over 256 bins).
#include "common.cuh"

#define LANE_BINS 256
#define LANE_WORDS ((LANE_BINS + 1) * 32)  // >= MAX_BINS + 1: the one-copy layout fits too

template <typename T>
__device__ __forceinline__ void histogram_lane_bins(HISTOGRAM_ARGS) {
    __shared__ unsigned int local[LANE_WORDS];
    if (bins <= LANE_BINS) {
        const int lane = threadIdx.x & 31;
        for (int w = threadIdx.x; w < (bins + 1) * 32; w += blockDim.x) local[w] = 0;
        __syncthreads();
        for_each_value_by_units(n, values, bins,
                                [&](int bin) { atomicAdd(&local[bin * 32 + lane], 1u); });
        __syncthreads();
        for (int b = threadIdx.x; b <= bins; b += blockDim.x) {
            count_t sum = 0;
#pragma unroll
            for (int l = 0; l < 32; ++l) sum += local[b * 32 + ((l + b) & 31)];
            if (sum) atomicAdd(&counts[b], sum);
        }
    } else {
        for (int b = threadIdx.x; b <= bins; b += blockDim.x) local[b] = 0;
        __syncthreads();
        for_each_value_by_units(n, values, bins, [&](int bin) { atomicAdd(&local[bin], 1u); });
        __syncthreads();
        for (int b = threadIdx.x; b <= bins; b += blockDim.x)
            if (local[b]) atomicAdd(&counts[b], static_cast<count_t>(local[b]));
    }
}

HISTOGRAM_ENTRIES(histogram_lane_bins)
