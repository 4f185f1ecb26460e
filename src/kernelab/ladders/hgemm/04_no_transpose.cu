// kernelab-arch: sm_90a
// Step 04, no transpose: B is read as it is stored, B[K, N] with N innermost. Steps 02-03
// needed B^T[N, K] (both operands K-major) and the launcher paid a full read and write of B
// on every call, ~124 us of ~336 us at 4096^3 on the H200. Here TMA copies boxes of
// 64 k x 64 n straight from B[K, N] (one 128-byte row of n per k, 128-byte swizzle) and wgmma
// reads them N-major: imm-trans-b = 1 (allowed for bf16) with the MN-major descriptor, whose
// LBO is the distance between 64-wide n atoms (the next box) and whose SBO is the distance
// between groups of 8 k (1024 bytes); smem_desc_128b_mn in common.cuh spells it out.
//
// Everything else is step 03, so the two can be compared: block 128 x 128 x 64, one
// warpgroup, 2 x wgmma m64n128k16 per k16, 3 stages of 32 KiB (A 16 KiB as one 128 x 64 box,
// B 16 KiB as two 64 x 64 boxes), 2 blocks per SM, a block barrier frees each stage.
// B stage layout: box j (columns col0 + 64j ..) at j x 8 KiB; inside a box, k row r at
// r x 128 bytes. k16 step kk starts at kk x 16 rows x 128 = kk x 2048 bytes.
// Launch: block 128, grid (ceil(N/128), ceil(M/128)), dynamic shared memory
// 3 x 32,768 + 1,024 (alignment slack) = 99,328 bytes.
#include <cuda.h>

#include "common.cuh"

constexpr int BM = 128, BN = 128, BK = 64, STAGES = 3, THREADS = 128;
constexpr int B_BOX_N = 64;                        // 128 bytes of n: the swizzle span
constexpr int B_BOX_BYTES = BK * B_BOX_N * 2;      // 8 KiB: one n atom of the descriptor
constexpr int A_TILE_BYTES = BM * BK * 2;          // 16 KiB
constexpr int B_TILE_BYTES = BN / B_BOX_N * B_BOX_BYTES;  // 16 KiB
static_assert(BK % 16 == 0 && BN % B_BOX_N == 0, "whole k16 steps and whole n atoms");

extern "C" __global__ void __launch_bounds__(THREADS)
    hgemm_no_transpose(const __grid_constant__ CUtensorMap map_a,
                       const __grid_constant__ CUtensorMap map_b, int M, int N, int K,
                       bf16 *__restrict__ C, int ldc) {
    extern __shared__ __align__(16) unsigned char smem_raw[];
    __shared__ __align__(8) uint64_t full[STAGES];
    unsigned char *smem = aligned_dynamic_smem<1024>(smem_raw);
    unsigned char *sA = smem;
    unsigned char *sB = smem + STAGES * A_TILE_BYTES;

    const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
    const int k_tiles = (K + BK - 1) / BK;
    const bool issuer = threadIdx.x == 0;
    // B boxes wholly right of N are not loaded: their columns of C are never stored, and
    // whatever the slot holds there only reaches those columns' accumulators.
    const int b_boxes = min(BN / B_BOX_N, (N - col0 + B_BOX_N - 1) / B_BOX_N);
    const uint32_t stage_bytes = A_TILE_BYTES + b_boxes * B_BOX_BYTES;

    // Box coordinates run innermost first: (k, row) for A, (n, k) for B.
    auto issue = [&](int kt, int slot) {
        mbarrier_arrive_expect_tx(&full[slot], stage_bytes);
        tma_load_2d(sA + slot * A_TILE_BYTES, &map_a, kt * BK, row0, &full[slot]);
        for (int j = 0; j < b_boxes; ++j) {
            tma_load_2d(sB + slot * B_TILE_BYTES + j * B_BOX_BYTES, &map_b, col0 + j * B_BOX_N,
                        kt * BK, &full[slot]);
        }
    };

    if (issuer) {
#pragma unroll
        for (int s = 0; s < STAGES; ++s) mbarrier_init(&full[s], 1);
        fence_barrier_init();
    }
    __syncthreads();
    if (issuer) {
        for (int s = 0; s < STAGES && s < k_tiles; ++s) issue(s, s);
    }

    float acc_top[64], acc_bottom[64];
#pragma unroll
    for (int i = 0; i < 64; ++i) acc_top[i] = acc_bottom[i] = 0.0f;

    for (int kt = 0; kt < k_tiles; ++kt) {
        const int slot = kt % STAGES;
        mbarrier_wait(&full[slot], (kt / STAGES) & 1);  // the (kt / STAGES)-th fill of slot

        const unsigned char *a_s = sA + slot * A_TILE_BYTES;
        const unsigned char *b_s = sB + slot * B_TILE_BYTES;
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < BK / 16; ++kk) {
            const uint64_t desc_b = smem_desc_128b_mn(b_s + kk * 16 * 128, B_BOX_BYTES);
            wgmma_m64n128k16<1>(acc_top, smem_desc_128b(a_s + kk * 32), desc_b);
            wgmma_m64n128k16<1>(acc_bottom, smem_desc_128b(a_s + 64 * 128 + kk * 32), desc_b);
        }
        wgmma_commit();
        wgmma_wait<0>();
        __syncthreads();  // all four warps are done reading this stage
        if (issuer && kt + STAGES < k_tiles) issue(kt + STAGES, slot);
    }

    store_m64n128(C, ldc, row0, col0, M, N, acc_top);
    store_m64n128(C, ldc, row0 + 64, col0, M, N, acc_bottom);
}
