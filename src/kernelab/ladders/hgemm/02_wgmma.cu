// kernelab-arch: sm_90a
// Step 02, Hopper's own tensor-core instruction: wgmma.mma_async m64n128k16, issued by one
// warpgroup (4 warps) with both operands read straight from shared memory through 64-bit
// matrix descriptors. No ldmatrix, no fragments in registers: the registers hold only the
// accumulators (2 x 64 fp32 per lane).
//
// Block tile 128 x 128 x 64, one warpgroup: per k16 two wgmma (rows 0-63 and 64-127 of the
// tile) against the same 128 x 16 slice of B, 4 k16 steps per K-tile, 8 wgmma = 4.2 MFLOP
// per K-tile per block.
// Layout: A [128 rows][64 k] and B^T [128 n][64 k], bf16, K-major, one 128-byte row per
// M (or N) index, in the 128-byte swizzle (chunk c of row r at chunk c ^ (r % 8)); tiles
// 1024-byte aligned. cp.async writes that swizzle here; step 03 has TMA write it.
// Pipeline: 3 stages of 32 KiB (A 16 KiB + B 16 KiB), cp.async with zero-fill at the edges;
// wgmma of tile k runs while tiles k+1 and k+2 are in flight; each K-tile waits for its
// wgmma group to finish (wait_group 0) before the slot is refilled.
// Launch: block 128, grid (ceil(N/128), ceil(M/128)), dynamic shared memory
// 3 x 32,768 + 1,024 (alignment slack) = 99,328 bytes.
#include "common.cuh"

constexpr int BM = 128, BN = 128, BK = 64, STAGES = 3, THREADS = 128;
constexpr int A_TILE_BYTES = BM * BK * 2, B_TILE_BYTES = BN * BK * 2;  // 16 KiB each
constexpr int CHUNKS_PER_ROW = BK * 2 / 16;                             // 8 x 16 bytes
static_assert(BK * 2 == 128, "one swizzle row of 128 bytes per M/N index");

extern "C" __global__ void __launch_bounds__(THREADS)
    hgemm_wgmma(int M, int N, int K, const bf16 *__restrict__ A, int lda,
                const bf16 *__restrict__ Bt, int ldb, bf16 *__restrict__ C, int ldc) {
    extern __shared__ __align__(16) unsigned char smem_raw[];
    unsigned char *smem = aligned_dynamic_smem<1024>(smem_raw);
    unsigned char *sA = smem;                          // STAGES x A tile
    unsigned char *sB = smem + STAGES * A_TILE_BYTES;  // STAGES x B^T tile

    const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
    const int tid = threadIdx.x;
    const int k_tiles = (K + BK - 1) / BK;

    // 1024 chunks of A and 1024 of B^T per K-tile: 8 + 8 cp.async of 16 bytes per thread,
    // each stored at its swizzled place.
    auto load_tile = [&](int kt, int slot) {
        const int k0 = kt * BK;
        unsigned char *a_dst = sA + slot * A_TILE_BYTES;
        unsigned char *b_dst = sB + slot * B_TILE_BYTES;
#pragma unroll
        for (int i = tid; i < BM * CHUNKS_PER_ROW; i += THREADS) {
            const int r = i / CHUNKS_PER_ROW, c = i % CHUNKS_PER_ROW;
            cp_async_row8(a_dst + swizzle_128b_offset(r, c), A, lda, row0 + r, k0 + c * 8, M, K);
        }
#pragma unroll
        for (int i = tid; i < BN * CHUNKS_PER_ROW; i += THREADS) {
            const int r = i / CHUNKS_PER_ROW, c = i % CHUNKS_PER_ROW;
            cp_async_row8(b_dst + swizzle_128b_offset(r, c), Bt, ldb, col0 + r, k0 + c * 8, N, K);
        }
    };

    float acc_top[64], acc_bottom[64];  // rows 0-63 and 64-127 of the block tile
#pragma unroll
    for (int i = 0; i < 64; ++i) acc_top[i] = acc_bottom[i] = 0.0f;

#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < k_tiles) load_tile(s, s);
        cp_async_commit();
    }

    for (int kt = 0; kt < k_tiles; ++kt) {
        cp_async_wait<STAGES - 2>();
        fence_proxy_async();  // this thread's cp.async bytes, visible to wgmma's async reads
        __syncthreads();      // everyone's; and every warp finished the wgmma of kt - 1
        const int next = kt + STAGES - 1;
        if (next < k_tiles) load_tile(next, next % STAGES);
        cp_async_commit();

        const unsigned char *a_s = sA + (kt % STAGES) * A_TILE_BYTES;
        const unsigned char *b_s = sB + (kt % STAGES) * B_TILE_BYTES;
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < BK / 16; ++kk) {
            const int k_bytes = kk * 32;  // 16 bf16 further along the 128-byte row
            const uint64_t desc_b = smem_desc_128b(b_s + k_bytes);
            wgmma_m64n128k16(acc_top, smem_desc_128b(a_s + k_bytes), desc_b);
            wgmma_m64n128k16(acc_bottom, smem_desc_128b(a_s + 64 * 128 + k_bytes), desc_b);
        }
        wgmma_commit();
        wgmma_wait<0>();
    }
    cp_async_wait<0>();

    store_m64n128(C, ldc, row0, col0, M, N, acc_top);
    store_m64n128(C, ldc, row0 + 64, col0, M, N, acc_bottom);
}
