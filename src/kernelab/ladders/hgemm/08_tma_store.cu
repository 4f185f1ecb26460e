// kernelab-arch: sm_90a
// Step 08, a TMA-store epilogue: step 07's clusters and main loop, but each consumer hands its
// 64 x 256 tile to the copy engine instead of storing it itself. In steps 05-07 the
// epilogue is 64 bf16-pair stores per thread (each warp store touches 8 rows x 16 bytes) and
// the warpgroup waits for none of them, yet the next tile's first wgmma waits behind the
// store instructions' issue and the register pressure of the address math. Here
// (tma_store_epilogue.cuh):
// - stmatrix writes the accumulators, packed to bf16, into a 32 KiB staging buffer per
//   consumer: 16 stmatrix.x4 per thread, in the 128-byte swizzle (bank-conflict free, and
//   the layout TMA reads back), as four 64-row x 64-column boxes;
// - after a proxy fence and a warpgroup barrier, one thread issues four TMA stores
//   (cp.async.bulk.tensor, full 128-byte lines, rows clipped by the hardware) and commits
//   them as a bulk group; the warpgroup goes straight on to the next tile's main loop;
// - before the staging buffer is written again (one tile later, ~36 us at 4096^3) that
//   thread waits until the previous group has finished READING it (wait_group.read 0);
// - a tile reaching past N when N is not a multiple of 8 is stored from registers (TMA
//   would write up to the next 16 bytes: see the epilogue header).
// Cost: 64 KiB of staging, so the ring drops from 4 to 3 stages of 48 KiB (144 KiB in
// flight per SM). Measured (H200): +4 % over 07 at 4096^3 cold; step 10 gets the 4th stage
// back with a 16 KiB staging buffer per consumer.
//
// Launch: block 384, grid as step 07 (clusters of 2), dynamic shared memory
// 3 x 49,152 + 2 x 32,768 + 1,024 = 214,016 bytes. The output needs 16-byte aligned rows
// (TMA): the launcher stages C through a padded buffer when it does not have them.
#include "cooperative_store_gemm.cuh"

constexpr int BM = 128, BN = 256, BK = 64, STAGES = 3, CLUSTER_M = 2, STAGING_BOXES = 4;
using Tile = cooperative_store::Tile;
static_assert(BM == Tile::TILE_M && BN == cluster_gemm::TILE_N && BK == cluster_gemm::TILE_K);

extern "C" __global__ void __cluster_dims__(CLUSTER_M, 1, 1)
    __launch_bounds__(cluster_gemm::THREADS, 1)
        hgemm_tma_store(const __grid_constant__ CUtensorMap map_a,
            const __grid_constant__ CUtensorMap map_b,
            const __grid_constant__ CUtensorMap map_c, int M, int N, int K,
            bf16 *__restrict__ C, int ldc, int exact_cols) {
    cooperative_store::gemm<STAGES, CLUSTER_M, STAGING_BOXES, cluster_gemm::GROUP_C_ROWS, false>(
        map_a, map_b, map_c, M, N, K, C, ldc, exact_cols);
}
