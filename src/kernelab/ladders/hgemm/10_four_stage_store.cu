// kernelab-arch: sm_90a
// Step 10, the 4th stage back: step 08 (2x1 clusters, B multicast, TMA-store epilogue) with a
// staging buffer of two 64 x 64 boxes (16 KiB) per consumer instead of four, which frees
// the shared memory for a fourth 48 KiB stage. Each consumer stores its 64 x 256 slice in
// two rounds of two boxes; the second round waits until the first round's stores have read
// the buffer (16 KiB through the copy engine, well under a microsecond).
// Why: 08 gained 4 % over 07 from the epilogue but runs on a 3-stage ring (144 KiB in
// flight per SM) against 07's 4 (192 KiB); cuBLAS's large-tile Hopper kernels keep 4 stages
// of 128 x 256 x 64 with a small epilogue buffer. At ~0.7 us per K-tile and ~1-2 us for an
// L2 miss to HBM, three stages in flight leave little slack after an epilogue, where the
// producer must refill the whole ring.
//
// Launch: block 384, grid as step 07 (clusters of 2), dynamic shared memory
// 4 x 49,152 + 2 x 16,384 + 1,024 = 230,400 bytes (the opt-in limit is 232,448).
#include "cooperative_store_gemm.cuh"

constexpr int BM = 128, BN = 256, BK = 64, STAGES = 4, CLUSTER_M = 2, STAGING_BOXES = 2;
using Tile = cooperative_store::Tile;
static_assert(BM == Tile::TILE_M && BN == cluster_gemm::TILE_N && BK == cluster_gemm::TILE_K);

extern "C" __global__ void __cluster_dims__(CLUSTER_M, 1, 1)
    __launch_bounds__(cluster_gemm::THREADS, 1)
        hgemm_four_stage_store(const __grid_constant__ CUtensorMap map_a,
            const __grid_constant__ CUtensorMap map_b,
            const __grid_constant__ CUtensorMap map_c, int M, int N, int K,
            bf16 *__restrict__ C, int ldc, int exact_cols) {
    cooperative_store::gemm<STAGES, CLUSTER_M, STAGING_BOXES, cluster_gemm::GROUP_C_ROWS, false>(
        map_a, map_b, map_c, M, N, K, C, ldc, exact_cols);
}
