// kernelab-arch: sm_90a
// Step 11, ping-pong consumers: each consumer warpgroup owns whole 64 x 256 tiles in turn
// (the CTA's tiles 0, 2, 4, ... go to consumer 0, tiles 1, 3, ... to consumer 1) instead of
// both sharing every 128 x 256 tile. The consumers take turns at the main loop (a pair of
// named barriers, cluster_pipeline.cuh), so while one stores its tile (TMA-store epilogue,
// its own 32 KiB staging buffer) the other's wgmma run: the tensor cores no longer idle
// through the epilogue, which in 06-10 both consumers reach at the same moment.
// Everything else as step 08: persistent 2x1 clusters (the pair shares its B tile by
// multicast), one producer thread, one wgmma group in flight, m64n256k16 with B N-major.
// The costs: a stage carries half the FLOPs (A 64 x 64 + B 64 x 256 = 40 KiB for 2.1 MFLOP):
// per SM 8 + 16 = 24 KiB from L2 per K-tile, 1.5x 08's bytes per FLOP (still half of 06's
// rate, which ran at ~8.3 TB/s in total); one warpgroup alone must keep the tensor cores
// full, with wait_group 1 between its K-tiles.
//
// Launch: block 384, grid 2 x min(cluster tiles, co-resident clusters) where a cluster tile
// is 128 x 256 (two 64-row tiles), dynamic shared memory
// 4 x 40,960 + 2 x 32,768 + 1,024 = 230,400 bytes.
#include "cluster_pipeline.cuh"
#include "tma_store_epilogue.cuh"

constexpr int BM = 64, BN = 256, BK = 64, STAGES = 4, CLUSTER_M = 2, STAGING_BOXES = 4;
using Tile = cluster_gemm::Schedule<true>;
static_assert(BM == Tile::TILE_M && BN == cluster_gemm::TILE_N && BK == cluster_gemm::TILE_K);
constexpr int C_STAGING_BYTES = STAGING_BOXES * tma_store::BOX_BYTES;  // 32 KiB per consumer

extern "C" __global__ void __cluster_dims__(CLUSTER_M, 1, 1)
    __launch_bounds__(cluster_gemm::THREADS, 1)
        hgemm_pingpong(const __grid_constant__ CUtensorMap map_a,
                       const __grid_constant__ CUtensorMap map_b,
                       const __grid_constant__ CUtensorMap map_c, int M, int N, int K,
                       bf16 *__restrict__ C, int ldc, int exact_cols) {
    extern __shared__ __align__(16) unsigned char smem_raw[];
    __shared__ __align__(8) uint64_t full[STAGES], empty[STAGES];
    unsigned char *smem = aligned_dynamic_smem<1024>(smem_raw);
    unsigned char *staging = smem + STAGES * Tile::STAGE_BYTES;  // 1024-aligned
    const tma_store::Output out{&map_c, C, ldc, M, N, exact_cols};
    cluster_gemm::persistent_cluster_gemm<CLUSTER_M, STAGES, true>(
        map_a, map_b, M, N, K, smem, full, empty,
        [&](const float (&acc)[128], int row0, int col0, int consumer, unsigned char *) {
            tma_store::store_slice<STAGING_BOXES>(
                out, tma_store::contiguous(staging + consumer * C_STAGING_BYTES),
                                                  consumer, row0, col0, acc);
        });
}
