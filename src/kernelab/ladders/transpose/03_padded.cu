// Step 3, padded: one extra column per tile row, so a column walk crosses every bank.
//
// With a row of TILE + 1 elements, tile[x][y] for x = 0..31 sits (TILE + 1) x itemsize
// bytes apart: 33 words for fp32 (banks x, all different) and 66 bytes for bf16 (banks
// 16.5 x rounded down: 0, 16, 1, 17, ... all different). Zero conflicts for one column of
// padding, at the cost of 32 x itemsize bytes of shared memory per tile and rows no longer
// 16-byte aligned (no vector loads from the tile).
// Proof: l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum and _op_st.sum drop to 0.
#include "common.cuh"

template <typename T>
__device__ __forceinline__ void transpose_padded(TRANSPOSE_ARGS) {
    __shared__ T tile[TILE][TILE + 1];
    const int in_c = blockIdx.x * TILE + threadIdx.x;
    const int in_r = blockIdx.y * TILE + threadIdx.y;
    for (int j = 0; j < TILE; j += BLOCK_ROWS)
        if (in_c < cols && in_r + j < rows)
            tile[threadIdx.y + j][threadIdx.x] = in[static_cast<size_t>(in_r + j) * cols + in_c];
    __syncthreads();
    const int out_c = blockIdx.y * TILE + threadIdx.x;
    const int out_r = blockIdx.x * TILE + threadIdx.y;
    for (int j = 0; j < TILE; j += BLOCK_ROWS)
        if (out_c < rows && out_r + j < cols)
            out[static_cast<size_t>(out_r + j) * rows + out_c] = tile[threadIdx.x][threadIdx.y + j];
}

TRANSPOSE_ENTRIES(transpose_padded)
