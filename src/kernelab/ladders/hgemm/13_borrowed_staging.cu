// kernelab-arch: sm_90a
// Step 13, a one-round epilogue in 10's shared memory: each consumer stages its whole
// 64 x 256 slice at once, two boxes in its own 16 KiB buffer and two in the B tile of the
// ring slot the tile's last K-tile used (consumer c takes B boxes 2c and 2c + 1). That slot
// is not released before the epilogue as in 10: both consumers meet on a named barrier once
// their last wgmma group is done (either may still be reading all of the slot's B), write
// their 16 stmatrix.x4, issue four TMA stores, and the thread that issued them releases the
// slot to every CTA of the cluster once the stores have read it
// (cluster_pipeline.cuh, BorrowLastSlot).
// Why: step 10's second round of stores waits until the first round has been read out of
// its 16 KiB buffer, then a barrier, then 8 more stmatrix: a serial step per tile in which
// neither consumer issues a wgmma. Cost: the slot's refill with the next tile's 4th K-tile
// starts one epilogue later (the other three slots are already full).
//
// Launch: as step 10 (block 384, 2x1 clusters, 230,400 bytes of dynamic shared memory).
#include "cooperative_store_gemm.cuh"

constexpr int BM = 128, BN = 256, BK = 64, STAGES = 4, CLUSTER_M = 2, STAGING_BOXES = 2;
constexpr int GROUP_C_ROWS = 1024;
using Tile = cooperative_store::Tile;
static_assert(BM == Tile::TILE_M && BN == cluster_gemm::TILE_N && BK == cluster_gemm::TILE_K);

extern "C" __global__ void __cluster_dims__(CLUSTER_M, 1, 1)
    __launch_bounds__(cluster_gemm::THREADS, 1)
        hgemm_borrowed_staging(const __grid_constant__ CUtensorMap map_a,
            const __grid_constant__ CUtensorMap map_b,
            const __grid_constant__ CUtensorMap map_c, int M, int N, int K,
            bf16 *__restrict__ C, int ldc, int exact_cols) {
    cooperative_store::gemm<STAGES, CLUSTER_M, STAGING_BOXES, GROUP_C_ROWS, true>(
        map_a, map_b, map_c, M, N, K, C, ldc, exact_cols);
}
