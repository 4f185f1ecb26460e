// kernelab-arch: sm_90a
// Step 12, a squarer raster: step 10 whole, with its tile order's groups spanning 2048 rows of
// C instead of 1024 (8 cluster rows of 256 rows instead of 4). At 8192^3 the 66 clusters that
// run at once then cover about 8 cluster rows x 8 columns of 256 instead of 4 x 16: per wave
// of tiles the A rows and B columns they read span 2048 x K + K x 2112 elements instead of
// 1024 x K + K x 4224, 65 MiB instead of 82 MiB at 8192^3 (40 -> 33 MiB at 4096^3; 2048^3 is
// one wave either way). That is what the L2 must fetch from HBM per wave; on a card that runs
// at its 700 W power cap at 8192^3 (measured: the clocks fell to 1,400-1,560 MHz), fewer HBM
// bytes per FLOP may buy clock as well as L2 hit rate.
//
// Launch: as step 10 (block 384, 2x1 clusters, 230,400 bytes of dynamic shared memory).
#include "cooperative_store_gemm.cuh"

constexpr int BM = 128, BN = 256, BK = 64, STAGES = 4, CLUSTER_M = 2, STAGING_BOXES = 2;
constexpr int GROUP_C_ROWS = 2048;
using Tile = cooperative_store::Tile;
static_assert(BM == Tile::TILE_M && BN == cluster_gemm::TILE_N && BK == cluster_gemm::TILE_K);

extern "C" __global__ void __cluster_dims__(CLUSTER_M, 1, 1)
    __launch_bounds__(cluster_gemm::THREADS, 1)
        hgemm_raster_2048(const __grid_constant__ CUtensorMap map_a,
            const __grid_constant__ CUtensorMap map_b,
            const __grid_constant__ CUtensorMap map_c, int M, int N, int K,
            bf16 *__restrict__ C, int ldc, int exact_cols) {
    cooperative_store::gemm<STAGES, CLUSTER_M, STAGING_BOXES, GROUP_C_ROWS, false>(
        map_a, map_b, map_c, M, N, K, C, ldc, exact_cols);
}
