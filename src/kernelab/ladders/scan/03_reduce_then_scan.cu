// Step 3, reduce-then-scan: three kernels, no recursion, each thread 8 elements.
//
//   1. scan_reduce_tiles: each block sums one tile of 2048 elements -> tile_sums[tile].
//   2. scan_tile_sums: one block scans the tile sums in place (exclusive), 2048 at a time
//      with a running carry: tile_sums[tile] becomes the tile's prefix.
//   3. scan_tiles_seeded: each block scans its tile again, starting from its prefix.
// A thread scans its 8 elements serially in registers and the block joins the 256 thread
// totals with a warp-shuffle scan (common.cuh): a few shuffles and two barriers a tile
// instead of a tree of barriers, and no write-back pass: each element is written once.
// Bytes: read n x 4 twice (kernels 1 and 3), write n x 4 once, plus n / 2048 sums: about
// 3n x 4 bytes, 1.5x the floor, against steps 1-2's 2x.
// Proof: dram__bytes.sum falls against step 2 (3n x 4 against 4n x 4).
#include "common.cuh"

template <typename T>
__device__ __forceinline__ void scan_reduce_tiles(index_t n, const T *x, T *tile_sums) {
    const index_t base = static_cast<index_t>(blockIdx.x) * SCAN_TILE;
    T sum = T(0);
#pragma unroll
    for (int k = 0; k < SCAN_ITEMS; ++k) {  // coalesced: no staging needed to only add
        const index_t i = base + k * SCAN_THREADS + threadIdx.x;
        if (i < n) sum = scan_add(sum, x[i]);
    }
    T total;
    block_exclusive(sum, &total);
    if (threadIdx.x == 0) tile_sums[blockIdx.x] = total;
}

template <typename T>
__device__ __forceinline__ void scan_tile_sums(index_t tiles, T *tile_sums) {
    __shared__ T smem[SCAN_SMEM_WORDS];
    T items[SCAN_ITEMS];
    T carry = T(0);
    for (index_t base = 0; base < tiles; base += SCAN_TILE) {
        load_tile(tile_sums, tiles, base, smem, items);
        T total;
        const T before = block_exclusive(thread_sum(items), &total);
        store_tile(tile_sums, tiles, base, smem, items, scan_add(carry, before), 1);
        carry = scan_add(carry, total);
    }
}

template <typename T>
__device__ __forceinline__ void scan_tiles_seeded(index_t n, const T *x, T *out,
                                                  const T *tile_prefix, int exclusive) {
    __shared__ T smem[SCAN_SMEM_WORDS];
    T items[SCAN_ITEMS];
    const index_t base = static_cast<index_t>(blockIdx.x) * SCAN_TILE;
    load_tile(x, n, base, smem, items);
    T total;
    const T before = block_exclusive(thread_sum(items), &total);
    store_tile(out, n, base, smem, items, scan_add(tile_prefix[blockIdx.x], before), exclusive);
}

#define REDUCE_PARAMS(T) (index_t n, const T *__restrict__ x, T *__restrict__ tile_sums)
#define SUMS_PARAMS(T) (index_t tiles, T *tile_sums)
#define SEEDED_PARAMS(T) \
    (index_t n, const T *__restrict__ x, T *__restrict__ out, const T *tile_prefix, int exclusive)
SCAN_ENTRIES(scan_reduce_tiles, REDUCE_PARAMS, (n, x, tile_sums))
SCAN_ENTRIES(scan_tile_sums, SUMS_PARAMS, (tiles, tile_sums))
SCAN_ENTRIES(scan_tiles_seeded, SEEDED_PARAMS, (n, x, out, tile_prefix, exclusive))
