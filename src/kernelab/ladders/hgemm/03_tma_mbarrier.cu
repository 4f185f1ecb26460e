// kernelab-arch: sm_90a
// Step 03, the copy engine: TMA (cp.async.bulk.tensor) moves each K-tile of A and B^T into
// shared memory, already in the 128-byte swizzle wgmma reads, and signals an mbarrier with
// the bytes it delivered. One thread issues two instructions per K-tile where step 02 had
// 128 threads issue 16 cp.async each; out-of-bounds parts of a box arrive as zeros, so the
// edges cost no code.
//
// Tiles as step 02: block 128 x 128 x 64, one warpgroup, 2 x wgmma m64n128k16 per k16.
// Pipeline: 3 stages of 32 KiB (A 16 KiB + B^T 16 KiB), so up to 2 K-tiles (64 KiB) are in
// flight while the 3rd is multiplied, and 2 blocks fit on an SM (128 KiB in flight per SM),
// so one block's wgmma runs while the other waits or stores; stage s has a "full" mbarrier
// (1 arrival + 32,768 transaction bytes). After the wgmma of a K-tile complete, a block
// barrier frees its stage and thread 0 refills it with the K-tile STAGES further on.
// The tensor maps (built on the host with cuTensorMapEncodeTiled: bf16, 2-D, box 64 x 128,
// 128-byte swizzle) arrive as __grid_constant__ kernel parameters, so TMA reads them from
// the parameter space and no copy to global memory is needed.
// Launch: block 128, grid (ceil(N/128), ceil(M/128)), dynamic shared memory
// 3 x 32,768 + 1,024 (alignment slack) = 99,328 bytes.
#include <cuda.h>

#include "common.cuh"

constexpr int BM = 128, BN = 128, BK = 64, STAGES = 3, THREADS = 128;
constexpr int A_TILE_BYTES = BM * BK * 2, B_TILE_BYTES = BN * BK * 2;  // 16 KiB each
constexpr uint32_t STAGE_BYTES = A_TILE_BYTES + B_TILE_BYTES;           // TMA bytes per stage

extern "C" __global__ void __launch_bounds__(THREADS)
    hgemm_tma_mbarrier(const __grid_constant__ CUtensorMap map_a,
                       const __grid_constant__ CUtensorMap map_bt, int M, int N, int K,
                       bf16 *__restrict__ C, int ldc) {
    extern __shared__ __align__(16) unsigned char smem_raw[];
    __shared__ __align__(8) uint64_t full[STAGES];
    unsigned char *smem = aligned_dynamic_smem<1024>(smem_raw);
    unsigned char *sA = smem;
    unsigned char *sB = smem + STAGES * A_TILE_BYTES;

    const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
    const int k_tiles = (K + BK - 1) / BK;
    const bool issuer = threadIdx.x == 0;

    // Box coordinates are (k, row): innermost dimension first.
    auto issue = [&](int kt, int slot) {
        mbarrier_arrive_expect_tx(&full[slot], STAGE_BYTES);
        tma_load_2d(sA + slot * A_TILE_BYTES, &map_a, kt * BK, row0, &full[slot]);
        tma_load_2d(sB + slot * B_TILE_BYTES, &map_bt, kt * BK, col0, &full[slot]);
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
        // The n-th use of a stage (n = kt / STAGES) completes its barrier's phase n, whose
        // parity is n & 1.
        mbarrier_wait(&full[slot], (kt / STAGES) & 1);

        const unsigned char *a_s = sA + slot * A_TILE_BYTES;
        const unsigned char *b_s = sB + slot * B_TILE_BYTES;
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < BK / 16; ++kk) {
            const int k_bytes = kk * 32;
            const uint64_t desc_b = smem_desc_128b(b_s + k_bytes);
            wgmma_m64n128k16(acc_top, smem_desc_128b(a_s + k_bytes), desc_b);
            wgmma_m64n128k16(acc_bottom, smem_desc_128b(a_s + 64 * 128 + k_bytes), desc_b);
        }
        wgmma_commit();
        wgmma_wait<0>();
        __syncthreads();  // all four warps are done reading this stage
        if (issuer && kt + STAGES < k_tiles) issue(kt + STAGES, slot);
    }

    store_m64n128(C, ldc, row0, col0, M, N, acc_top);
    store_m64n128(C, ldc, row0 + 64, col0, M, N, acc_bottom);
}
