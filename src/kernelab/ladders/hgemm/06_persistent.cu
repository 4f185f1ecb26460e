// kernelab-arch: sm_90a
// Step 06, a persistent grid in an L2-friendly order: step 05's warp-specialised block, but
// launched once per SM, each block walking output tiles t = blockIdx.x, + gridDim.x, ...
// What that buys:
// - the producer runs straight on into the next tile: while the consumers write tile i's
//   accumulators to C, the TMA already fills the stages with tile i+1's first K-tiles (in
//   step 05 the SM sits empty between one block's epilogue and the next block's first
//   load); no block launch, barrier init or register hand-over per tile;
// - tiles are numbered in groups of GROUP_M tile rows: within its group of GROUP_M x tiles_n
//   tiles, local tile l covers tile row l % GROUP_M and tile column l / GROUP_M. The 132
//   tiles in flight at once then span ~8 tile rows x ~17 tile columns (at 8192^2: 1024 rows
//   of A and 4,224 columns of B) instead of 1 row x all 32 columns or 132 rows x 1 column,
//   so each A and B K-slice is fetched from HBM about once and re-read from L2.
// The stage ring is shared across tiles: `it` counts K-tiles over the block's whole life, so
// slot = it % STAGES and the fill/release number is it / STAGES, as in step 05. Consumers
// release every stage of a tile before its epilogue (wait_group 0 first), so the producer is
// never blocked by an epilogue.
//
// Tiles and stages as step 05: block tile 128 x 256 x 64, 2 consumer warpgroups of
// m64n256k16, 4 stages of 48 KiB.
// Launch: block 384, grid (min(tiles, SM count)), dynamic shared memory 197,632 bytes.
#include <cuda.h>

#include "common.cuh"

constexpr int BM = 128, BN = 256, BK = 64, STAGES = 4, GROUP_M = 8;
constexpr int CONSUMERS = 2, THREADS = 128 * (CONSUMERS + 1);
constexpr int PRODUCER_REGISTERS = 40, CONSUMER_REGISTERS = 232;
static_assert(128 * PRODUCER_REGISTERS + 128 * CONSUMERS * CONSUMER_REGISTERS <= 65536);
constexpr int B_BOX_N = 64;
constexpr int B_BOX_BYTES = BK * B_BOX_N * 2;
constexpr int A_TILE_BYTES = BM * BK * 2;
constexpr int B_TILE_BYTES = BN / B_BOX_N * B_BOX_BYTES;
static_assert(BM == 64 * CONSUMERS, "one m64 slice per consumer warpgroup");
static_assert(BK == 64 && BN == 256, "the shape wgmma_k_tile_m64n256 multiplies");

// Output tile t in the grouped order: (first row, first column) of C.
__device__ __forceinline__ int2 tile_origin(int t, int tiles_m, int tiles_n) {
    const int per_group = GROUP_M * tiles_n;
    const int first_row_tile = t / per_group * GROUP_M;
    const int rows_in_group = min(GROUP_M, tiles_m - first_row_tile);  // the last may be short
    const int local = t % per_group;
    return make_int2((first_row_tile + local % rows_in_group) * BM, local / rows_in_group * BN);
}

extern "C" __global__ void __launch_bounds__(THREADS, 1)
    hgemm_persistent(const __grid_constant__ CUtensorMap map_a,
                     const __grid_constant__ CUtensorMap map_b, int M, int N, int K,
                     bf16 *__restrict__ C, int ldc) {
    extern __shared__ __align__(16) unsigned char smem_raw[];
    __shared__ __align__(8) uint64_t full[STAGES], empty[STAGES];
    unsigned char *smem = aligned_dynamic_smem<1024>(smem_raw);
    unsigned char *sA = smem;
    unsigned char *sB = smem + STAGES * A_TILE_BYTES;

    const int tiles_m = (M + BM - 1) / BM, tiles_n = (N + BN - 1) / BN;
    const int tiles = tiles_m * tiles_n;
    const int k_tiles = (K + BK - 1) / BK;
    const int warpgroup = threadIdx.x / 128;

    if (threadIdx.x == 0) {
#pragma unroll
        for (int s = 0; s < STAGES; ++s) {
            mbarrier_init(&full[s], 1);
            mbarrier_init(&empty[s], CONSUMERS);
        }
        fence_barrier_init();
    }
    __syncthreads();

    if (warpgroup == 0) {
        release_registers<PRODUCER_REGISTERS>();
        if (threadIdx.x == 0) {
            int it = 0;
            for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
                const int2 origin = tile_origin(t, tiles_m, tiles_n);
                // B boxes wholly right of N are skipped (see step 05).
                const int b_boxes = min(BN / B_BOX_N, (N - origin.y + B_BOX_N - 1) / B_BOX_N);
                const uint32_t stage_bytes = A_TILE_BYTES + b_boxes * B_BOX_BYTES;
                for (int kt = 0; kt < k_tiles; ++kt, ++it) {
                    const int slot = it % STAGES;
                    if (it >= STAGES) mbarrier_wait(&empty[slot], (it / STAGES - 1) & 1);
                    mbarrier_arrive_expect_tx(&full[slot], stage_bytes);
                    tma_load_2d(sA + slot * A_TILE_BYTES, &map_a, kt * BK, origin.x, &full[slot]);
                    for (int j = 0; j < b_boxes; ++j) {
                        tma_load_2d(sB + slot * B_TILE_BYTES + j * B_BOX_BYTES, &map_b,
                                    origin.y + j * B_BOX_N, kt * BK, &full[slot]);
                    }
                }
            }
        }
        return;
    }

    claim_registers<CONSUMER_REGISTERS>();
    const int consumer = warpgroup - 1;
    const bool releaser = threadIdx.x % 128 == 0;
    float acc[128];
    int it = 0;
    for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
        const int2 origin = tile_origin(t, tiles_m, tiles_n);
#pragma unroll
        for (int i = 0; i < 128; ++i) acc[i] = 0.0f;

        for (int kt = 0; kt < k_tiles; ++kt, ++it) {
            const int slot = it % STAGES;
            mbarrier_wait(&full[slot], (it / STAGES) & 1);

            const unsigned char *a_s = sA + slot * A_TILE_BYTES + consumer * 64 * 128;
            const unsigned char *b_s = sB + slot * B_TILE_BYTES;
            wgmma_k_tile_m64n256(acc, a_s, b_s, B_BOX_BYTES);
            wgmma_wait<1>();
            if (releaser && kt > 0) mbarrier_arrive(&empty[(it - 1) % STAGES]);
        }
        // The tile's last group, then its stage: everything is released before the epilogue,
        // so the producer fills the ring with the next tile while this one is stored.
        wgmma_wait<0>();
        if (releaser) mbarrier_arrive(&empty[(it - 1) % STAGES]);

        store_accumulators<BN>(C, ldc, origin.x + consumer * 64, origin.y, M, N, acc);
    }
}
