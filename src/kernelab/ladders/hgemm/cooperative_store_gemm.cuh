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
//   Deferred       (StagingBoxes 2) store rounds that wait, packed to bf16 in registers,
//                  until the consumer's next tile has a wgmma group in flight: the second
//                  (1, step 16) or both (2, step 17)
//   OverwriteFirst a tile's first wgmma overwrites the accumulators (scale-d 0) instead of
//                  the consumer zeroing them first (step 18)
// Shared memory: Stages x 49,152 + 2 x StagingBoxes x 8,192 bytes after 1024-byte alignment.
#pragma once

#include <type_traits>

#include "cluster_pipeline.cuh"
#include "tma_store_epilogue.cuh"

namespace cooperative_store {

using Tile = cluster_gemm::Schedule<false>;

// What both deferred epilogues share. Each consumer stages into its own two-box buffer:
__device__ __forceinline__ unsigned char *consumer_staging(unsigned char *staging, int consumer) {
    return staging + consumer * tma_store::ROUND_BOXES * tma_store::BOX_BYTES;
}

// A slice TMA cannot store (past a ragged right edge) goes from the accumulators straight to
// global memory, then and there; true when it did.
__device__ __forceinline__ bool stored_from_registers(const tma_store::Output &out,
                                                      const float (&acc)[128], int row, int col) {
    if (!tma_store::needs_register_store(out, col)) return false;
    store_accumulators<tma_store::SLICE_N>(out.C, out.ldc, row, col, out.M, out.N, acc);
    return true;
}

// Step 16's epilogue: the call stages and stores a slice's first round and keeps the second
// packed; finish() stores it. 32 registers carry it into the next tile's main loop.
struct DeferredRound {
    const tma_store::Output &out;
    unsigned char *staging;  // both consumers' two-box buffers
    uint32_t later[tma_store::ROUND_REGS];
    int row0 = 0, col0 = 0;
    bool pending = false;

    __device__ __forceinline__ unsigned char *buffer(int consumer) const {
        return consumer_staging(staging, consumer);
    }

    __device__ __forceinline__ void operator()(const float (&acc)[128], int row, int col,
                                               int consumer, unsigned char *) {
        if (stored_from_registers(out, acc, row, col)) return;
        uint32_t now[tma_store::ROUND_REGS];
        tma_store::pack_round(acc, 0, now);
        tma_store::pack_round(acc, 1, later);
        tma_store::stage_round(out, buffer(consumer), consumer, row, col, 0, now);
        row0 = row, col0 = col, pending = true;
    }

    __device__ __forceinline__ void finish(int consumer) {
        if (!pending) return;
        pending = false;
        tma_store::stage_round(out, buffer(consumer), consumer, row0, col0, 1, later);
    }

    // the second round once the next tile's second K-tile is in flight
    __device__ __forceinline__ void during_k_tile(int consumer, int kt) {
        if (kt == 1) finish(consumer);
    }
};

// Step 17's epilogue: the call only packs both rounds (64 registers); the next tile's loop
// stages round 0 with its second K-tile in flight and round 1 with its third, so a tile's
// end costs the wait for its last wgmma group, the releases and 64 conversions.
struct DeferredSlice {
    const tma_store::Output &out;
    unsigned char *staging;
    uint32_t round0[tma_store::ROUND_REGS], round1[tma_store::ROUND_REGS];
    int row0 = 0, col0 = 0;
    int pending = 0;  // rounds not yet staged: 2, 1 or 0 (round 2 - pending is next)

    __device__ __forceinline__ unsigned char *buffer(int consumer) const {
        return consumer_staging(staging, consumer);
    }

    __device__ __forceinline__ void operator()(const float (&acc)[128], int row, int col,
                                               int consumer, unsigned char *) {
        if (stored_from_registers(out, acc, row, col)) return;
        tma_store::pack_round(acc, 0, round0);
        tma_store::pack_round(acc, 1, round1);
        row0 = row, col0 = col, pending = 2;
    }

    // The next round, if any (each round's registers named at compile time: an index into a
    // register array by a runtime value would put it in local memory).
    __device__ __forceinline__ void stage_next(int consumer) {
        if (pending == 2) {
            tma_store::stage_round(out, buffer(consumer), consumer, row0, col0, 0, round0);
        } else if (pending == 1) {
            tma_store::stage_round(out, buffer(consumer), consumer, row0, col0, 1, round1);
        }
        if (pending > 0) --pending;
    }

    __device__ __forceinline__ void during_k_tile(int consumer, int kt) {
        if (kt == 1 || kt == 2) stage_next(consumer);
    }

    __device__ __forceinline__ void finish(int consumer) {
        stage_next(consumer);
        stage_next(consumer);
    }
};

// Deferred: 0 (store at the tile's end), 1 (step 16's DeferredRound) or 2 (step 17's
// DeferredSlice) store rounds moved into the next tile's main loop.
template <int Stages, int ClusterM, int StagingBoxes, int GroupCRows, bool BorrowLastSlot,
          bool LeanLoop = false, int Deferred = 0, bool OverwriteFirst = false>
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
    if constexpr (Deferred > 0) {
        static_assert(StagingBoxes == tma_store::ROUND_BOXES && !BorrowLastSlot);
        using Epilogue = std::conditional_t<Deferred == 1, DeferredRound, DeferredSlice>;
        Epilogue epilogue{out, staging};
        cluster_gemm::persistent_cluster_gemm<ClusterM, Stages, false, GroupCRows, false,
                                              LeanLoop, true, OverwriteFirst>(
            map_a, map_b, M, N, K, smem, full, empty, epilogue);
    } else {
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
}

}  // namespace cooperative_store
