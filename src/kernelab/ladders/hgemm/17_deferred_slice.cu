// kernelab-arch: sm_90a
// Step 17, a deferred slice: step 16 with the whole epilogue, not half of it, moved into the
// next tile's main loop. A tile's end waits for its last wgmma group, releases the slot and
// packs the 64 x 256 slice to bf16 (64 registers a thread); the next tile stages and stores
// the first round while its second K-tile's wgmma run and the second round with its third,
// so the tensor cores idle only for the drain of the last group and the conversions.
//
// Why: step 16's deferred second round took 4096^3 from 98.9 to 99.8 % of cuBLAS (paired,
// H200); the first round (a barrier, 8 stmatrix, a fence, a barrier, the stores'
// issue) is the rest of the epilogue's serial part.
//
// Launch: as step 10 (block 384, 2x1 clusters, 230,400 bytes of dynamic shared memory).
#include "cooperative_store_gemm.cuh"

constexpr int BM = 128, BN = 256, BK = 64, STAGES = 4, CLUSTER_M = 2, STAGING_BOXES = 2;
constexpr int GROUP_C_ROWS = 2048;
using Tile = cooperative_store::Tile;
static_assert(BM == Tile::TILE_M && BN == cluster_gemm::TILE_N && BK == cluster_gemm::TILE_K);

extern "C" __global__ void __cluster_dims__(CLUSTER_M, 1, 1)
    __launch_bounds__(cluster_gemm::THREADS, 1)
        hgemm_deferred_slice(const __grid_constant__ CUtensorMap map_a,
            const __grid_constant__ CUtensorMap map_b,
            const __grid_constant__ CUtensorMap map_c, int M, int N, int K,
            bf16 *__restrict__ C, int ldc, int exact_cols) {
    cooperative_store::gemm<STAGES, CLUSTER_M, STAGING_BOXES, GROUP_C_ROWS, false, true, 2>(
        map_a, map_b, map_c, M, N, K, C, ldc, exact_cols);
}
