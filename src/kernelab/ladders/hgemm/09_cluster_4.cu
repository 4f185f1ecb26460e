// kernelab-arch: sm_90a
// Step 09, clusters of 4: step 07 with four vertically adjacent 128 x 256 tiles per cluster.
// Each CTA loads its A (16 KiB per K-tile) and ONE of B's four 64 k x 64 n boxes (8 KiB),
// multicast to all four: 24 KiB from L2 per SM per K-tile against 32 KiB in step 07 and
// 48 KiB in step 06. The costs: a stage is refilled only when all 8 consumer warpgroups of
// the cluster have released it (the slowest SM sets the pace), and a cluster must fit in one
// GPC, so a GPC whose SM count is not a multiple of 4 leaves SMs idle (the launcher sizes
// the grid with cuOccupancyMaxActiveClusters). Which side wins is the benchmark's call.
//
// Launch: block 384, grid 4 x min(cluster tiles, co-resident clusters) with a compile-time
// cluster of (4, 1, 1), dynamic shared memory 4 x 49,152 + 1,024 = 197,632 bytes.
#include "cluster_pipeline.cuh"

constexpr int BM = 128, BN = 256, BK = 64, STAGES = 4, CLUSTER_M = 4;
static_assert(BM == cluster_gemm::Schedule<false>::TILE_M && BN == cluster_gemm::TILE_N);
static_assert(BK == cluster_gemm::TILE_K);

extern "C" __global__ void __cluster_dims__(CLUSTER_M, 1, 1)
    __launch_bounds__(cluster_gemm::THREADS, 1)
        hgemm_cluster_4(const __grid_constant__ CUtensorMap map_a,
                        const __grid_constant__ CUtensorMap map_b, int M, int N, int K,
                        bf16 *__restrict__ C, int ldc) {
    cluster_gemm::register_epilogue_gemm<CLUSTER_M, STAGES>(map_a, map_b, M, N, K, C, ldc);
}
