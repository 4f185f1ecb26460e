// Step 3, padded: each tile row one bank word (4 bytes) longer, so a column walk crosses
// every bank.
//
// Shared memory has 32 banks of 4-byte words. Reading down a column, the 32 threads of a
// warp read tile[x][y] for x = 0..31, one row apart. Rows of exactly 32 elements start in the
// same bank (fp32) or in one of two (bf16), so the walk conflicts 32- (fp32) or 16-way (bf16).
// A row of 32 elements plus one word is 33 words for fp32 and 17 words for bf16 (34
// elements), and 33 and 17 are odd: x times an odd count of words, mod 32, is a different
// bank for each x. One bf16 element of padding (66 bytes, 16.5 words) is not enough: for odd
// y, rows 0 and 31 land in one bank (a 2-way conflict on every other load). The padding costs
// 4 bytes per tile row of shared memory, and rows are no longer 16-byte aligned (no vector
// loads from the tile).
// Proof: l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum falls to ncu's background
// of extra wavefronts (engine.ZERO_ALLOWANCE_PER_LOAD per shared load).
#include "common.cuh"

template <typename T>
__device__ __forceinline__ void transpose_padded(TRANSPOSE_ARGS) {
    constexpr int pad = 4 / sizeof(T);  // one bank word: 1 fp32 or 2 bf16 elements
    __shared__ T tile[TILE][TILE + pad];
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
