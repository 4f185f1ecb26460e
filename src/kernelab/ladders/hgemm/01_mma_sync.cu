// kernelab-arch: sm_90a
// Step 01, the tensor-core baseline: warp-level mma.sync.m16n8k16 (bf16 in, fp32 out) fed by
// ldmatrix from a 3-stage cp.async ring. The Ampere recipe, run on Hopper.
//
// Block tile 128 x 128 x 32, 8 warps as 2 (M) x 4 (N), each warp a 64 x 32 tile = 4 x 4 MMA
// tiles of 16 x 8: 64 fp32 accumulators per lane. Per k16, a warp issues 4 ldmatrix.x4 for A,
// 2 ldmatrix.x4.trans for B and 16 mma: 16 x 4096 FLOP per 6 shared loads.
// Shared memory per stage: A 128 x (32 + 8) and B 32 x (128 + 8) bf16, padded so the 8 row
// addresses of each ldmatrix phase fall in 8 different 16-byte bank groups (row strides of
// 80 and 272 bytes: 5 and 17 groups, both odd). 3 stages = 56,832 bytes.
// Bytes in flight per SM: 2 tiles of 16 KiB each ahead of the one being multiplied.
// HBM traffic at 4096^3: A is re-read N/128 = 32 times and B M/128 times, mostly from L2.
// Launch: block 256, grid (ceil(N/128), ceil(M/128)), dynamic shared memory as above.
#include "common.cuh"

constexpr int BM = 128, BN = 128, BK = 32, STAGES = 3;
constexpr int WARPS_M = 2, WARPS_N = 4, THREADS = 32 * WARPS_M * WARPS_N;
constexpr int WM = BM / WARPS_M, WN = BN / WARPS_N;  // 64 x 32
constexpr int MI = WM / 16, NI = WN / 8;             // 4 x 4 mma tiles per warp
constexpr int A_LD = BK + 8, B_LD = BN + 8;          // padded rows, in elements
constexpr int A_STAGE = BM * A_LD, B_STAGE = BK * B_LD;
static_assert(NI % 2 == 0, "one ldmatrix.x4.trans feeds two n8 tiles");

extern "C" __global__ void __launch_bounds__(THREADS)
    hgemm_mma_sync(int M, int N, int K, const bf16 *__restrict__ A, int lda,
                   const bf16 *__restrict__ B, int ldb, bf16 *__restrict__ C, int ldc) {
    extern __shared__ __align__(16) unsigned char smem_raw[];
    bf16 *sA = reinterpret_cast<bf16 *>(smem_raw);
    bf16 *sB = sA + STAGES * A_STAGE;

    const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const int warp_m = warp / WARPS_N, warp_n = warp % WARPS_N;
    const int k_tiles = (K + BK - 1) / BK;

    // One K-tile: A[row0.., k0..] (128 rows x 4 chunks) and B[k0.., col0..] (32 rows x 16
    // chunks), 16-byte chunks, two of each per thread; edges arrive zero-filled.
    auto load_tile = [&](int kt, int slot) {
        const int k0 = kt * BK;
        bf16 *a_dst = sA + slot * A_STAGE;
        bf16 *b_dst = sB + slot * B_STAGE;
#pragma unroll
        for (int i = tid; i < BM * (BK / 8); i += THREADS) {
            const int r = i / (BK / 8), c = i % (BK / 8);
            cp_async_row8(a_dst + r * A_LD + c * 8, A, lda, row0 + r, k0 + c * 8, M, K);
        }
#pragma unroll
        for (int i = tid; i < BK * (BN / 8); i += THREADS) {
            const int r = i / (BN / 8), c = i % (BN / 8);
            cp_async_row8(b_dst + r * B_LD + c * 8, B, ldb, k0 + r, col0 + c * 8, K, N);
        }
    };

    float acc[MI][NI][4] = {};

#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < k_tiles) load_tile(s, s);
        cp_async_commit();  // an empty group when s >= k_tiles keeps the counting uniform
    }

    for (int kt = 0; kt < k_tiles; ++kt) {
        cp_async_wait<STAGES - 2>();  // tile kt has landed (for this thread's copies)...
        __syncthreads();              // ...for every thread's, and slot (kt-1) is free
        const int next = kt + STAGES - 1;
        if (next < k_tiles) load_tile(next, next % STAGES);
        cp_async_commit();

        const bf16 *a_s = sA + (kt % STAGES) * A_STAGE;
        const bf16 *b_s = sB + (kt % STAGES) * B_STAGE;
#pragma unroll
        for (int kk = 0; kk < BK; kk += 16) {
            uint32_t a_frag[MI][4], b_frag[NI][2];
            // A: lanes 0-15 address rows 0-15 at k, lanes 16-31 the same rows at k + 8; the
            // four matrices land as the a0..a3 registers of the m16n8k16 A fragment.
#pragma unroll
            for (int i = 0; i < MI; ++i) {
                const int r = warp_m * WM + i * 16 + lane % 16;
                ldmatrix_x4(a_frag[i], a_s + r * A_LD + kk + (lane / 16) * 8);
            }
            // B, stored [k][n]: lanes 0-15 address k rows kk..kk+15 at n, lanes 16-31 at
            // n + 8; transposed, registers 0-1 are b0-b1 of the n tile, 2-3 of the next.
#pragma unroll
            for (int j = 0; j < NI / 2; ++j) {
                uint32_t r[4];
                const int n = warp_n * WN + j * 16 + (lane / 16) * 8;
                ldmatrix_x4_trans(r, b_s + (kk + lane % 16) * B_LD + n);
                b_frag[2 * j][0] = r[0];
                b_frag[2 * j][1] = r[1];
                b_frag[2 * j + 1][0] = r[2];
                b_frag[2 * j + 1][1] = r[3];
            }
#pragma unroll
            for (int i = 0; i < MI; ++i)
#pragma unroll
                for (int j = 0; j < NI; ++j) mma_16816(acc[i][j], a_frag[i], b_frag[j]);
        }
    }
    cp_async_wait<0>();

    // Accumulator layout of m16n8: c0-c1 at row lane/4, columns 2(lane%4) + 0..1; c2-c3 the
    // same columns 8 rows below. Write once: read 0 bytes of C, write 2 bytes per output.
#pragma unroll
    for (int i = 0; i < MI; ++i) {
        const int row = row0 + warp_m * WM + i * 16 + lane / 4;
#pragma unroll
        for (int j = 0; j < NI; ++j) {
            const int col = col0 + warp_n * WN + j * 8 + 2 * (lane % 4);
            store_pair(C, ldc, row, col, M, N, acc[i][j][0], acc[i][j][1]);
            store_pair(C, ldc, row + 8, col, M, N, acc[i][j][2], acc[i][j][3]);
        }
    }
}
