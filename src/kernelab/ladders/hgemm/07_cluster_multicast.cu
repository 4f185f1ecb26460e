// kernelab-arch: sm_90a
// Step 07, thread-block clusters with TMA multicast: step 06's persistent warp-specialised
// kernel, launched as clusters of 2 CTAs (on 2 SMs of one GPC) that own vertically adjacent
// 128 x 256 tiles and so share their B tile. Each CTA loads its A and half of B, multicast to
// both (cluster_pipeline.cuh): 32 KiB from L2 per SM per K-tile instead of 48 KiB.
// Step 09 is this kernel with clusters of 4.
//
// Why it should pay: at ~700 TFLOP/s an SM finishes a 128 x 256 x 64 K-tile (4.2 MFLOP) in
// ~0.8 us and step 06 pulls 48 KiB per K-tile into each of 132 SMs. Measured step 06: 512
// tiles x 64 K-tiles x 48 KiB = 1.61 GB in 195 us at 4096^3 (8.3 TB/s), 12.9 GB in 1.53 ms at
// 8192^3 (8.4 TB/s), 201 MB in 34 us at 2048^3 (5.9 TB/s): one L2->SM rate at both large
// sizes, so the feed, not the tensor core, looks like the limit. A third less of it buys headroom.
// The epilogue is step 06's, straight from the accumulators; nothing else changes.
//
// Launch: block 384, grid 2 x min(pair tiles, co-resident clusters) with a compile-time
// cluster of (2, 1, 1), dynamic shared memory 4 x 49,152 + 1,024 = 197,632 bytes.
#include "cluster_pipeline.cuh"

constexpr int BM = 128, BN = 256, BK = 64, STAGES = 4, CLUSTER_M = 2;
static_assert(BM == cluster_gemm::Schedule<false>::TILE_M && BN == cluster_gemm::TILE_N);
static_assert(BK == cluster_gemm::TILE_K);

extern "C" __global__ void __cluster_dims__(CLUSTER_M, 1, 1)
    __launch_bounds__(cluster_gemm::THREADS, 1)
        hgemm_cluster_multicast(const __grid_constant__ CUtensorMap map_a,
                                const __grid_constant__ CUtensorMap map_b, int M, int N, int K,
                                bf16 *__restrict__ C, int ldc) {
    cluster_gemm::register_epilogue_gemm<CLUSTER_M, STAGES>(map_a, map_b, M, N, K, C, ldc);
}
