// Step 2, coalesced through shared memory: read a tile row by row, write it row by row.
//
// A block loads its 32 x 32 tile with coalesced reads, waits, then writes the transposed
// tile with coalesced writes, reading the tile down a column. Global traffic is now minimal
// (rows x cols x itemsize each way), but tile[x][y] down a column hits addresses 32 words
// apart: one bank, a 32-way conflict on every shared load for fp32 (bf16 rows are 16 words,
// so a column takes two banks: 16-way).
// Proof: l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum jumps from 0 (step 1 has no
// shared memory) while the global store sectors per request fall to 4.
#include "common.cuh"

template <typename T>
__device__ __forceinline__ void transpose_shared(TRANSPOSE_ARGS) {
    __shared__ T tile[TILE][TILE];
    const int in_c = blockIdx.x * TILE + threadIdx.x;
    const int in_r = blockIdx.y * TILE + threadIdx.y;
    for (int j = 0; j < TILE; j += BLOCK_ROWS)
        if (in_c < cols && in_r + j < rows)
            tile[threadIdx.y + j][threadIdx.x] = in[static_cast<size_t>(in_r + j) * cols + in_c];
    __syncthreads();
    // The block's output tile: out rows are input columns, out columns input rows.
    const int out_c = blockIdx.y * TILE + threadIdx.x;
    const int out_r = blockIdx.x * TILE + threadIdx.y;
    for (int j = 0; j < TILE; j += BLOCK_ROWS)
        if (out_c < rows && out_r + j < cols)
            out[static_cast<size_t>(out_r + j) * rows + out_c] = tile[threadIdx.x][threadIdx.y + j];
}

TRANSPOSE_ENTRIES(transpose_shared)
