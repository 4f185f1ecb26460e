// The kernel body of the cooperative TMA-store steps (08, 10, 12-14): the persistent 2x1-cluster
// main loop of cluster_pipeline.cuh, 128 x 256 CTA tiles shared by the two consumer
// warpgroups, and the TMA-store epilogue of tma_store_epilogue.cuh. Each step is one set of
// the compile-time choices:
//   Stages         ring depth (48 KiB a stage)
//   StagingBoxes   64 x 64 boxes of each consumer's own staging buffer (4: one round of
//                  stores; 2: two rounds, the second waiting for the first to be read)
//   GroupCRows     rows of C in one raster group (tile order)
//   BorrowLastSlot the two missing boxes of a one-round epilogue come from the B tile of the
//                  slot the tile's last K-tile used, released once the stores have read it
//                  (then StagingBoxes must be 2)
//   LeanLoop       the consumers step their wgmma descriptors by adds instead of rebuilding
//                  them from addresses every k16, and find slots by unsigned arithmetic
//                  (step 15)
// Shared memory: Stages x 49,152 + 2 x StagingBoxes x 8,192 bytes after 1024-byte alignment.
#pragma once

#include "cluster_pipeline.cuh"
#include "tma_store_epilogue.cuh"

namespace cooperative_store {

using Tile = cluster_gemm::Schedule<false>;

template <int Stages, int ClusterM, int StagingBoxes, int GroupCRows, bool BorrowLastSlot,
          bool LeanLoop = false>
__device__ __forceinline__ void gemm(const CUtensorMap &map_a, const CUtensorMap &map_b,
                                     const CUtensorMap &map_c, int M, int N, int K,
                                     bf16 *__restrict__ C, int ldc, int exact_cols) {
    static_assert(!BorrowLastSlot || StagingBoxes == tma_store::SLICE_BOXES / 2,
                  "a borrowed slot supplies half of the slice's boxes");
    constexpr int STAGING_BYTES = StagingBoxes * tma_store::BOX_BYTES;  // per consumer
    constexpr int ROUND_BOXES = BorrowLastSlot ? tma_store::SLICE_BOXES : StagingBoxes;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    __shared__ __align__(8) uint64_t full[Stages], empty[Stages];
    unsigned char *smem = aligned_dynamic_smem<1024>(smem_raw);
    unsigned char *staging = smem + Stages * Tile::STAGE_BYTES;  // 1024-aligned
    const tma_store::Output out{&map_c, C, ldc, M, N, exact_cols};
    cluster_gemm::persistent_cluster_gemm<ClusterM, Stages, false, GroupCRows, BorrowLastSlot,
                                          LeanLoop>(
        map_a, map_b, M, N, K, smem, full, empty,
        [&](const float (&acc)[128], int row0, int col0, int consumer,
            unsigned char *last_b_tile) {
            unsigned char *own = staging + consumer * STAGING_BYTES;
            // Consumer c borrows boxes 2c, 2c + 1 of the slot's four B boxes.
            const tma_store::Staging boxes =
                BorrowLastSlot
                    ? tma_store::Staging{own,
                                         last_b_tile + consumer * STAGING_BYTES, StagingBoxes}
                    : tma_store::contiguous(own);
            tma_store::store_slice<ROUND_BOXES>(out, boxes, consumer, row0, col0, acc);
        });
}

}  // namespace cooperative_store
