// kernelab-arch: sm_90a
// Step 14, steps 12 and 13 together: the one-round epilogue that borrows the last slot's B
// tile, and the raster groups of 2048 rows of C. The two changes touch different phases (the
// epilogue; which tiles run at once), so if both help their gains should add.
//
// Launch: as step 10 (block 384, 2x1 clusters, 230,400 bytes of dynamic shared memory).
#include "cooperative_store_gemm.cuh"

constexpr int BM = 128, BN = 256, BK = 64, STAGES = 4, CLUSTER_M = 2, STAGING_BOXES = 2;
constexpr int GROUP_C_ROWS = 2048;
using Tile = cooperative_store::Tile;
static_assert(BM == Tile::TILE_M && BN == cluster_gemm::TILE_N && BK == cluster_gemm::TILE_K);

extern "C" __global__ void __cluster_dims__(CLUSTER_M, 1, 1)
    __launch_bounds__(cluster_gemm::THREADS, 1)
        hgemm_borrowed_raster(const __grid_constant__ CUtensorMap map_a,
            const __grid_constant__ CUtensorMap map_b,
            const __grid_constant__ CUtensorMap map_c, int M, int N, int K,
            bf16 *__restrict__ C, int ldc, int exact_cols) {
    cooperative_store::gemm<STAGES, CLUSTER_M, STAGING_BOXES, GROUP_C_ROWS, true>(
        map_a, map_b, map_c, M, N, K, C, ldc, exact_cols);
}
