// Step 4, 16-byte loads with several in flight: step 2's shared bins, fed at the memory's pace.
//
// Step 2 loads one value a thread per trip of its loop (LDG.E for an int32 id, LDG.E.U8 for a
// byte) and counts it before the next load issues: 1024 blocks x 256 threads keep about one
// value each in flight, 1 KiB an SM of bytes for uint8 and 4 KiB for int32, far below the
// tens of KiB an SM that HBM's latency needs (Little's law: about 3.3 TB/s x 1 us over 132
// SMs). It measured 62 % of the read ceiling on int32 ids and 17.5 % on bytes: a latency
// bound, not an atomic one (its skewed case, 32 lanes on one bin, ran as fast).
// Here each thread loads whole 16-byte units (4 ids or 16 bytes, LDG.E.128), HISTOGRAM_LOADS
// of them before counting any (for_each_value_by_units in common.cuh): 2 x 16 bytes a thread,
// 64 KiB an SM at 8 resident blocks (32 registers, 16 KiB of shared bins), 32x step 2's bytes
// in flight for uint8 and 8x for int32. The grid is the blocks
// the GPU holds at once (SMs x blocks an SM, steps.geometry), so no block waits for a second
// wave; each block counts into shared bins and flushes them once, as in step 2.
// The counting is step 2's: atomicAdd(&local[bin], 1) compiles to ATOMS.POPC.INC, which adds
// the number of lanes on one address in one operation (the hardware's own warp aggregation,
// which is why step 3's __match_any_sync bought nothing here). SASS (sm_90a): the loop is 2
// LDG.E.128 then 32 ATOMS.POPC.INC (uint8) or 8 (int32); step 2's is 1 LDG then 1 ATOMS.
// Bytes: read n x itemsize, write (bins + 1) x 8, as every step.
// Proof: l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum falls against step 3 (one load
// request per 4 ids or 16 bytes, not per value).
#include "common.cuh"

template <typename T>
__device__ __forceinline__ void histogram_vector(HISTOGRAM_ARGS) {
    __shared__ unsigned int local[MAX_BINS + 1];
    for (int b = threadIdx.x; b <= bins; b += blockDim.x) local[b] = 0;
    __syncthreads();
    for_each_value_by_units(n, values, bins, [&](int bin) { atomicAdd(&local[bin], 1u); });
    __syncthreads();
    for (int b = threadIdx.x; b <= bins; b += blockDim.x)
        if (local[b]) atomicAdd(&counts[b], static_cast<count_t>(local[b]));
}

HISTOGRAM_ENTRIES(histogram_vector)
