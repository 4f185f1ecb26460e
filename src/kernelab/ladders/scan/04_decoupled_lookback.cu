// Step 4, single pass with decoupled look-back (Merrill & Garland, "Single-pass Parallel
// Prefix Scan with Decoupled Look-back", NVIDIA technical report NVR-2016-002).
//
// One kernel. Each block takes the next tile id from a global counter (so every tile below
// it belongs to a block that has already started: the look-back cannot wait on a block that
// never runs), scans its tile as step 3 does, and publishes through one 64-bit descriptor
// per tile: the high word a status (0 nothing yet, 1 the tile's aggregate, 2 its inclusive
// prefix), the low word the value's bits. Value and status travel in one 64-bit store, so
// a reader that sees the status sees its value: no fence is needed between them (with
// separate flag and value words, a __threadfence would have to order the value first).
// Thread 0 publishes the aggregate at once, then walks back over the predecessors' volatile
// descriptors: it spins while one is empty, adds an aggregate and keeps walking, adds an
// inclusive prefix and stops. Then it publishes its own inclusive prefix and the block
// finishes the tile. Most walks stop after one or two tiles, long before tile 0.
// Bytes: read n x 4 once, write n x 4 once, plus 8 bytes a tile of descriptors (zeroed by
// the caller before each launch): the floor, 2n x 4.
// Proof: dram__bytes.sum falls against step 3 (2n x 4 against 3n x 4).
#include "common.cuh"

// The sum of every tile before `tile` (tile >= 1), read from the predecessors' descriptors.
template <typename T>
__device__ __forceinline__ T look_back(volatile descriptor_t *descriptors, index_t tile) {
    T prefix = T(0);
    for (index_t j = tile - 1;; --j) {
        descriptor_t word;
        do {
            word = descriptors[j];
        } while ((word >> 32) == STATUS_EMPTY);
        prefix = scan_add(unpack<T>(word), prefix);
        if ((word >> 32) == STATUS_PREFIX) return prefix;
    }
}

template <typename T>
__device__ __forceinline__ void scan_lookback(index_t n, const T *x, T *out,
                                              descriptor_t *descriptors, descriptor_t *counter,
                                              int exclusive) {
    __shared__ T smem[SCAN_SMEM_WORDS];
    __shared__ index_t tile_id;
    __shared__ T tile_prefix;
    if (threadIdx.x == 0) tile_id = static_cast<index_t>(atomicAdd(counter, 1ull));
    __syncthreads();
    const index_t tile = tile_id;
    const index_t base = tile * SCAN_TILE;
    T items[SCAN_ITEMS];
    load_tile(x, n, base, smem, items);
    T total;
    const T before = block_exclusive(thread_sum(items), &total);
    if (threadIdx.x == 0) {
        volatile descriptor_t *published = descriptors;
        if (tile == 0) {
            published[0] = pack(STATUS_PREFIX, total);
            tile_prefix = T(0);
        } else {
            published[tile] = pack(STATUS_AGGREGATE, total);
            const T prefix = look_back<T>(published, tile);
            published[tile] = pack(STATUS_PREFIX, scan_add(prefix, total));
            tile_prefix = prefix;
        }
    }
    __syncthreads();
    store_tile(out, n, base, smem, items, scan_add(tile_prefix, before), exclusive);
}

#define LOOKBACK_PARAMS(T)                                                                   \
    (index_t n, const T *__restrict__ x, T *__restrict__ out, descriptor_t *descriptors,     \
     descriptor_t *counter, int exclusive)
SCAN_ENTRIES(scan_lookback, LOOKBACK_PARAMS, (n, x, out, descriptors, counter, exclusive))
