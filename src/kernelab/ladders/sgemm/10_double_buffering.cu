// Step 10, double (multi-stage) buffering with cp.async: while the warps compute on one
// K-tile, the copy engine of the LSU is already fetching the next STAGES-1 tiles straight
// into shared memory, with no register round trip and no stall on the global load.
//
// In step 9 every K-tile began with a load whose ~600-cycle DRAM/L2 latency the warps waited
// out at the barrier (stall "long_scoreboard"). Here cp.async.cg copies 16 bytes per
// instruction (LDGSTS.E.BYPASS.128 in SASS) into a ring of STAGES buffers; a tile is waited
// for only when it is about to be used. Out-of-bounds parts of edge tiles are zero-filled by
// the copy itself (src-size < 16); rows that are not 16-byte aligned use 4-byte copies.
// A stays row-major in shared memory (cp.async cannot transpose), padded to BK + 4 floats
// per row; each lane reads 4 consecutive k of a row with one LDS.128 and owns rows
// l_row + 8*i, which makes the 8 rows a warp reads land on 8 distinct 4-bank groups.
// Proof: smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active and
// smsp__average_warps_issue_stalled_barrier_per_issue_active drop; LDGSTS in SASS.
// Launch: block 256 threads, grid (ceil(N/128), ceil(M/128)), dynamic shared memory
// STAGES * (BM * (BK + 4) + BK * BN) * 4 bytes (55,296 for the defaults: above 48 KiB, so the
// launcher raises the kernel's limit).
#include "common.cuh"

#ifndef BM
#define BM 128
#endif
#ifndef BN
#define BN 128
#endif
#ifndef BK
#define BK 16
#endif
#ifndef STAGES
#define STAGES 3
#endif
constexpr int WM = 64, WN = 32;                     // warp tile: 8 x 4 lanes, 8 x 8 per lane
constexpr int WARPS_M = BM / WM, WARPS_N = BN / WN;
constexpr int THREADS = 32 * WARPS_M * WARPS_N;
constexpr int TM = WM / 8, TN = WN / 4;             // 8 rows x 8 columns per lane
constexpr int A_LD = BK + 4;                        // row-major A tile, padded
constexpr int A_STAGE = BM * A_LD, B_STAGE = BK * BN;  // floats per stage
static_assert(BK % 4 == 0 && TN % 4 == 0, "float4 fragments");
static_assert((BM * BK / 4) % THREADS == 0 && (BK * BN / 4) % THREADS == 0, "even copy split");

__device__ __forceinline__ void load_tile(float *As, float *Bs, const float *A, int lda,
                                          const float *B, int ldb, int M, int N, int K,
                                          int row0, int col0, int k0, bool a_aligned,
                                          bool b_aligned) {
    // A: BM rows x BK/4 quads; B: BK rows x BN/4 quads; 16 bytes each.
#pragma unroll
    for (int idx = threadIdx.x; idx < BM * BK / 4; idx += THREADS) {
        const int r = idx / (BK / 4), c = (idx % (BK / 4)) * 4;
        cp_async_row4(&As[r * A_LD + c], A, lda, row0 + r, k0 + c, M, K, a_aligned);
    }
#pragma unroll
    for (int idx = threadIdx.x; idx < BK * BN / 4; idx += THREADS) {
        const int r = idx / (BN / 4), c = (idx % (BN / 4)) * 4;
        cp_async_row4(&Bs[r * BN + c], B, ldb, k0 + r, col0 + c, K, N, b_aligned);
    }
}

extern "C" __global__ void __launch_bounds__(THREADS) sgemm_double_buffering(SGEMM_ARGS) {
    DYNAMIC_SHARED_FLOATS(smem);
    float *As = smem;                       // STAGES x [BM][A_LD]
    float *Bs = smem + STAGES * A_STAGE;    // STAGES x [BK][BN]
    const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int w_row = (warp / WARPS_N) * WM, w_col = (warp % WARPS_N) * WN;
    const int l_row = lane / 4, l_col = lane % 4;
    const bool a_aligned = rows_are_16b_aligned(A, lda);
    const bool b_aligned = rows_are_16b_aligned(B, ldb);
    const int k_tiles = (K + BK - 1) / BK;

    // Prologue: put the first STAGES-1 tiles in flight.
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < k_tiles)
            load_tile(As + s * A_STAGE, Bs + s * B_STAGE, A, lda, B, ldb, M, N, K, row0, col0,
                      s * BK, a_aligned, b_aligned);
        cp_async_commit();  // one group per stage, empty or not, keeps the count simple
    }

    float acc[TM][TN] = {};
    float a_frag[TM][4], b_frag[TN];
    for (int kt = 0; kt < k_tiles; ++kt) {
        cp_async_wait<STAGES - 2>();  // tile kt has landed (for this thread's copies)...
        __syncthreads();              // ...and for everyone's; all are done with tile kt-1
        const int next = kt + STAGES - 1;
        if (next < k_tiles) {
            const int s = next % STAGES;  // the buffer tile kt-1 used: free since the barrier
            load_tile(As + s * A_STAGE, Bs + s * B_STAGE, A, lda, B, ldb, M, N, K, row0, col0,
                      next * BK, a_aligned, b_aligned);
        }
        cp_async_commit();

        const float *a_tile = As + (kt % STAGES) * A_STAGE;
        const float *b_tile = Bs + (kt % STAGES) * B_STAGE;
#pragma unroll
        for (int k4 = 0; k4 < BK; k4 += 4) {
            // 8 rows x 4 k of A in 8 LDS.128; then per k, 8 columns of B in 2 LDS.128.
#pragma unroll
            for (int i = 0; i < TM; ++i)
                *reinterpret_cast<float4 *>(a_frag[i]) = *reinterpret_cast<const float4 *>(
                    &a_tile[(w_row + l_row + 8 * i) * A_LD + k4]);
#pragma unroll
            for (int kk = 0; kk < 4; ++kk) {
#pragma unroll
                for (int g = 0; g < TN / 4; ++g)
                    *reinterpret_cast<float4 *>(&b_frag[g * 4]) =
                        *reinterpret_cast<const float4 *>(
                            &b_tile[(k4 + kk) * BN + w_col + g * 16 + l_col * 4]);
#pragma unroll
                for (int i = 0; i < TM; ++i)
#pragma unroll
                    for (int j = 0; j < TN; ++j) acc[i][j] += a_frag[i][kk] * b_frag[j];
            }
        }
    }
    cp_async_wait<0>();

    const bool c_aligned = rows_are_16b_aligned(C, ldc);
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int g = 0; g < TN / 4; ++g)
            store4(C, ldc, row0 + w_row + l_row + 8 * i, col0 + w_col + g * 16 + l_col * 4, M, N,
                   make_float4(acc[i][g * 4], acc[i][g * 4 + 1], acc[i][g * 4 + 2],
                               acc[i][g * 4 + 3]),
                   alpha, beta, c_aligned);
}
