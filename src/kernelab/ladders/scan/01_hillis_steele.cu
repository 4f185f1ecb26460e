// Step 1, Hillis-Steele in a block: one block of 256 threads scans one tile of 256 elements.
//
// log2(256) = 8 rounds; in round r every thread adds the element 2^r to its left, reading
// one shared buffer and writing the other (double-buffered, so no thread reads a value
// already overwritten this round). Simple and short-lived per round, but not work-efficient:
// 256 x 8 = 2048 adds for 256 elements where 255 suffice, each round a barrier and a shared
// read + write. The tiles are then joined by scan-then-propagate: the tile sums are scanned
// with the same kernel (recursively, until one tile is left) and a second kernel adds each
// tile's offset to its elements.
// Bytes: read n x 4, write n x 4 (the tile scan), then read and write n x 4 again (the
// offsets), plus n / 256 sums a level: about 4n x 4 bytes, twice the floor.
// Proof: smsp__inst_executed_op_shared_st.sum (warp-wide store instructions): every warp
// stores once to stage its elements and once a round, 9 per 32 elements; step 2's tree cuts it.
#include "common.cuh"

#define HS_TILE SCAN_THREADS

template <typename T>
__device__ __forceinline__ void scan_hillis_steele(index_t n, const T *x, T *out, T *tile_sums,
                                                   int exclusive) {
    __shared__ T buffer[2][HS_TILE];
    const int t = threadIdx.x;
    const index_t i = static_cast<index_t>(blockIdx.x) * HS_TILE + t;
    const T value = i < n ? x[i] : T(0);
    buffer[0][t] = value;
    __syncthreads();
    int in = 0;
#pragma unroll
    for (int offset = 1; offset < HS_TILE; offset <<= 1) {
        const T left = t >= offset ? buffer[in][t - offset] : T(0);
        buffer[in ^ 1][t] = t >= offset ? scan_add(left, buffer[in][t]) : buffer[in][t];
        in ^= 1;
        __syncthreads();
    }
    if (i < n) out[i] = exclusive ? (t > 0 ? buffer[in][t - 1] : T(0)) : buffer[in][t];
    if (t == HS_TILE - 1) tile_sums[blockIdx.x] = buffer[in][t];
}

template <typename T>
__device__ __forceinline__ void scan_hillis_steele_offsets(index_t n, T *out, const T *offsets) {
    add_offsets<T, HS_TILE>(n, out, offsets);
}

// x and out may be the same buffer (the tile sums are scanned in place): no __restrict__.
#define HS_PARAMS(T) (index_t n, const T *x, T *out, T *tile_sums, int exclusive)
#define OFFSETS_PARAMS(T) (index_t n, T *out, const T *offsets)
SCAN_ENTRIES(scan_hillis_steele, HS_PARAMS, (n, x, out, tile_sums, exclusive))
SCAN_ENTRIES(scan_hillis_steele_offsets, OFFSETS_PARAMS, (n, out, offsets))
