// kernelab-arch: sm_90a
// Step 18, no zero fill: step 17 whose tiles start with a wgmma that overwrites the
// accumulators (scale-d 0) instead of 128 moves per thread that zero them. Between a tile's
// last HGMMA and the next tile's first, a consumer of 17 waits for the last group, releases
// the slot, packs 64 bf16 pairs and zeroes 128 registers: two consumer warps share each SM
// sub-partition, so the zeroing alone is ~256 issue cycles per tile in which the tensor
// cores wait, of a 4096^3 tile's ~66,000 cycles.
//
// Launch: as step 10 (block 384, 2x1 clusters, 230,400 bytes of dynamic shared memory).
#include "cooperative_store_gemm.cuh"

constexpr int BM = 128, BN = 256, BK = 64, STAGES = 4, CLUSTER_M = 2, STAGING_BOXES = 2;
constexpr int GROUP_C_ROWS = 2048;
using Tile = cooperative_store::Tile;
static_assert(BM == Tile::TILE_M && BN == cluster_gemm::TILE_N && BK == cluster_gemm::TILE_K);

extern "C" __global__ void __cluster_dims__(CLUSTER_M, 1, 1)
    __launch_bounds__(cluster_gemm::THREADS, 1)
        hgemm_overwrite_first(const __grid_constant__ CUtensorMap map_a,
            const __grid_constant__ CUtensorMap map_b,
            const __grid_constant__ CUtensorMap map_c, int M, int N, int K,
            bf16 *__restrict__ C, int ldc, int exact_cols) {
    cooperative_store::gemm<STAGES, CLUSTER_M, STAGING_BOXES, GROUP_C_ROWS, false, true, 2, true>(
        map_a, map_b, map_c, M, N, K, C, ldc, exact_cols);
}
