// The TMA-store epilogue of steps 08, 10 and 11: a consumer warpgroup's 64 x 256 bf16 slice
// goes through a swizzled staging buffer in shared memory and out with cp.async.bulk.tensor
// stores, so the warpgroup does not wait for its global writes.
//
// Layout (checked only by the GPU): the slice is four boxes of 64 rows x 64 columns (8 KiB,
// 1024-aligned), in the 128-byte swizzle TMA's SWIZZLE_128B store reads: row r, 16-byte chunk
// k at `box * 8192 + r * 128 + ((k ^ (r % 8)) << 4)`. stmatrix.x4 stores four 8x8 matrices
// whose register fragment is the wgmma accumulator's: for n8 blocks j, j+1 the registers are
// (rows 0-7, j), (rows 8-15, j), (rows 0-7, j+1), (rows 8-15, j+1), each packed bf16x2 from
// acc[4j..4j+7].
//
// The edge. TMA stores clip the inner dimension at 16-byte granularity, not per element: a
// box that ends past N also writes columns N .. the next multiple of 8 (measured on the H200:
// step 08 wrote the padding columns of a 131-column view with row stride 136; the same
// behaviour is reported for Triton's descriptor stores on H100, triton-lang/triton#11583).
// The launcher passes `exact_cols`: N when N is a multiple of 8 (16 bytes of bf16; rows start
// 16-byte aligned), else N rounded down to one. A tile reaching past exact_cols when
// exact_cols < N is stored from the registers instead (step 05's bounds-checked bf16 pairs).
#pragma once

#include <cuda.h>

#include "common.cuh"

namespace tma_store {

constexpr int SLICE_N = 256;
constexpr int BOX_N = 64;                 // 128 bytes of bf16: the swizzle span
constexpr int BOX_BYTES = 64 * BOX_N * 2;  // 64 rows x 64 columns: 8 KiB
constexpr int SLICE_BOXES = SLICE_N / BOX_N;

// Where C lives, for the copy engine (map) and for the register fallback (C, ldc).
struct Output {
    const CUtensorMap *map;
    bf16 *C;
    int ldc, M, N, exact_cols;
};

// Where a consumer's `Boxes` staged boxes live (each 1024-aligned): boxes 0 .. split - 1 at
// `first`, the others at `second`. One buffer (08, 10, 11) is `contiguous`; step 13 puts two
// boxes in its own buffer and two in the B tile of the slot its last K-tile used.
struct Staging {
    unsigned char *first, *second;
    int split;

    __device__ __forceinline__ unsigned char *box(int b) const {
        return b < split ? first + b * BOX_BYTES : second + (b - split) * BOX_BYTES;
    }
};

__device__ __forceinline__ Staging contiguous(unsigned char *buffer) {
    return Staging{buffer, buffer, SLICE_BOXES};
}

// One consumer warpgroup's 64 x 256 slice (rows row0.., columns col0..) to C. `staging` holds
// `Boxes` boxes (4: the whole slice, one round of stores; 2: two rounds, each waiting until
// the previous round's stores have read the buffer). Hardware barrier 1 + consumer.
template <int Boxes>
__device__ __forceinline__ void store_slice(const Output &out, Staging staging, int consumer,
                                            int row0, int col0, const float (&acc)[128]) {
    static_assert(SLICE_BOXES % Boxes == 0);
    constexpr int ROUNDS = SLICE_BOXES / Boxes, BLOCKS_PER_ROUND = Boxes * BOX_N / 8;
    if (col0 + SLICE_N > out.exact_cols && out.exact_cols < out.N) {
        store_accumulators<SLICE_N>(out.C, out.ldc, row0, col0, out.M, out.N, acc);
        return;
    }
    const int thread = threadIdx.x % 128, warp = thread / 32, lane = thread % 32;
    const bool leader = thread == 0;
    const int barrier = 1 + consumer;
    // stmatrix.x4: lanes 8i..8i+7 address the 8 rows of matrix i; matrices 0/1 are rows
    // 0-7 / 8-15 of n8 block j, matrices 2/3 the same rows of block j + 1.
    const int matrix = lane / 8, r = lane % 8;
    const int row = 16 * warp + 8 * (matrix & 1) + r;  // 0..63 within the slice; row % 8 = r

#pragma unroll
    for (int round = 0; round < ROUNDS; ++round) {
        if (leader) bulk_wait_read<0>();  // earlier stores have finished reading the buffer
        named_barrier_sync(barrier, 128);
#pragma unroll
        for (int j = 0; j < BLOCKS_PER_ROUND; j += 2) {
            const int n8 = round * BLOCKS_PER_ROUND + j;  // the slice's n8 block of acc
            const int block = j + (matrix >> 1);  // the n8 block within the staged boxes
            unsigned char *dst = staging.box(block / 8) + row * 128 + (((block % 8) ^ r) << 4);
            stmatrix_x4(dst, pack_bf16x2(acc[4 * n8 + 0], acc[4 * n8 + 1]),
                        pack_bf16x2(acc[4 * n8 + 2], acc[4 * n8 + 3]),
                        pack_bf16x2(acc[4 * n8 + 4], acc[4 * n8 + 5]),
                        pack_bf16x2(acc[4 * n8 + 6], acc[4 * n8 + 7]));
        }
        fence_proxy_async();  // generic-proxy writes, read next by the TMA unit
        named_barrier_sync(barrier, 128);
        if (leader && row0 < out.M) {
#pragma unroll
            for (int b = 0; b < Boxes; ++b) {
                const int col = col0 + (round * Boxes + b) * BOX_N;
                if (col < out.N) tma_store_2d(out.map, staging.box(b), col, row0);
            }
            bulk_commit();
        }
    }
}

// Step 16's epilogue in two halves. A two-box staging buffer takes a slice in two rounds, and
// step 10 runs both at the tile's end: the second waits until the TMA unit has read the
// first round's 16 KiB, with the warpgroup stopped at a barrier and no wgmma in flight. Here
// the tile's end packs both halves to bf16 (ROUND_REGS registers each), stages and stores
// the first, and keeps the second packed; the consumer stages and stores it a K-tile into
// its next tile, while that tile's wgmma run (DeferredRound in cooperative_store_gemm.cuh).
constexpr int ROUND_BOXES = 2;
constexpr int ROUND_BLOCKS = ROUND_BOXES * BOX_N / 8;  // 16 n8 blocks of the slice
constexpr int ROUND_REGS = ROUND_BLOCKS * 2;            // 4 floats a block, two per register

// Round `round`'s accumulators as bf16 pairs, in the order stage_round's stmatrix take them.
__device__ __forceinline__ void pack_round(const float (&acc)[128], int round,
                                           uint32_t (&packed)[ROUND_REGS]) {
#pragma unroll
    for (int i = 0; i < ROUND_REGS; ++i) {
        const int first = 4 * ROUND_BLOCKS * round + 2 * i;  // acc of block 16 round + i / 2
        packed[i] = pack_bf16x2(acc[first], acc[first + 1]);
    }
}

// One round of a two-box staging: wait until the buffer's previous stores have read it,
// stmatrix the round's packed values (columns col0 + 128 round ..), then its TMA stores, as
// one round of store_slice<2>. Hardware barrier 1 + consumer.
__device__ __forceinline__ void stage_round(const Output &out, unsigned char *buffer,
                                            int consumer, int row0, int col0, int round,
                                            const uint32_t (&packed)[ROUND_REGS]) {
    const int thread = threadIdx.x % 128, warp = thread / 32, lane = thread % 32;
    const bool leader = thread == 0;
    const int barrier = 1 + consumer;
    const int matrix = lane / 8, r = lane % 8;
    const int row = 16 * warp + 8 * (matrix & 1) + r;
    if (leader) bulk_wait_read<0>();
    named_barrier_sync(barrier, 128);
#pragma unroll
    for (int j = 0; j < ROUND_BLOCKS; j += 2) {
        const int block = j + (matrix >> 1);
        unsigned char *dst = buffer + (block / 8) * BOX_BYTES + row * 128 + (((block % 8) ^ r) << 4);
        stmatrix_x4(dst, packed[2 * j], packed[2 * j + 1], packed[2 * j + 2], packed[2 * j + 3]);
    }
    fence_proxy_async();
    named_barrier_sync(barrier, 128);
    if (leader && row0 < out.M) {
#pragma unroll
        for (int b = 0; b < ROUND_BOXES; ++b) {
            const int col = col0 + (round * ROUND_BOXES + b) * BOX_N;
            if (col < out.N) tma_store_2d(out.map, buffer + b * BOX_BYTES, col, row0);
        }
        bulk_commit();
    }
}

// Whether a slice must be stored from the registers (it reaches past exact_cols, see above).
__device__ __forceinline__ bool needs_register_store(const Output &out, int col0) {
    return col0 + SLICE_N > out.exact_cols && out.exact_cols < out.N;
}

}  // namespace tma_store
