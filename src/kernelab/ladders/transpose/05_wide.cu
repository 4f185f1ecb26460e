// Step 5, wide: each thread moves pairs of elements, so every global load and store of a warp
// is 32 pairs wide: 128 bytes in bf16 (4-byte pairs), 256 in fp32 (8-byte pairs).
//
// Steps 1-4 move one element per thread. In fp32 a warp's row is 32 x 4 = 128 bytes, one
// full line; in bf16 it is 32 x 2 = 64 bytes, two sectors: every request carries half a line,
// and a byte costs twice the load, store and shared-memory instructions of fp32.
//
// The tile grows to 64 x 64 elements, still 32 x 8 threads. Loading, thread x reads the pair
// at columns 2x, 2x+1 of two consecutive input rows 2i and 2i+1 (a, b: one wide load each).
// Four elements: a 2 x 2 block. Transposed in registers, it is two pairs that belong together
// in the output, column 2x's rows (2i, 2i+1) and column 2x+1's rows (2i, 2i+1):
//     col 2x   = low(a) | low(b) << bits      col 2x+1 = high(a) | high(b) << bits
// Shared memory holds pairs: tile[i][slot] is one tile column's rows 2i and 2i+1, so the
// store phase reads one pair and writes it as one wide store: output row c, columns 2x, 2x+1.
//
// The layout. Tile column c of pair row i sits at slot ((c & 1) * 32 + (c >> 1)) ^ i: even
// columns in slots 0-31, odd ones in 32-63, each half XOR-swizzled by the row as in step 4.
// Banks (32 of 4 bytes; a pair row is 64 slots, a multiple of the banks, so only the slot
// within the row counts):
//   bf16, 4-byte pairs, one bank each. Writing pair row i, the warp's first store fills
//   slots x ^ i (x = 0..31): 32 different banks; its second 32 + (x ^ i): again. Reading
//   column c down the pair rows, thread x reads tile[x][... + ((c >> 1) ^ x)]: banks
//   (c >> 1) ^ x, all different. Without the split into halves, the first store would write
//   columns 2x, slots (2x) ^ i, and x and x + 16 would share a bank: 2-way on every store.
//   fp32, 8-byte pairs, two banks each: a warp's 256 bytes take two passes, one per half-warp,
//   and within a half (16 threads) the slots x ^ i and (c >> 1) ^ x differ mod 16: 16
//   different bank pairs, conflict-free as well.
// Each thread issues all 8 of its pair loads before its first shared store (8 in flight, 4x
// the bytes of step 4's 4 element loads in bf16), and the entries ask for 8 blocks an SM, so
// ptxas keeps 32 registers: unbounded it took 40, and 6 blocks an SM.
// Pairs need alignment: the loads go wide when cols is even and `in` is aligned to a pair (then
// every pair starts at an even offset), the stores when rows is even and `out` is; otherwise
// that side moves single elements into and out of the same layout (odd shapes, or a view that
// starts mid-pair).
// Proof: l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum (one request per warp load
// instruction) halves against step 4 in both dtypes; the sectors stay the same (every byte
// was already used), so the sectors per request double: 2 -> 4 (bf16), 4 -> 8 (fp32).
#include "common.cuh"

#define SIDE (2 * TILE)  // the tile's side in elements: 64 x 64

#ifdef KERNELAB_HOST_EMULATION  // on the CPU: plain accesses that fault where a GPU would
template <typename V>
inline void must_align(const V *p) {
    if (reinterpret_cast<size_t>(p) % sizeof(V)) kernelab_emu::fault("misaligned access", p);
}
template <typename V>
inline V __ldg(const V *p) { must_align(p); return *p; }
template <typename V>
inline void put(V *p, V v) { must_align(p); *p = v; }
#else
template <typename V>
__device__ __forceinline__ void put(V *p, V v) { *p = v; }
#endif

template <typename T>
struct Wide;
template <>
struct Wide<float> {  // moved as bits: an element is 32 bits, a pair 64
    typedef unsigned element;
    typedef unsigned long long pair;
};
template <>
struct Wide<bf16_bits> {
    typedef unsigned short element;
    typedef unsigned pair;
};

// The pair in[r, c], in[r, c + 1] (c even); zeros past the matrix (never stored).
template <typename E, typename P>
__device__ __forceinline__ P load_pair(const E *in, int rows, int cols, int r, int c,
                                       bool wide) {
    if (r >= rows || c >= cols) return 0;
    const size_t at = static_cast<size_t>(r) * cols + c;
    if (wide) return __ldg(reinterpret_cast<const P *>(in + at));  // cols even: c + 1 < cols
    const P high = c + 1 < cols ? static_cast<P>(__ldg(in + at + 1)) : 0;
    return static_cast<P>(__ldg(in + at)) | (high << (8 * sizeof(E)));
}

// out[r, c], out[r, c + 1] = v's low and high elements (c even; out is [cols, rows]).
template <typename E, typename P>
__device__ __forceinline__ void store_pair(E *out, int rows, int r, int c, P v, bool wide) {
    if (c >= rows) return;
    const size_t at = static_cast<size_t>(r) * rows + c;
    if (wide) {
        put(reinterpret_cast<P *>(out + at), v);  // rows even: c + 1 < rows
        return;
    }
    put(out + at, static_cast<E>(v));
    if (c + 1 < rows) put(out + at + 1, static_cast<E>(v >> (8 * sizeof(E))));
}

template <typename T>
__device__ __forceinline__ void transpose_wide(TRANSPOSE_ARGS) {
    typedef typename Wide<T>::element E;
    typedef typename Wide<T>::pair P;
    constexpr int bits = 8 * sizeof(E);
    constexpr P low = (static_cast<P>(1) << bits) - 1;
    __shared__ P tile[TILE][SIDE];  // [pair row i][slot]: 8 KB bf16, 16 KB fp32
    const E *src = reinterpret_cast<const E *>(in);  // moved as bits
    E *dst = reinterpret_cast<E *>(out);
    const bool wide_in = cols % 2 == 0 && reinterpret_cast<size_t>(in) % sizeof(P) == 0;
    const bool wide_out = rows % 2 == 0 && reinterpret_cast<size_t>(out) % sizeof(P) == 0;
    const int x = threadIdx.x;
    const int in_c = blockIdx.x * SIDE + 2 * x;
    constexpr int n = TILE / BLOCK_ROWS;  // pair rows per thread: i = threadIdx.y + 8k
    P a[n], b[n];  // every load issued before the first is used: 8 in flight a thread
#pragma unroll
    for (int k = 0; k < n; ++k) {
        const int in_r = blockIdx.y * SIDE + 2 * (threadIdx.y + k * BLOCK_ROWS);  // rows 2i, 2i+1
        a[k] = load_pair<E, P>(src, rows, cols, in_r, in_c, wide_in);
        b[k] = load_pair<E, P>(src, rows, cols, in_r + 1, in_c, wide_in);
    }
#pragma unroll
    for (int k = 0; k < n; ++k) {
        const int i = threadIdx.y + k * BLOCK_ROWS;  // the 2 x 2 block, transposed
        tile[i][x ^ i] = (a[k] & low) | (b[k] << bits);            // column 2x: rows 2i, 2i + 1
        tile[i][(TILE + x) ^ i] = (a[k] >> bits) | (b[k] & ~low);  // column 2x + 1
    }
    __syncthreads();
    const int out_c = blockIdx.y * SIDE + 2 * x;  // the input rows this thread's pair holds
    for (int j = 0; j < SIDE; j += BLOCK_ROWS) {
        const int c = threadIdx.y + j;  // the tile column this output row reads
        const int out_r = blockIdx.x * SIDE + c;
        if (out_r < cols)
            store_pair<E, P>(dst, rows, out_r, out_c, tile[x][((c & 1) * TILE + (c >> 1)) ^ x],
                             wide_out);
    }
}

// 8 blocks (2048 threads) an SM: ptxas keeps 32 registers (40 unbounded, 6 blocks an SM).
TRANSPOSE_ENTRIES_BOUNDED(transpose_wide, TILE * BLOCK_ROWS, 8)
