// Step 19's kernel body: step 18 (cluster_pipeline.cuh's persistent 2x1-cluster loop, the lean
// K-tile loop, tiles that start by overwriting the accumulators, the deferred TMA-store
// epilogue) walking the segments of stream_k_split.cuh instead of whole tiles only, with the
// fix-up of the tiles whose K-tiles several clusters share.
//
// The fix-up goes through global memory, per consumer warpgroup (its 64 x 256 fp32 slice: 128
// accumulators in each of 128 threads):
//   a contributor stores its 128 x 128 floats in its slot of `partials` as 32 float4 per
//     thread, thread-major (each of the 32 stores is one coalesced 2 KiB row of the
//     warpgroup), meets its warpgroup on a named barrier and one thread sets the slot's flag
//     to 1 with a release store;
//   an owner's first thread spins on each contributor's flag with acquire loads and sets it
//     back to 0 (so every flag is 0 again when the kernel ends and the launcher never clears
//     them), meets its warpgroup and the other consumer (an owner's segment is its cluster's
//     last, so the stage ring is free once both are past their last wgmma), then every
//     thread copies its share of each partial sum into the ring with cp.async and adds it.
// That is CUTLASS's generic barrier pattern (bar.sync, then a release by one thread; an
// acquire by one thread, then bar.sync): release and acquire are cumulative, so the other
// threads' stores are ordered by the barrier.
//
// What the fix-up costs (H100, docs/notes/hgemm.md step 19): forced to share at
// 4096^3 the first build ran at ~94.4 % of step 18 (ncu: 180 -> 188 us). Builds without the
// partial sums' stores, or without their loads, showed the owner's read-back at the kernel's
// end to be the cost. Float4 loads took it to 95.5-96.0 %, the copy through the stage ring to
// 97.5 % (and shapes that save 15.5 K-tile times from 99.4 to 100.1 %). Tried and dropped:
// discard.global.L2 of read slices (-0.05 to -0.2 %), an L2 prefetch of them before the
// owner's segment ends (-0.3 to +0.7 %).
//
// Slot of (cluster c, CTA rank r, consumer w): (c * ClusterM + r) * CONSUMERS + w. Bytes per
// slot 64 KiB; 66 clusters x 2 x 2 = 264 slots, 16.5 MiB on an H100 or H200 (hgemm/__init__.py
// allocates them per device and stream).
#pragma once

#include "cluster_pipeline.cuh"
#include "stream_k_split.cuh"

namespace stream_k {

using namespace cluster_gemm;
using Tile = Schedule<false>;

constexpr int SLICE_FLOATS = 128 * 128;  // 64 x 256 accumulators of one consumer warpgroup
// A diagnostic build's knob (never set by the launcher): 1 leaves out the partial sums' stores,
// 2 their loads, flags and barriers kept, so a timing shows what each costs. Its results are
// wrong: benchmarks/experiments/stream_k_calibrate.py (at f7bfe57) --diagnose times it without a check.
#ifndef STREAM_K_DIAGNOSE
#define STREAM_K_DIAGNOSE 0
#endif
// Hardware barriers 1-5 are taken (cluster_pipeline.cuh); the fix-up meets on 6 + consumer.
constexpr int FIXUP_BARRIER = 6;
// An owner's wait for a flag gives up after this many 64 ns sleeps (over 8 s), with a trap:
// a launch error rather than a hang if a contributor can never run (fewer SMs than the grid
// assumed, under MPS say) or the split is wrong. A contributor's segment takes microseconds.
constexpr unsigned SPIN_LIMIT = 1u << 27;

__device__ __forceinline__ int load_acquire(const int *flag) {
    int value;
    asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(value) : "l"(flag) : "memory");
    return value;
}

__device__ __forceinline__ void store_release(int *flag, int value) {
    asm volatile("st.release.gpu.global.b32 [%0], %1;\n" ::"l"(flag), "r"(value) : "memory");
}

__device__ __forceinline__ void store_relaxed(int *flag, int value) {
    asm volatile("st.relaxed.gpu.global.b32 [%0], %1;\n" ::"l"(flag), "r"(value) : "memory");
}

// A copy of `pointer` the compiler cannot see through (an empty asm), so an address made from
// it is worked out where it is used. A slot's addresses hoisted to the kernel's start held
// register pairs through the K-tile loop, and beside 128 accumulators those pairs spilled.
template <class T>
__device__ __forceinline__ T *opaque(T *pointer) {
    asm volatile("" : "+l"(pointer));
    return pointer;
}

template <int ClusterM>
struct Workspace {
    float *partials;
    int *flags;

    __device__ __forceinline__ int slot(int cluster, int rank, int consumer) const {
        return (cluster * ClusterM + rank) * CONSUMERS + consumer;
    }

    __device__ __forceinline__ float4 *slice(int slot_index) const {
        float *base = opaque(partials) + static_cast<size_t>(slot_index) * SLICE_FLOATS;
        return reinterpret_cast<float4 *>(base);
    }

    __device__ __forceinline__ int *flag(int slot_index) const {
        return opaque(flags) + slot_index;
    }

    __device__ __forceinline__ void publish(const float (&acc)[128], int cluster, int rank,
                                            int consumer) const {
        const int thread = threadIdx.x % 128, mine = slot(cluster, rank, consumer);
        float4 *out = slice(mine) + thread;
#pragma unroll
        for (int j = 0; j < 32 && STREAM_K_DIAGNOSE != 1; ++j) {
            const float4 part = make_float4(acc[4 * j], acc[4 * j + 1], acc[4 * j + 2],
                                            acc[4 * j + 3]);
            __stcg(out + j * 128, part);
        }
        named_barrier_sync(FIXUP_BARRIER + consumer, 128);
        if (thread == 0) store_release(flag(mine), 1);
    }

    // Add the partial sums of every cluster below `owner` that left one for shared tile q.
    // `ring` is the stage ring's memory, which an owner's segment (its cluster's last) no
    // longer needs once both consumers are past their last wgmma.
    __device__ __forceinline__ void gather(float (&acc)[128], const Split &split, int q,
                                           int owner, int rank, int consumer,
                                           unsigned char *ring) const {
        const int thread = threadIdx.x % 128;
        if (thread == 0) {
            for (int c = owner - 1; split.contributes(c, q); --c) {
                int *ready = flag(slot(c, rank, consumer));
                for (unsigned spins = 0; load_acquire(ready) != 1; ++spins) {
                    if (spins == SPIN_LIMIT) __trap();
                    __nanosleep(64);
                }
                store_relaxed(ready, 0);
            }
        }
        named_barrier_sync(FIXUP_BARRIER + consumer, 128);
        named_barrier_sync(CONSUMERS_BARRIER, CONSUMERS * 128);  // the ring is free
        // this consumer's 64 KiB of the ring (its first 128 KiB: the A tiles and half the B)
        float4 *staged = reinterpret_cast<float4 *>(ring + consumer * SLICE_FLOATS * 4) + thread;
        for (int c = owner - 1; split.contributes(c, q); --c) {
            const float4 *in = slice(slot(c, rank, consumer)) + thread;
            // all 32 copies in flight at once (loads into registers got about four, for want of
            // registers); each thread reads back only the pieces it copied: no barrier between
#pragma unroll
            for (int j = 0; j < 32 && STREAM_K_DIAGNOSE != 2; ++j)
                cp_async_16(staged + j * 128, in + j * 128, 16);
            cp_async_commit();
            cp_async_wait<0>();
#pragma unroll
            for (int j = 0; j < 32 && STREAM_K_DIAGNOSE != 2; ++j) {
                const float4 part = staged[j * 128];
                acc[4 * j] += part.x;
                acc[4 * j + 1] += part.y;
                acc[4 * j + 2] += part.z;
                acc[4 * j + 3] += part.w;
            }
        }
    }
};

// The producer: cluster_pipeline.cuh's loads, over the segments' K-tiles.
template <int ClusterM, int Stages, int GroupCRows>
__device__ __forceinline__ void produce(const CUtensorMap &map_a, const CUtensorMap &map_b,
                                        const Problem<ClusterM, false, GroupCRows> &pb,
                                        const Split &split, Ring<ClusterM, Stages, false> &ring,
                                        int rank) {
    int it = 0;
    split.walk(cluster_index(), [&](const Segment &s) {
        produce_k_tiles(map_a, map_b, pb, ring, rank, s.q, s.k_begin, s.k_end, it);
    });
}

// A consumer warpgroup: step 18's loop per segment (its first K-tile overwrites the
// accumulators), then by the segment's role: publish, or gather and store, or store.
// `epilogue` is step 17's DeferredSlice (cooperative_store_gemm.cuh).
template <int ClusterM, int Stages, int GroupCRows, class Epilogue>
__device__ __forceinline__ void consume(const Problem<ClusterM, false, GroupCRows> &pb,
                                        const Split &split, Ring<ClusterM, Stages, false> &ring,
                                        const Workspace<ClusterM> &workspace, int rank,
                                        int consumer, Epilogue &epilogue) {
    const int a_row0 = 64 * consumer;
    const uint64_t a_desc0 = smem_desc_128b(ring.a + a_row0 * 128);
    const uint64_t b_desc0 = smem_desc_128b_mn(ring.b, B_BOX_BYTES);
    const int cluster = cluster_index();
    float acc[128];
    int it = 0;
    split.walk(cluster, [&](const Segment &s) {
        const int2 origin = pb.tile_origin(s.q, rank);
        for (int kt = s.k_begin; kt < s.k_end; ++kt, ++it) {
            const int local = kt - s.k_begin;
            const int slot = int(unsigned(it) % Stages), fill = int(unsigned(it) / Stages);
            mbarrier_wait(&ring.full[slot], fill & 1);
            wgmma_k_tile_m64n256_stepped(acc, a_desc0 + uint64_t(slot) * (Tile::A_TILE_BYTES >> 4),
                                         b_desc0 + uint64_t(slot) * (B_TILE_BYTES >> 4),
                                         local > 0);
            wgmma_wait<1>();
            if (local > 0) release_stage<ClusterM>(ring.empty, int(unsigned(it - 1) % Stages));
            epilogue.during_k_tile(consumer, local);  // the last tile's deferred store rounds
        }
        epilogue.finish(consumer);  // a segment of fewer than three K-tiles
        wgmma_wait<0>();
        release_stage<ClusterM>(ring.empty, int(unsigned(it - 1) % Stages));
        if (s.role == CONTRIBUTOR) {
            workspace.publish(acc, cluster, rank, consumer);
            return;
        }
        if (s.role == OWNER) workspace.gather(acc, split, s.q, cluster, rank, consumer, ring.a);
        epilogue(acc, origin.x + a_row0, origin.y, consumer, nullptr);
    });
    epilogue.finish(consumer);  // the last tile's deferred rounds
}

// The whole kernel body (cluster_pipeline.cuh's persistent_cluster_gemm with the split).
template <int ClusterM, int Stages, int GroupCRows, class Epilogue>
__device__ __forceinline__ void persistent_gemm(const CUtensorMap &map_a, const CUtensorMap &map_b,
                                                int M, int N, int K, unsigned char *smem,
                                                uint64_t *full, uint64_t *empty,
                                                Epilogue &epilogue, float *partials, int *flags) {
    Ring<ClusterM, Stages, false> ring(smem, full, empty);
    const Problem<ClusterM, false, GroupCRows> pb(M, N, K);
    // no workspace (the launcher could not make one: a first call inside CUDA-graph capture):
    // every tile whole
    const Split split(pb.cluster_tiles, pb.k_tiles, static_cast<int>(cluster_count()),
                      flags != nullptr);
    const int rank = cluster_cta_rank(), warpgroup = threadIdx.x / 128;

    if (threadIdx.x == 0) ring.init();
    cluster_sync();

    if (warpgroup == 0) {
        release_registers<PRODUCER_REGISTERS>();
        if (threadIdx.x == 0) produce(map_a, map_b, pb, split, ring, rank);
    } else {
        claim_registers<CONSUMER_REGISTERS>();
        const Workspace<ClusterM> workspace{partials, flags};
        consume(pb, split, ring, workspace, rank, warpgroup - 1, epilogue);
        if (threadIdx.x % 128 == 0) bulk_wait<0>();  // the epilogue's TMA stores, complete
    }
    cluster_sync();
}

}  // namespace stream_k
