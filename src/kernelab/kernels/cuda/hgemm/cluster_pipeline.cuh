// The persistent, warp-specialised, 2x1-cluster main loop that steps 07+ share; each step
// adds its own epilogue (and stage count).
//
// Two CTAs on two SMs form a cluster and take vertically adjacent output tiles: CTA rank r
// owns tile row 2p + r of pair row p, both own the same 256 columns, so they need the same
// B tile. Each CTA's producer loads its own A (16 KiB per K-tile) and HALF of the shared B
// (two of the four 64 k x 64 n boxes, 16 KiB), multicast into both CTAs' shared memory: per
// K-tile an SM pulls 32 KiB from L2 instead of step 06's 48 KiB (-33 % L2->SM traffic for
// the same 4.2 MFLOP).
//
// The price is coupling. A stage may be refilled only when BOTH CTAs' consumers are done
// with it (the peer's producer writes into this CTA's slot too), so each consumer warpgroup
// releases a stage on the "empty" barrier of both CTAs (4 arrivals per phase); each CTA's
// "full" barrier expects every byte that lands in its own slot (its A, all of B), whichever
// producer issued it. Both CTAs walk the same tiles and K-tiles, so their rings stay in step.
//
// Tile order: pair tiles (256 rows x 256 columns) in groups of GROUP_PAIR_ROWS pair rows,
// column-major inside a group (step 06's order with a pair row for a tile row).
#pragma once

#include <cuda.h>

#include "common.cuh"

namespace cluster_gemm {

constexpr int TILE_M = 128, TILE_N = 256, TILE_K = 64, CLUSTER_M = 2, GROUP_PAIR_ROWS = 4;
constexpr int CONSUMERS = 2, THREADS = 128 * (CONSUMERS + 1);
constexpr int PRODUCER_REGISTERS = 40, CONSUMER_REGISTERS = 232;
static_assert(128 * PRODUCER_REGISTERS + 128 * CONSUMERS * CONSUMER_REGISTERS <= 65536);
constexpr int B_BOX_N = 64;                       // 128 bytes of n: the swizzle span
constexpr int B_BOX_BYTES = TILE_K * B_BOX_N * 2;  // 8 KiB: one n atom of the descriptor
constexpr int B_BOXES = TILE_N / B_BOX_N;         // 4, split 2 + 2 between the CTAs
constexpr int A_TILE_BYTES = TILE_M * TILE_K * 2;  // 16 KiB
constexpr int B_TILE_BYTES = B_BOXES * B_BOX_BYTES;  // 32 KiB
constexpr int STAGE_BYTES = A_TILE_BYTES + B_TILE_BYTES;
constexpr uint16_t BOTH_CTAS = 0b11;
static_assert(TILE_M == 64 * CONSUMERS, "one m64 slice per consumer warpgroup");

// This CTA's output tile for pair tile p: (first row, first column) of C.
__device__ __forceinline__ int2 cta_tile_origin(int p, int pair_rows, int tiles_n, int rank) {
    const int per_group = GROUP_PAIR_ROWS * tiles_n;
    const int first_pair_row = p / per_group * GROUP_PAIR_ROWS;
    const int rows_in_group = min(GROUP_PAIR_ROWS, pair_rows - first_pair_row);
    const int local = p % per_group;
    const int pair_row = first_pair_row + local % rows_in_group;
    return make_int2((CLUSTER_M * pair_row + rank) * TILE_M, local / rows_in_group * TILE_N);
}

struct Problem {
    int M, N, K;
    int tiles_n, pair_rows, pairs, k_tiles;

    __device__ __forceinline__ Problem(int m, int n, int k) : M(m), N(n), K(k) {
        const int tiles_m = (m + TILE_M - 1) / TILE_M;
        tiles_n = (n + TILE_N - 1) / TILE_N;
        pair_rows = (tiles_m + CLUSTER_M - 1) / CLUSTER_M;
        pairs = pair_rows * tiles_n;
        k_tiles = (k + TILE_K - 1) / TILE_K;
    }
};

// The ring of `Stages` slots in this CTA's shared memory: A tiles, then B tiles, 1024-byte
// aligned (the 128-byte swizzle's period), with a full/empty mbarrier pair per slot.
template <int Stages>
struct Ring {
    unsigned char *a, *b;
    uint64_t *full, *empty;

    __device__ __forceinline__ Ring(unsigned char *smem, uint64_t *full_bars, uint64_t *empty_bars)
        : a(smem), b(smem + Stages * A_TILE_BYTES), full(full_bars), empty(empty_bars) {}

    // One thread, before the first cluster_sync.
    __device__ __forceinline__ void init() {
#pragma unroll
        for (int s = 0; s < Stages; ++s) {
            mbarrier_init(&full[s], 1);  // this CTA's producer's arrive.expect_tx (+ bytes)
            mbarrier_init(&empty[s], CONSUMERS * CLUSTER_M);  // both CTAs' consumers
        }
        fence_barrier_init();
    }
};

// The producer: one thread of warpgroup 0 walks this CTA's tiles and K-tiles, `it` counting
// K-tiles over the kernel's life (slot it % Stages, fill number it / Stages).
template <int Stages>
__device__ __forceinline__ void produce(const CUtensorMap &map_a, const CUtensorMap &map_b,
                                        const Problem &pb, Ring<Stages> &ring, int rank) {
    int it = 0;
    for (int p = cluster_index(); p < pb.pairs; p += cluster_count()) {
        const int2 origin = cta_tile_origin(p, pb.pair_rows, pb.tiles_n, rank);
        // The second CTA of a last, odd pair row has no rows of A: it loads none, but still
        // loads its half of B for its peer and runs the ring (its tile is never stored).
        const bool has_rows = origin.x < pb.M;
        // B boxes wholly right of N are loaded by neither CTA (see step 05).
        const int b_boxes = min(B_BOXES, (pb.N - origin.y + B_BOX_N - 1) / B_BOX_N);
        const uint32_t stage_bytes = (has_rows ? A_TILE_BYTES : 0) + b_boxes * B_BOX_BYTES;
        for (int kt = 0; kt < pb.k_tiles; ++kt, ++it) {
            const int slot = it % Stages;
            // Fill n of a slot needs release n - 1 from all four consumer warpgroups.
            if (it >= Stages) mbarrier_wait(&ring.empty[slot], (it / Stages - 1) & 1);
            // The peer's multicast may land before this arrival: the barrier's transaction
            // count may go negative meanwhile, and the phase cannot complete without it.
            mbarrier_arrive_expect_tx(&ring.full[slot], stage_bytes);
            if (has_rows) {
                tma_load_2d(ring.a + slot * A_TILE_BYTES, &map_a, kt * TILE_K, origin.x,
                            &ring.full[slot]);
            }
            for (int j = rank; j < b_boxes; j += CLUSTER_M) {
                tma_load_2d_multicast(ring.b + slot * B_TILE_BYTES + j * B_BOX_BYTES, &map_b,
                                      origin.y + j * B_BOX_N, kt * TILE_K, &ring.full[slot],
                                      BOTH_CTAS);
            }
        }
    }
}

// Give slot `slot` back to both CTAs' producers: threads 0 and 1 of the warpgroup each
// arrive on one CTA's "empty" barrier, after this warpgroup's wgmma on it completed.
__device__ __forceinline__ void release_stage(uint64_t *empty, int slot) {
    const int thread = threadIdx.x % 128;
    if (thread < CLUSTER_M) mbarrier_arrive_cluster(&empty[slot], thread);
}

// A consumer warpgroup: for each of this CTA's tiles, its 64 x 256 accumulators over all of
// K (one wgmma group kept in flight, as in step 05), every stage released before
// `epilogue(acc, first row, first column)` runs.
template <int Stages, class Epilogue>
__device__ __forceinline__ void consume(const Problem &pb, Ring<Stages> &ring, int rank,
                                        int consumer, Epilogue &&epilogue) {
    float acc[128];
    int it = 0;
    for (int p = cluster_index(); p < pb.pairs; p += cluster_count()) {
        const int2 origin = cta_tile_origin(p, pb.pair_rows, pb.tiles_n, rank);
#pragma unroll
        for (int i = 0; i < 128; ++i) acc[i] = 0.0f;
        for (int kt = 0; kt < pb.k_tiles; ++kt, ++it) {
            const int slot = it % Stages;
            mbarrier_wait(&ring.full[slot], (it / Stages) & 1);
            wgmma_k_tile_m64n256(acc, ring.a + slot * A_TILE_BYTES + consumer * 64 * 128,
                                 ring.b + slot * B_TILE_BYTES, B_BOX_BYTES);
            wgmma_wait<1>();
            if (kt > 0) release_stage(ring.empty, (it - 1) % Stages);
        }
        wgmma_wait<0>();
        release_stage(ring.empty, (it - 1) % Stages);
        epilogue(acc, origin.x + consumer * 64, origin.y);
    }
}

}  // namespace cluster_gemm
