// Step 5, the single pass made wide: a warp looks back over 32 predecessors at once, and each
// tile is twice as big and moves through 16-byte loads and stores.
//
// Step 4's time goes to waiting, not to moving bytes. Its thread 0 walks the predecessors one
// descriptor at a time, and each read is a dependent L2 round trip (LDG.E.64.STRONG.SYS, a
// few hundred cycles), so a walk over k aggregates costs k round trips while the block holds
// its SM slot with no load in flight. Its tile is 2048 elements (8 KiB of fp32), read by 8
// scalar LDG a thread, so even 8 resident blocks keep at most 64 KiB an SM in flight, and
// only while all of them are loading at once.
// Here warp 0 does the look-back: lane l reads the descriptor of tile - 1 - l, so one round
// trip covers 32 predecessors; __ballot_sync finds the nearest inclusive prefix (the lowest
// lane holding one) and whether any lane up to it is still empty (those lanes re-read, the
// rest wait); the lanes up to it are summed by a shuffle scan. One window almost always
// suffices. The tile is SCAN05_ITEMS elements a thread (16: 4096 elements, 16 KiB of fp32):
// each round trip is paid once per twice the bytes, and a full, 16-byte-aligned tile moves
// through SCAN05_ITEMS / 4 LDG.E.128 and as many STG.E.128 a thread, consecutive threads on
// consecutive 16 bytes, staged through the padded shared tile into each thread's consecutive
// elements. The last partial tile, or a pointer off 16-byte alignment, takes step 4's scalar
// path (every element bounds-checked).
// Publishing is step 4's: one 64-bit descriptor per tile, status and value in one store.
// Bytes: read n x 4, write n x 4, plus 8 bytes a tile of descriptors: the floor, as step 4.
// Proof: smsp__inst_executed_op_global_ld.sum falls against step 4 (a quarter of the data
// loads, and one warp-wide descriptor read per window instead of one per predecessor).
// SCAN05_ITEMS is a multiple of 4; steps.ITEM_CANDIDATES lists the ones worth timing.
#include "common.cuh"

#ifndef SCAN05_ITEMS
#define SCAN05_ITEMS 16
#endif
#define WIDE_ITEMS SCAN05_ITEMS
#define WIDE_TILE (SCAN_THREADS * WIDE_ITEMS)
#define WIDE_VECTORS (WIDE_ITEMS / 4)  // 16-byte loads (and stores) a thread
static_assert(WIDE_ITEMS % 4 == 0 && WIDE_ITEMS >= 4, "SCAN05_ITEMS: a multiple of 4");

template <typename T>
struct __align__(16) Pack4 {
    T v[4];
};

// x[base, base + WIDE_TILE) into shared memory and each thread's WIDE_ITEMS consecutive
// elements into registers; past n reads as 0. `vector`: a full tile at a 16-byte boundary.
template <typename T>
__device__ __forceinline__ void load_wide(const T *x, index_t n, index_t base, bool vector,
                                          T *smem, T (&items)[WIDE_ITEMS]) {
    if (vector) {
        const Pack4<T> *packs = reinterpret_cast<const Pack4<T> *>(x + base);
        Pack4<T> loaded[WIDE_VECTORS];
#pragma unroll
        for (int k = 0; k < WIDE_VECTORS; ++k)  // every load issued before the first store
            loaded[k] = packs[k * SCAN_THREADS + threadIdx.x];
#pragma unroll
        for (int k = 0; k < WIDE_VECTORS; ++k) {
            const int i = 4 * (k * SCAN_THREADS + threadIdx.x);
#pragma unroll
            for (int j = 0; j < 4; ++j) smem[PADDED(i + j)] = loaded[k].v[j];
        }
    } else {
#pragma unroll
        for (int k = 0; k < WIDE_ITEMS; ++k) {
            const int i = k * SCAN_THREADS + threadIdx.x;
            smem[PADDED(i)] = base + i < n ? x[base + i] : T(0);
        }
    }
    __syncthreads();
#pragma unroll
    for (int k = 0; k < WIDE_ITEMS; ++k) items[k] = smem[PADDED(threadIdx.x * WIDE_ITEMS + k)];
}

// Scan this thread's elements from `running`, stage them, write them back: 16-byte stores for
// a vector tile, bounds-checked scalar ones otherwise.
template <typename T>
__device__ __forceinline__ void store_wide(T *out, index_t n, index_t base, bool vector,
                                           T *smem, const T (&items)[WIDE_ITEMS], T running,
                                           int exclusive) {
#pragma unroll
    for (int k = 0; k < WIDE_ITEMS; ++k) {
        const T next = scan_add(running, items[k]);
        smem[PADDED(threadIdx.x * WIDE_ITEMS + k)] = exclusive ? running : next;
        running = next;
    }
    __syncthreads();
    if (vector) {
        Pack4<T> *packs = reinterpret_cast<Pack4<T> *>(out + base);
#pragma unroll
        for (int k = 0; k < WIDE_VECTORS; ++k) {
            const int i = 4 * (k * SCAN_THREADS + threadIdx.x);
            Pack4<T> stored;
#pragma unroll
            for (int j = 0; j < 4; ++j) stored.v[j] = smem[PADDED(i + j)];
            packs[k * SCAN_THREADS + threadIdx.x] = stored;
        }
    } else {
#pragma unroll
        for (int k = 0; k < WIDE_ITEMS; ++k) {
            const int i = k * SCAN_THREADS + threadIdx.x;
            if (base + i < n) out[base + i] = smem[PADDED(i)];
        }
    }
}

// The sum of every tile before `tile` (tile >= 1), by the 32 lanes of one warp; the answer is
// in lane 31. Lane l watches tile window - l; a lane before tile 0 reads as a prefix of 0, so
// no lane reads out of bounds (tile 0 always holds a prefix, so such lanes are never summed).
template <typename T>
__device__ __forceinline__ T warp_look_back(volatile descriptor_t *descriptors, index_t tile) {
    const int lane = threadIdx.x % 32;
    T prefix = T(0);
    for (index_t window = tile - 1;; window -= 32) {
        const index_t j = window - lane;
        descriptor_t word = j >= 0 ? descriptors[j] : pack(STATUS_PREFIX, T(0));
        unsigned upto, prefixes;  // the lanes to sum: 0 up to the nearest prefix, or all 32
        for (;;) {
            const unsigned empty = __ballot_sync(FULL_MASK, (word >> 32) == STATUS_EMPTY);
            prefixes = __ballot_sync(FULL_MASK, (word >> 32) == STATUS_PREFIX);
            upto = prefixes ? (prefixes & (0u - prefixes)) * 2u - 1u : FULL_MASK;
            if ((empty & upto) == 0) break;  // every lane up to the nearest prefix has a value
            if ((word >> 32) == STATUS_EMPTY) word = descriptors[j];
        }
        T value = (upto >> lane) & 1u ? unpack<T>(word) : T(0);
#pragma unroll
        for (int offset = 1; offset < 32; offset <<= 1) {
            const T up = __shfl_up_sync(FULL_MASK, value, offset);
            if (lane >= offset) value = scan_add(up, value);
        }
        prefix = scan_add(value, prefix);  // lane 31: this window's sum before the later ones
        if (prefixes) return prefix;
    }
}

template <typename T>
__device__ __forceinline__ void scan_wide(index_t n, const T *x, T *out,
                                          descriptor_t *descriptors, descriptor_t *counter,
                                          int exclusive) {
    __shared__ T smem[PADDED(WIDE_TILE)];
    __shared__ index_t tile_id;
    __shared__ T tile_prefix;
    if (threadIdx.x == 0) tile_id = static_cast<index_t>(atomicAdd(counter, 1ull));
    __syncthreads();
    const index_t tile = tile_id;
    const index_t base = tile * WIDE_TILE;
    const bool aligned = ((reinterpret_cast<unsigned long long>(x) |
                           reinterpret_cast<unsigned long long>(out)) & 15ull) == 0;
    const bool vector = aligned && base + WIDE_TILE <= n;
    T items[WIDE_ITEMS];
    load_wide(x, n, base, vector, smem, items);
    T sum = items[0];
#pragma unroll
    for (int k = 1; k < WIDE_ITEMS; ++k) sum = scan_add(sum, items[k]);
    T total;
    const T before = block_exclusive(sum, &total);
    if (threadIdx.x < 32) {  // warp 0; lane 31 publishes, so its two stores keep their order
        volatile descriptor_t *published = descriptors;
        if (tile == 0) {
            if (threadIdx.x == 31) {
                published[0] = pack(STATUS_PREFIX, total);
                tile_prefix = T(0);
            }
        } else {
            if (threadIdx.x == 31) published[tile] = pack(STATUS_AGGREGATE, total);
            const T prefix = warp_look_back<T>(published, tile);
            if (threadIdx.x == 31) {
                published[tile] = pack(STATUS_PREFIX, scan_add(prefix, total));
                tile_prefix = prefix;
            }
        }
    }
    __syncthreads();
    store_wide(out, n, base, vector, smem, items, scan_add(tile_prefix, before), exclusive);
}

#define WIDE_PARAMS(T)                                                                       \
    (index_t n, const T *__restrict__ x, T *__restrict__ out, descriptor_t *descriptors,     \
     descriptor_t *counter, int exclusive)
SCAN_ENTRIES(scan_wide, WIDE_PARAMS, (n, x, out, descriptors, counter, exclusive))
