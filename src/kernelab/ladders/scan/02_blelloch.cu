// Step 2, Blelloch's work-efficient scan: 256 threads scan a tile of 512 elements.
//
// An up-sweep builds a reduction tree in place (511 adds), the root is cleared, and a
// down-sweep pushes prefixes back down (511 adds and swaps): O(n) work where step 1 did
// O(n log n), and each thread owns two elements, so a block covers twice the tile. The
// tree's strided accesses would hit one bank 2^d times at depth d; one pad word every 32
// (index i + i / 32) spreads them. The down-sweep yields the exclusive scan; inclusive adds
// the element back. Tiles are joined as in step 1 (scan the tile sums, add the offsets).
// Bytes: as step 1 with tiles twice as long: about 4n x 4 bytes, n / 512 sums a level.
// Proof: smsp__inst_executed_op_shared_st.sum falls against step 1: per 512 elements, 16
// warp-wide stores to stage them, 20 in the up-sweep and 40 in the down-sweep (a level with
// d active threads issues from ceil(d / 32) warps), 1 to clear the root: about 5 per 32
// elements against step 1's 9.
#include "common.cuh"

#define BL_TILE (2 * SCAN_THREADS)

template <typename T>
__device__ __forceinline__ void scan_blelloch(index_t n, const T *x, T *out, T *tile_sums,
                                              int exclusive) {
    __shared__ T tree[PADDED(BL_TILE)];
    const int t = threadIdx.x;
    const index_t base = static_cast<index_t>(blockIdx.x) * BL_TILE;
    // Coalesced: element t and t + 256 of the tile.
    const int a = t, b = t + SCAN_THREADS;
    const T value_a = base + a < n ? x[base + a] : T(0);
    const T value_b = base + b < n ? x[base + b] : T(0);
    tree[PADDED(a)] = value_a;
    tree[PADDED(b)] = value_b;
    int offset = 1;
    for (int d = BL_TILE / 2; d > 0; d >>= 1) {  // up-sweep
        __syncthreads();
        if (t < d) {
            const int left = offset * (2 * t + 1) - 1, right = offset * (2 * t + 2) - 1;
            tree[PADDED(right)] = scan_add(tree[PADDED(left)], tree[PADDED(right)]);
        }
        offset <<= 1;
    }
    __syncthreads();
    if (t == 0) {
        tile_sums[blockIdx.x] = tree[PADDED(BL_TILE - 1)];
        tree[PADDED(BL_TILE - 1)] = T(0);
    }
    for (int d = 1; d < BL_TILE; d <<= 1) {  // down-sweep
        offset >>= 1;
        __syncthreads();
        if (t < d) {
            const int left = offset * (2 * t + 1) - 1, right = offset * (2 * t + 2) - 1;
            const T carried = tree[PADDED(left)];
            tree[PADDED(left)] = tree[PADDED(right)];
            tree[PADDED(right)] = scan_add(carried, tree[PADDED(right)]);
        }
    }
    __syncthreads();
    const T before_a = tree[PADDED(a)], before_b = tree[PADDED(b)];
    if (base + a < n) out[base + a] = exclusive ? before_a : scan_add(before_a, value_a);
    if (base + b < n) out[base + b] = exclusive ? before_b : scan_add(before_b, value_b);
}

template <typename T>
__device__ __forceinline__ void scan_blelloch_offsets(index_t n, T *out, const T *offsets) {
    add_offsets<T, BL_TILE>(n, out, offsets);
}

// x and out may be the same buffer (the tile sums are scanned in place): no __restrict__.
#define BL_PARAMS(T) (index_t n, const T *x, T *out, T *tile_sums, int exclusive)
#define OFFSETS_PARAMS(T) (index_t n, T *out, const T *offsets)
SCAN_ENTRIES(scan_blelloch, BL_PARAMS, (n, x, out, tile_sums, exclusive))
SCAN_ENTRIES(scan_blelloch_offsets, OFFSETS_PARAMS, (n, out, offsets))
