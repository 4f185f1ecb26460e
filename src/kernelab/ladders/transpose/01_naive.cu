// Step 1, naive: each thread copies in[r, c] straight to out[c, r].
//
// The reads are coalesced (threadIdx.x walks c, consecutive addresses), the writes are not:
// neighbouring threads write addresses rows x itemsize apart, so each warp's store touches
// 32 sectors for 128 useful bytes (fp32) and the write side moves up to 8x the bytes it needs.
// Proof: l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum / ..._op_st requests near 32.
#include "common.cuh"

template <typename T>
__device__ __forceinline__ void transpose_naive(TRANSPOSE_ARGS) {
    const int c = blockIdx.x * TILE + threadIdx.x;
    const int r0 = blockIdx.y * TILE + threadIdx.y;
    if (c >= cols) return;
    for (int j = 0; j < TILE; j += BLOCK_ROWS) {
        const int r = r0 + j;
        if (r < rows)
            out[static_cast<size_t>(c) * rows + r] = in[static_cast<size_t>(r) * cols + c];
    }
}

TRANSPOSE_ENTRIES(transpose_naive)
