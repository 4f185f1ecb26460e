// The persistent, warp-specialised, ClusterM x 1-cluster main loop that steps 07+ share;
// each step picks the cluster size, the stage count and the schedule of its two consumer
// warpgroups, and adds its own epilogue.
//
// Schedules. Cooperative (07-10): a 128 x 256 CTA tile, consumer c owns its rows 64c..64c+63,
// both consumers read every stage and reach the epilogue together. PingPong (11): 64 x 256
// CTA tiles, consumer c owns the CTA's tiles c, c + 2, ... whole; only the owner reads a
// stage, and the consumers take turns at the main loop, so one's epilogue runs while the
// other's wgmma keep the tensor cores busy (CUTLASS's "pingpong" kernel schedule).
//
// ClusterM CTAs on ClusterM SMs of one GPC form a cluster and take vertically adjacent
// output tiles: CTA rank r owns tile row ClusterM * q + r of cluster row q; all own the same
// 256 columns, so they need the same B tile. Each CTA's producer loads its own A (16 KiB per
// cooperative K-tile, 8 KiB ping-pong) and 1/ClusterM of the shared B (4 / ClusterM of the
// four 64 k x 64 n boxes), multicast into every CTA of the cluster: per cooperative K-tile an
// SM pulls 16 + 32 / ClusterM KiB from L2 instead of step 06's 48 KiB (32 KiB with 2 CTAs,
// 24 KiB with 4); ping-pong pulls 8 + 16 = 24 KiB per half as many FLOPs.
//
// The price is coupling. A stage may be refilled only when EVERY CTA's consumers are done
// with it (the peers' producers write into this CTA's slot too), so each consumer warpgroup
// releases a stage on the "empty" barrier of every CTA (readers x ClusterM arrivals per phase);
// each CTA's "full" barrier expects every byte that lands in its own slot (its A, all of
// B), whichever producer issued it. All CTAs walk the same tiles and K-tiles, so their rings
// stay in step.
//
// Tile order: cluster tiles (TILE_M x ClusterM rows, 256 columns) in groups spanning GroupCRows
// rows of C (1024 unless a step says otherwise), column-major inside a group (step 06's order
// with a cluster row for a tile row).
//
// The epilogue. `epilogue(acc, row0, col0, consumer, last_b_tile)` writes one consumer's
// 64 x 256 slice; last_b_tile is the B tile of the slot the tile's last K-tile used. Normally
// that slot is released before the epilogue. With BorrowLastSlot (cooperative only) it is not:
// both consumers first meet (each has waited for its own wgmma; the other's may still read
// the slot's B), the epilogue may use the slot's B tile as staging space, and the consumer's
// first thread releases the slot once its TMA stores have read it (the thread that issued
// them: bulk groups are per thread).
//
// DeferredRound (steps 16, 17): the epilogue is an object whose call stores part of the slice
// (or none) and keeps the rest packed; consume calls `during_k_tile(consumer, kt)` in the
// next tile's loop with a wgmma group in flight (the object stores what it deferred there),
// and `finish(consumer)` before the next epilogue and at the end, for whatever is left.
#pragma once

#include <cuda.h>

#include "common.cuh"

namespace cluster_gemm {

constexpr int TILE_N = 256, TILE_K = 64, GROUP_C_ROWS = 1024;  // the default raster group
constexpr int CONSUMERS = 2, THREADS = 128 * (CONSUMERS + 1);
constexpr int PRODUCER_REGISTERS = 40, CONSUMER_REGISTERS = 232;
static_assert(128 * PRODUCER_REGISTERS + 128 * CONSUMERS * CONSUMER_REGISTERS <= 65536);
constexpr int B_BOX_N = 64;                       // 128 bytes of n: the swizzle span
constexpr int B_BOX_BYTES = TILE_K * B_BOX_N * 2;  // 8 KiB: one n atom of the descriptor
constexpr int B_BOXES = TILE_N / B_BOX_N;         // 4, split between the CTAs
constexpr int B_TILE_BYTES = B_BOXES * B_BOX_BYTES;  // 32 KiB
// Hardware barriers 1-2 belong to the epilogues (one per consumer); 3-4 to ping-pong turns;
// 5 to both consumers meeting before an epilogue that borrows the last slot.
constexpr int TURN_BARRIER = 3, CONSUMERS_BARRIER = 5;

// What the schedule fixes: the CTA tile's rows, the bytes of a stage, how many consumer
// warpgroups of a CTA read (and release) each stage.
template <bool PingPong>
struct Schedule {
    static constexpr int TILE_M = PingPong ? 64 : 64 * CONSUMERS;
    static constexpr int A_TILE_BYTES = TILE_M * TILE_K * 2;  // 8 or 16 KiB
    static constexpr int STAGE_BYTES = A_TILE_BYTES + B_TILE_BYTES;  // 40 or 48 KiB
    static constexpr int READERS = PingPong ? 1 : CONSUMERS;
};

template <int ClusterM, bool PingPong, int GroupCRows = GROUP_C_ROWS>
struct Problem {
    using S = Schedule<PingPong>;
    static constexpr int GROUP_TILE_ROWS = GroupCRows / S::TILE_M;
    static_assert(B_BOXES % ClusterM == 0 && GROUP_TILE_ROWS % ClusterM == 0);
    static constexpr int GROUP_ROWS = GROUP_TILE_ROWS / ClusterM;  // cluster rows per group
    int M, N, K;
    int tiles_n, cluster_rows, cluster_tiles, k_tiles;

    __device__ __forceinline__ Problem(int m, int n, int k) : M(m), N(n), K(k) {
        const int tiles_m = (m + S::TILE_M - 1) / S::TILE_M;
        tiles_n = (n + TILE_N - 1) / TILE_N;
        cluster_rows = (tiles_m + ClusterM - 1) / ClusterM;
        cluster_tiles = cluster_rows * tiles_n;
        k_tiles = (k + TILE_K - 1) / TILE_K;
    }

    // CTA `rank`'s output tile within cluster tile q: (first row, first column) of C.
    __device__ __forceinline__ int2 tile_origin(int q, int rank) const {
        const int per_group = GROUP_ROWS * tiles_n;
        const int first_row = q / per_group * GROUP_ROWS;
        const int rows_in_group = min(GROUP_ROWS, cluster_rows - first_row);
        const int local = q % per_group;
        const int cluster_row = first_row + local % rows_in_group;
        return make_int2((ClusterM * cluster_row + rank) * S::TILE_M,
                         local / rows_in_group * TILE_N);
    }
};

// The ring of `Stages` slots in this CTA's shared memory: A tiles, then B tiles, 1024-byte
// aligned (the 128-byte swizzle's period), with a full/empty mbarrier pair per slot.
template <int ClusterM, int Stages, bool PingPong>
struct Ring {
    using S = Schedule<PingPong>;
    unsigned char *a, *b;
    uint64_t *full, *empty;

    __device__ __forceinline__ Ring(unsigned char *smem, uint64_t *full_bars, uint64_t *empty_bars)
        : a(smem), b(smem + Stages * S::A_TILE_BYTES), full(full_bars), empty(empty_bars) {}

    // One thread, before the first cluster_sync.
    __device__ __forceinline__ void init() {
#pragma unroll
        for (int s = 0; s < Stages; ++s) {
            mbarrier_init(&full[s], 1);  // this CTA's producer's arrive.expect_tx (+ bytes)
            mbarrier_init(&empty[s], S::READERS * ClusterM);  // every CTA's readers
        }
        fence_barrier_init();
    }
};

// The producer's loads of one tile's K-tiles [k_begin, k_end), `it` counting K-tiles over the
// kernel's life (slot it % Stages, fill number it / Stages). Shared with step 19's segments
// (stream_k.cuh).
template <int ClusterM, int Stages, bool PingPong, int GroupCRows>
__device__ __forceinline__ void produce_k_tiles(const CUtensorMap &map_a,
                                                const CUtensorMap &map_b,
                                                const Problem<ClusterM, PingPong, GroupCRows> &pb,
                                                Ring<ClusterM, Stages, PingPong> &ring, int rank,
                                                int q, int k_begin, int k_end, int &it) {
    using S = Schedule<PingPong>;
    constexpr uint16_t every_cta = (1 << ClusterM) - 1;
    const int2 origin = pb.tile_origin(q, rank);
    // A CTA past the last tile row (M not a multiple of ClusterM tiles) loads no A, but
    // still loads its share of B for its peers and runs the ring (its tile is never
    // stored).
    const bool has_rows = origin.x < pb.M;
    // B boxes wholly right of N are loaded by neither CTA (see step 05).
    const int b_boxes = min(B_BOXES, (pb.N - origin.y + B_BOX_N - 1) / B_BOX_N);
    const uint32_t stage_bytes = (has_rows ? S::A_TILE_BYTES : 0) + b_boxes * B_BOX_BYTES;
    for (int kt = k_begin; kt < k_end; ++kt, ++it) {
        const int slot = it % Stages;
        // Fill n of a slot needs release n - 1 from every reader of the cluster.
        if (it >= Stages) mbarrier_wait(&ring.empty[slot], (it / Stages - 1) & 1);
        // A peer's multicast may land before this arrival: the barrier's transaction
        // count may go negative meanwhile, and the phase cannot complete without it.
        mbarrier_arrive_expect_tx(&ring.full[slot], stage_bytes);
        if (has_rows) {
            tma_load_2d(ring.a + slot * S::A_TILE_BYTES, &map_a, kt * TILE_K, origin.x,
                        &ring.full[slot]);
        }
        for (int j = rank; j < b_boxes; j += ClusterM) {
            tma_load_2d_multicast(ring.b + slot * B_TILE_BYTES + j * B_BOX_BYTES, &map_b,
                                  origin.y + j * B_BOX_N, kt * TILE_K, &ring.full[slot],
                                  every_cta);
        }
    }
}

// The producer: one thread of warpgroup 0 walks this CTA's tiles and their K-tiles. Ping-pong
// or not, the ring holds the tiles' K-tiles in tile order.
template <int ClusterM, int Stages, bool PingPong, int GroupCRows>
__device__ __forceinline__ void produce(const CUtensorMap &map_a, const CUtensorMap &map_b,
                                        const Problem<ClusterM, PingPong, GroupCRows> &pb,
                                        Ring<ClusterM, Stages, PingPong> &ring, int rank) {
    int it = 0;
    for (int q = cluster_index(); q < pb.cluster_tiles; q += cluster_count()) {
        produce_k_tiles(map_a, map_b, pb, ring, rank, q, 0, pb.k_tiles, it);
    }
}

// Give slot `slot` back to every CTA's producer: thread r of the warpgroup arrives on CTA
// r's "empty" barrier, after this warpgroup's wgmma on the slot completed.
template <int ClusterM>
__device__ __forceinline__ void release_stage(uint64_t *empty, int slot) {
    const int thread = threadIdx.x % 128;
    if (thread < ClusterM) mbarrier_arrive_cluster(&empty[slot], thread);
}

// The same release of a slot the epilogue borrowed as staging: the warpgroup's first thread
// (which issued the TMA stores) waits until they have read shared memory, then arrives on
// every CTA's "empty" barrier itself.
template <int ClusterM>
__device__ __forceinline__ void release_borrowed_stage(uint64_t *empty, int slot) {
    if (threadIdx.x % 128 != 0) return;
    bulk_wait_read<0>();
#pragma unroll
    for (int cta = 0; cta < ClusterM; ++cta) mbarrier_arrive_cluster(&empty[slot], cta);
}

// Ping-pong turns. A consumer may wait on its tile's "full" barriers only once the other
// consumer has waited on every stage of the tile before it: a full barrier's parity names
// only the fill's parity, so a consumer that ran two fills ahead of the slot would see an
// older phase as complete. The turn also keeps the two main loops from interleaving on the
// tensor cores. bar.sync(3 + c) by consumer c meets bar.arrive(3 + c) by the other one.
__device__ __forceinline__ void wait_turn(int consumer) {
    named_barrier_sync(TURN_BARRIER + consumer, 2 * 128);
}

__device__ __forceinline__ void pass_turn(int consumer) {
    named_barrier_arrive(TURN_BARRIER + (1 - consumer), 2 * 128);
}

// A consumer warpgroup: for each of its tiles, its 64 x 256 accumulators over all of K (one
// wgmma group kept in flight, as in step 05), every stage released before
// `epilogue(acc, first row, first column, consumer, last B tile)` runs (BorrowLastSlot: all
// but the last, released after the epilogue). Cooperative: every tile of the
// CTA, rows 64 * consumer on. Ping-pong: the CTA's tiles consumer, consumer + 2, ...; `it`
// skips the other consumer's K-tiles.
template <int ClusterM, int Stages, bool PingPong, int GroupCRows, bool BorrowLastSlot,
          bool LeanLoop, bool DeferredRound, bool OverwriteFirst, class Epilogue>
__device__ __forceinline__ void consume(const Problem<ClusterM, PingPong, GroupCRows> &pb,
                                        Ring<ClusterM, Stages, PingPong> &ring, int rank,
                                        int consumer, Epilogue &&epilogue) {
    using S = Schedule<PingPong>;
    static_assert(!(PingPong && BorrowLastSlot), "a ping-pong slot has one reader");
    const int a_row0 = PingPong ? 0 : 64 * consumer;  // this consumer's rows in the A tile
    // LeanLoop: slot 0's descriptors once, each slot's by one add (A tiles are
    // S::A_TILE_BYTES / 16 units apart, B tiles B_TILE_BYTES / 16), not rebuilt per k16; and
    // the slot and phase of K-tile `it` by unsigned arithmetic (a mask and a shift for a
    // power-of-two ring, where a signed % and / cost a sign fix-up each)
    const uint64_t a_desc0 = LeanLoop ? smem_desc_128b(ring.a + a_row0 * 128) : uint64_t(0);
    const uint64_t b_desc0 = LeanLoop ? smem_desc_128b_mn(ring.b, B_BOX_BYTES) : uint64_t(0);
    float acc[128];
    int it = 0, local = 0;  // local: the tile's place in this CTA's sequence
    for (int q = cluster_index(); q < pb.cluster_tiles; q += cluster_count(), ++local) {
        if (PingPong && local % CONSUMERS != consumer) {
            it += pb.k_tiles;  // the other consumer's tile
            continue;
        }
        const int2 origin = pb.tile_origin(q, rank);
        if (PingPong && local > 0) wait_turn(consumer);
        // OverwriteFirst (LeanLoop only): the tile's first wgmma ignores the accumulators
        // (scale-d 0) instead of 128 moves zeroing them while the tensor cores wait
        static_assert(!OverwriteFirst || LeanLoop);
        if constexpr (!OverwriteFirst) {
#pragma unroll
            for (int i = 0; i < 128; ++i) acc[i] = 0.0f;
        }
        for (int kt = 0; kt < pb.k_tiles; ++kt, ++it) {
            const int slot = LeanLoop ? int(unsigned(it) % Stages) : it % Stages;
            const int fill = LeanLoop ? int(unsigned(it) / Stages) : it / Stages;
            mbarrier_wait(&ring.full[slot], fill & 1);
            if constexpr (LeanLoop) {
                wgmma_k_tile_m64n256_stepped(acc, a_desc0 + uint64_t(slot) * (S::A_TILE_BYTES >> 4),
                                             b_desc0 + uint64_t(slot) * (B_TILE_BYTES >> 4),
                                             !OverwriteFirst || kt > 0);
            } else {
                wgmma_k_tile_m64n256(acc, ring.a + slot * S::A_TILE_BYTES + a_row0 * 128,
                                     ring.b + slot * B_TILE_BYTES, B_BOX_BYTES);
            }
            wgmma_wait<1>();
            if (kt > 0) {
                release_stage<ClusterM>(
                    ring.empty, LeanLoop ? int(unsigned(it - 1) % Stages) : (it - 1) % Stages);
            }
            // DeferredRound: the previous tile's deferred store rounds, while this K-tile's
            // wgmma group runs (they touch neither the accumulators nor the ring)
            if constexpr (DeferredRound) epilogue.during_k_tile(consumer, kt);
        }
        if constexpr (DeferredRound) epilogue.finish(consumer);  // a problem of few K-tiles
        // Every full barrier of this tile has been waited on: the other consumer may start
        // on the next tile while this one drains its last group and stores.
        if (PingPong && q + cluster_count() < pb.cluster_tiles) pass_turn(consumer);
        wgmma_wait<0>();
        const int last = (it - 1) % Stages;
        if constexpr (BorrowLastSlot) {
            named_barrier_sync(CONSUMERS_BARRIER, CONSUMERS * 128);  // both done with the slot
            fence_proxy_async();  // wgmma's (async-proxy) reads before stmatrix's writes
        } else {
            release_stage<ClusterM>(ring.empty, last);
        }
        epilogue(acc, origin.x + a_row0, origin.y, consumer, ring.b + last * B_TILE_BYTES);
        if constexpr (BorrowLastSlot) release_borrowed_stage<ClusterM>(ring.empty, last);
    }
    if constexpr (DeferredRound) epilogue.finish(consumer);  // the last tile's deferred rounds
}

// The whole kernel body: barrier init, the roles, and the cluster barrier that keeps every
// CTA alive until its peers can no longer arrive on its barriers. `smem` is the 1024-aligned
// dynamic shared memory (the ring first); `epilogue(acc, row0, col0, consumer, last_b_tile)`
// writes one consumer warpgroup's 64 x 256 slice (see "The epilogue" above).
template <int ClusterM, int Stages, bool PingPong = false, int GroupCRows = GROUP_C_ROWS,
          bool BorrowLastSlot = false, bool LeanLoop = false, bool DeferredRound = false,
          bool OverwriteFirst = false, class Epilogue>
__device__ __forceinline__ void persistent_cluster_gemm(const CUtensorMap &map_a,
                                                        const CUtensorMap &map_b, int M, int N,
                                                        int K, unsigned char *smem,
                                                        uint64_t *full, uint64_t *empty,
                                                        Epilogue &&epilogue) {
    Ring<ClusterM, Stages, PingPong> ring(smem, full, empty);
    const Problem<ClusterM, PingPong, GroupCRows> pb(M, N, K);
    const int rank = cluster_cta_rank(), warpgroup = threadIdx.x / 128;

    if (threadIdx.x == 0) ring.init();
    cluster_sync();

    if (warpgroup == 0) {
        release_registers<PRODUCER_REGISTERS>();
        if (threadIdx.x == 0) produce(map_a, map_b, pb, ring, rank);
    } else {
        claim_registers<CONSUMER_REGISTERS>();
        consume<ClusterM, Stages, PingPong, GroupCRows, BorrowLastSlot, LeanLoop, DeferredRound,
                OverwriteFirst>(pb, ring, rank, warpgroup - 1, epilogue);
        // An epilogue's TMA stores (if any) are complete before the CTA ends.
        if (threadIdx.x % 128 == 0) bulk_wait<0>();
    }
    cluster_sync();
}

// Steps 07 and 09 whole: the epilogue straight from the accumulators (step 05's bf16 pairs).
template <int ClusterM, int Stages>
__device__ __forceinline__ void register_epilogue_gemm(const CUtensorMap &map_a,
                                                       const CUtensorMap &map_b, int M, int N,
                                                       int K, bf16 *__restrict__ C, int ldc) {
    extern __shared__ __align__(16) unsigned char smem_raw[];
    __shared__ __align__(8) uint64_t full[Stages], empty[Stages];
    persistent_cluster_gemm<ClusterM, Stages>(
        map_a, map_b, M, N, K, aligned_dynamic_smem<1024>(smem_raw), full, empty,
        [&](const float (&acc)[128], int row0, int col0, int, unsigned char *) {
            store_accumulators<TILE_N>(C, ldc, row0, col0, M, N, acc);
        });
}

}  // namespace cluster_gemm
