// kernelab-arch: sm_90a
// Step 07, thread-block clusters with TMA multicast: step 06's persistent warp-specialised
// kernel, launched as clusters of 2 CTAs (on 2 SMs of one GPC) that own vertically adjacent
// 128 x 256 tiles and so share their B tile. Each CTA loads its A and half of B, multicast to
// both (cluster_pipeline.cuh): 32 KiB from L2 per SM per K-tile instead of 48 KiB.
//
// Why it should pay: at ~700 TFLOP/s an SM finishes a 128 x 256 x 64 K-tile (4.2 MFLOP) in
// ~0.8 us and step 06 pulls 48 KiB per K-tile into each of 132 SMs, ~8 TB/s of L2->SM
// traffic: near what Hopper's L2 delivers, so the TMA queue, not the tensor core, sets the
// pace when the L2 is busy. Cutting a third of it buys headroom.
// The epilogue is step 06's, straight from the accumulators; nothing else changes.
//
// Launch: block 384, grid 2 x min(pair tiles, co-resident clusters) with a compile-time
// cluster of (2, 1, 1), dynamic shared memory 4 x 49,152 + 1,024 = 197,632 bytes.
#include "cluster_pipeline.cuh"

constexpr int BM = 128, BN = 256, BK = 64, STAGES = 4;
static_assert(BM == cluster_gemm::TILE_M && BN == cluster_gemm::TILE_N);
static_assert(BK == cluster_gemm::TILE_K);

extern "C" __global__ void __cluster_dims__(2, 1, 1) __launch_bounds__(cluster_gemm::THREADS, 1)
    hgemm_cluster_multicast(const __grid_constant__ CUtensorMap map_a,
                            const __grid_constant__ CUtensorMap map_b, int M, int N, int K,
                            bf16 *__restrict__ C, int ldc) {
    using namespace cluster_gemm;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    __shared__ __align__(8) uint64_t full[STAGES], empty[STAGES];
    Ring<STAGES> ring(aligned_dynamic_smem<1024>(smem_raw), full, empty);
    const Problem pb(M, N, K);
    const int rank = cluster_cta_rank(), warpgroup = threadIdx.x / 128;

    if (threadIdx.x == 0) ring.init();
    cluster_sync();

    if (warpgroup == 0) {
        release_registers<PRODUCER_REGISTERS>();
        if (threadIdx.x == 0) produce(map_a, map_b, pb, ring, rank);
    } else {
        claim_registers<CONSUMER_REGISTERS>();
        consume(pb, ring, rank, warpgroup - 1,
                [&](const float (&acc)[128], int row0, int col0) {
                    store_accumulators<BN>(C, ldc, row0, col0, M, N, acc);
                });
    }
    // The peer may still arrive on this CTA's "empty" barriers until it is done.
    cluster_sync();
}
