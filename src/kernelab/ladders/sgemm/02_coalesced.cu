// Step 2, global-memory coalescing: the same arithmetic as step 1, threads remapped so that
// consecutive threads of a warp own consecutive columns of C.
//
// Now a warp reads one element of A (a broadcast), 32 consecutive floats of B (128 bytes:
// 4 sectors, not 32) and writes 128 contiguous bytes of C. Proof: sectors per request of
// global loads (l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum / ..._requests...) drops
// from ~32 toward ~4-5.
// Launch: block 1024 (as 32 x 32), grid (ceil(N/32), ceil(M/32)).
#include "common.cuh"

constexpr int TILE = 32;

extern "C" __global__ void sgemm_coalesced(SGEMM_ARGS) {
    const int row = blockIdx.y * TILE + threadIdx.x / TILE;
    const int col = blockIdx.x * TILE + threadIdx.x % TILE;
    if (row >= M || col >= N) return;
    const float *a = A + static_cast<size_t>(row) * lda;
    float acc = 0.0f;
    for (int k = 0; k < K; ++k) acc += a[k] * B[static_cast<size_t>(k) * ldb + col];
    float *c = C + static_cast<size_t>(row) * ldc + col;
    *c = epilogue(acc, alpha, beta, c);
}
