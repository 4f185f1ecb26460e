// kernelab-arch: sm_90a
// Step 15, a lean K-tile loop: step 12 whole, with less consumer work around each K-tile's 4
// HGMMAs. Steps 08-14 rebuild both 64-bit descriptors of every k16 from a generic address
// (shared-window conversion, mask, shift, or, and two uniform-register moves each) and find
// the slot and phase with signed % and /: in step 12's SASS the consumer's loop is 111
// instructions per warp per K-tile. Here slot 0's descriptors are built once, a K-tile's are
// slot 0's plus a multiple of the tile size (each k16 two adds more), and the slot
// arithmetic is unsigned (a mask and a shift). Under ncu at 4096^3, step 12 issued 88 % more
// instructions than cuBLAS, with the ALU pipe at 13.8 % against 2.8 %, and kept the tensor
// pipe 1.2 % less busy. This step tests whether those issue slots are where the 1.3 % went.
//
// Launch: as step 10 (block 384, 2x1 clusters, 230,400 bytes of dynamic shared memory).
#include "cooperative_store_gemm.cuh"

constexpr int BM = 128, BN = 256, BK = 64, STAGES = 4, CLUSTER_M = 2, STAGING_BOXES = 2;
constexpr int GROUP_C_ROWS = 2048;
using Tile = cooperative_store::Tile;
static_assert(BM == Tile::TILE_M && BN == cluster_gemm::TILE_N && BK == cluster_gemm::TILE_K);

extern "C" __global__ void __cluster_dims__(CLUSTER_M, 1, 1)
    __launch_bounds__(cluster_gemm::THREADS, 1)
        hgemm_lean_loop(const __grid_constant__ CUtensorMap map_a,
            const __grid_constant__ CUtensorMap map_b,
            const __grid_constant__ CUtensorMap map_c, int M, int N, int K,
            bf16 *__restrict__ C, int ldc, int exact_cols) {
    cooperative_store::gemm<STAGES, CLUSTER_M, STAGING_BOXES, GROUP_C_ROWS, false, true>(
        map_a, map_b, map_c, M, N, K, C, ldc, exact_cols);
}
