// kernelab-arch: sm_90a
// Step 05, warp specialisation: one warpgroup only moves data, two only multiply. In steps
// 03-04 the same warps wait for TMA, issue wgmma, wait for the wgmma (wait_group 0) and meet
// at a block barrier before a stage can be refilled, so the tensor core idles at the end of
// every K-tile. Here:
// - the producer warpgroup gives most of its registers away (setmaxnreg.dec to 40) and one of
//   its threads runs ahead: for each K-tile it waits until the stage is empty, arms the
//   stage's "full" barrier with the bytes to expect and issues the TMA loads;
// - each consumer warpgroup takes the registers (setmaxnreg.inc to 232: 128 accumulators of
//   m64n256 plus addresses), waits on "full", issues its 4 wgmma m64n256k16 of the K-tile,
//   commits, and waits only for the PREVIOUS K-tile's group (wait_group 1): one group stays
//   in flight while the warp goes on to wait for the next stage, so wgmma of consecutive
//   K-tiles queue back to back. Once the previous group is done its stage is released with
//   one arrival per consumer warpgroup on the stage's "empty" barrier.
// No block barrier inside the main loop at all.
//
// Tiles: block 128 x 256 x 64, consumer c owns rows 64c .. 64c + 63 (one m64n256k16 per k16,
// 4 per K-tile: 2.1 MFLOP). 128 x 256 beats 128 x 128 on shared-memory traffic per FLOP
// (each k16 reads 64 x 16 of A and 16 x 256 of B for 64 x 256 outputs per consumer) and
// halves the number of blocks that re-read A; it costs 128 accumulator registers per thread.
// Pipeline: 4 stages of 48 KiB (A 16 KiB as one 128 x 64 box, B 32 KiB as four 64 k x 64 n
// boxes, read N-major as in step 04) = 192 KiB in flight per SM, 1 block per SM.
// Epilogue straight from the accumulator registers: bf16 pairs, bounds-checked.
// Launch: block 384 (producer warpgroup 0, consumers 1-2), grid (ceil(N/256), ceil(M/128)),
// dynamic shared memory 4 x 49,152 + 1,024 (alignment slack) = 197,632 bytes.
#include <cuda.h>

#include "common.cuh"

constexpr int BM = 128, BN = 256, BK = 64, STAGES = 4;
constexpr int CONSUMERS = 2, THREADS = 128 * (CONSUMERS + 1);
constexpr int PRODUCER_REGISTERS = 40, CONSUMER_REGISTERS = 232;
// setmaxnreg only moves registers around: the block must still fit the 64 K register file.
static_assert(128 * PRODUCER_REGISTERS + 128 * CONSUMERS * CONSUMER_REGISTERS <= 65536);
constexpr int B_BOX_N = 64;                    // 128 bytes of n: the swizzle span
constexpr int B_BOX_BYTES = BK * B_BOX_N * 2;  // 8 KiB: one n atom of the descriptor
constexpr int A_TILE_BYTES = BM * BK * 2;      // 16 KiB
constexpr int B_TILE_BYTES = BN / B_BOX_N * B_BOX_BYTES;  // 32 KiB
static_assert(BM == 64 * CONSUMERS, "one m64 slice per consumer warpgroup");
static_assert(BK == 64 && BN == 256, "the shape wgmma_k_tile_m64n256 multiplies");

extern "C" __global__ void __launch_bounds__(THREADS, 1)
    hgemm_warp_specialized(const __grid_constant__ CUtensorMap map_a,
                           const __grid_constant__ CUtensorMap map_b, int M, int N, int K,
                           bf16 *__restrict__ C, int ldc) {
    extern __shared__ __align__(16) unsigned char smem_raw[];
    __shared__ __align__(8) uint64_t full[STAGES], empty[STAGES];
    unsigned char *smem = aligned_dynamic_smem<1024>(smem_raw);
    unsigned char *sA = smem;
    unsigned char *sB = smem + STAGES * A_TILE_BYTES;

    const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
    const int k_tiles = (K + BK - 1) / BK;
    const int warpgroup = threadIdx.x / 128;

    if (threadIdx.x == 0) {
#pragma unroll
        for (int s = 0; s < STAGES; ++s) {
            mbarrier_init(&full[s], 1);           // the producer's arrive.expect_tx (+ bytes)
            mbarrier_init(&empty[s], CONSUMERS);  // one release per consumer warpgroup
        }
        fence_barrier_init();
    }
    __syncthreads();

    if (warpgroup == 0) {
        release_registers<PRODUCER_REGISTERS>();
        if (threadIdx.x == 0) {
            // B boxes wholly right of N are not loaded: their columns of C are never
            // stored, and whatever the slot holds there only reaches those accumulators.
            const int b_boxes = min(BN / B_BOX_N, (N - col0 + B_BOX_N - 1) / B_BOX_N);
            const uint32_t stage_bytes = A_TILE_BYTES + b_boxes * B_BOX_BYTES;
            for (int kt = 0; kt < k_tiles; ++kt) {
                const int slot = kt % STAGES;
                // Fill number n = kt / STAGES of this slot needs release number n - 1.
                if (kt >= STAGES) mbarrier_wait(&empty[slot], (kt / STAGES - 1) & 1);
                mbarrier_arrive_expect_tx(&full[slot], stage_bytes);
                // Box coordinates run innermost first: (k, row) for A, (n, k) for B.
                tma_load_2d(sA + slot * A_TILE_BYTES, &map_a, kt * BK, row0, &full[slot]);
                for (int j = 0; j < b_boxes; ++j) {
                    tma_load_2d(sB + slot * B_TILE_BYTES + j * B_BOX_BYTES, &map_b,
                                col0 + j * B_BOX_N, kt * BK, &full[slot]);
                }
            }
        }
        return;
    }

    claim_registers<CONSUMER_REGISTERS>();
    const int consumer = warpgroup - 1;
    const bool releaser = threadIdx.x % 128 == 0;
    float acc[128];
#pragma unroll
    for (int i = 0; i < 128; ++i) acc[i] = 0.0f;

    for (int kt = 0; kt < k_tiles; ++kt) {
        const int slot = kt % STAGES;
        mbarrier_wait(&full[slot], (kt / STAGES) & 1);

        const unsigned char *a_s = sA + slot * A_TILE_BYTES + consumer * 64 * 128;
        const unsigned char *b_s = sB + slot * B_TILE_BYTES;
        wgmma_k_tile_m64n256(acc, a_s, b_s, B_BOX_BYTES);
        // Keep this K-tile's group in flight; the previous one is finished after this, so
        // its stage goes back to the producer.
        wgmma_wait<1>();
        if (releaser && kt > 0) mbarrier_arrive(&empty[(kt - 1) % STAGES]);
    }
    wgmma_wait<0>();

    store_accumulators<BN>(C, ldc, row0 + consumer * 64, col0, M, N, acc);
}
