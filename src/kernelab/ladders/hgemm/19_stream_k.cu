// kernelab-arch: sm_90a
// Step 19, stream-K over the last partial wave: step 18 whose clusters run whole tiles while
// each has one, then share the leftover tiles' K-tiles evenly (stream_k_split.cuh), adding the
// partial sums of a shared tile through global memory (stream_k.cuh). At 4096^3 that is 3
// whole tiles and 56.2 K-tiles per cluster where step 18 runs 4 tiles on 58 clusters and 3 on 8.
//
// Launch: as step 10 (block 384, 2x1 clusters, 230,400 bytes of dynamic shared memory), and
// two more parameters: the partial sums' workspace (64 KiB per consumer warpgroup of the grid)
// and its flags (one int each, zero before the first launch; every launch leaves them zero).
#include "cooperative_store_gemm.cuh"
#include "stream_k.cuh"

constexpr int BM = 128, BN = 256, BK = 64, STAGES = 4, CLUSTER_M = 2, STAGING_BOXES = 2;
constexpr int GROUP_C_ROWS = 2048;
using Tile = cooperative_store::Tile;
static_assert(BM == Tile::TILE_M && BN == cluster_gemm::TILE_N && BK == cluster_gemm::TILE_K);
static_assert(STAGING_BOXES == tma_store::ROUND_BOXES);

extern "C" __global__ void __cluster_dims__(CLUSTER_M, 1, 1)
    __launch_bounds__(cluster_gemm::THREADS, 1)
        hgemm_stream_k(const __grid_constant__ CUtensorMap map_a,
            const __grid_constant__ CUtensorMap map_b,
            const __grid_constant__ CUtensorMap map_c, int M, int N, int K,
            bf16 *__restrict__ C, int ldc, int exact_cols, float *__restrict__ partials,
            int *__restrict__ flags) {
    extern __shared__ __align__(16) unsigned char smem_raw[];
    __shared__ __align__(8) uint64_t full[STAGES], empty[STAGES];
    unsigned char *smem = aligned_dynamic_smem<1024>(smem_raw);
    unsigned char *staging = smem + STAGES * Tile::STAGE_BYTES;  // 1024-aligned
    const tma_store::Output out{&map_c, C, ldc, M, N, exact_cols};
    cooperative_store::DeferredSlice epilogue{out, staging};
    stream_k::persistent_gemm<CLUSTER_M, STAGES, GROUP_C_ROWS>(
        map_a, map_b, M, N, K, smem, full, empty, epilogue, partials, flags);
}
