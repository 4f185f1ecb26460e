// kernelab-arch: sm_90a
// Step 08, a TMA-store epilogue: step 07's clusters and main loop, but each consumer hands its
// 64 x 256 tile to the copy engine instead of storing it itself. In steps 05-07 the
// epilogue is 64 bf16-pair stores per thread (each warp store touches 8 rows x 16 bytes) and
// the warpgroup waits for none of them, yet the next tile's first wgmma waits behind the
// store instructions' issue and the register pressure of the address math. Here:
// - stmatrix writes the accumulators, packed to bf16, into a 32 KiB staging buffer per
//   consumer: 16 stmatrix.x4 per thread, in the 128-byte swizzle (bank-conflict free, and
//   the layout TMA reads back), as four 64-row x 64-column boxes;
// - after a proxy fence and a warpgroup barrier, one thread issues four TMA stores
//   (cp.async.bulk.tensor, full 128-byte lines, edges clipped by the hardware) and commits
//   them as a bulk group; the warpgroup goes straight on to the next tile's main loop;
// - before the staging buffer is written again (one tile later, ~36 us at 4096^3) that
//   thread waits until the previous group has finished READING it (wait_group.read 0).
// Cost: 64 KiB of staging, so the ring drops from 4 to 3 stages of 48 KiB (144 KiB in
// flight per SM): whether the shallower ring costs more than the epilogue saves is what the
// benchmark against step 07 decides.
//
// Launch: block 384, grid as step 07 (clusters of 2), dynamic shared memory
// 3 x 49,152 + 2 x 32,768 + 1,024 = 214,016 bytes. The output needs 16-byte aligned rows
// (TMA): the launcher stages C through a padded buffer when it does not have them.
#include "cluster_pipeline.cuh"

constexpr int BM = 128, BN = 256, BK = 64, STAGES = 3, CLUSTER_M = 2;
static_assert(BM == cluster_gemm::TILE_M && BN == cluster_gemm::TILE_N);
static_assert(BK == cluster_gemm::TILE_K);
constexpr int C_BOX_N = 64;                     // 128 bytes of bf16: the swizzle span
constexpr int C_BOX_BYTES = 64 * C_BOX_N * 2;   // one consumer's 64 rows x 64 columns: 8 KiB
constexpr int C_STAGING_BYTES = BN / C_BOX_N * C_BOX_BYTES;  // 32 KiB per consumer

// Consumer `consumer`'s 64 x 256 accumulators to its staging buffer, then to C by TMA.
__device__ __forceinline__ void store_tile_by_tma(const CUtensorMap &map_c, unsigned char *staging,
                                                  int consumer, int row0, int col0, int M, int N,
                                                  const float (&acc)[128]) {
    const int thread = threadIdx.x % 128, warp = thread / 32, lane = thread % 32;
    const bool leader = thread == 0;
    const int barrier = 1 + consumer;  // one hardware barrier per consumer warpgroup

    if (leader) bulk_wait_read<0>();  // the previous tile's stores have read the buffer
    named_barrier_sync(barrier, 128);

    // stmatrix.x4: lanes 8i..8i+7 address the 8 rows of matrix i; matrices 0/1 are rows
    // 0-7 / 8-15 of n8 block j, matrices 2/3 the same rows of block j + 1.
    const int matrix = lane / 8, r = lane % 8;
    const int row = 16 * warp + 8 * (matrix & 1) + r;  // 0..63 within the slice; row % 8 = r
#pragma unroll
    for (int j = 0; j < BN / 8; j += 2) {
        const int block = j + (matrix >> 1);  // the n8 block this lane's row address is in
        unsigned char *dst = staging + block / 8 * C_BOX_BYTES + row * 128 + (((block % 8) ^ r) << 4);
        stmatrix_x4(dst, pack_bf16x2(acc[4 * j + 0], acc[4 * j + 1]),
                    pack_bf16x2(acc[4 * j + 2], acc[4 * j + 3]),
                    pack_bf16x2(acc[4 * j + 4], acc[4 * j + 5]),
                    pack_bf16x2(acc[4 * j + 6], acc[4 * j + 7]));
    }
    fence_proxy_async();  // generic-proxy writes, read next by the TMA unit
    named_barrier_sync(barrier, 128);

    if (leader && row0 < M) {
#pragma unroll
        for (int b = 0; b < BN / C_BOX_N; ++b) {
            const int col = col0 + b * C_BOX_N;
            if (col < N) tma_store_2d(&map_c, staging + b * C_BOX_BYTES, col, row0);
        }
        bulk_commit();
    }
}

extern "C" __global__ void __cluster_dims__(CLUSTER_M, 1, 1)
    __launch_bounds__(cluster_gemm::THREADS, 1)
        hgemm_tma_store(const __grid_constant__ CUtensorMap map_a,
                        const __grid_constant__ CUtensorMap map_b,
                        const __grid_constant__ CUtensorMap map_c, int M, int N, int K) {
    extern __shared__ __align__(16) unsigned char smem_raw[];
    __shared__ __align__(8) uint64_t full[STAGES], empty[STAGES];
    unsigned char *smem = aligned_dynamic_smem<1024>(smem_raw);
    unsigned char *staging = smem + STAGES * cluster_gemm::STAGE_BYTES;  // 1024-aligned
    cluster_gemm::persistent_cluster_gemm<CLUSTER_M, STAGES>(
        map_a, map_b, M, N, K, smem, full, empty,
        [&](const float (&acc)[128], int row0, int col0, int consumer) {
            store_tile_by_tma(map_c, staging + consumer * C_STAGING_BYTES, consumer, row0, col0,
                              M, N, acc);
        });
}
