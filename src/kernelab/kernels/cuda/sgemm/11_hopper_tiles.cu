// Step 11, tiles sized for Hopper: a 256x128 block tile, 128 accumulators per lane, one
// block of 8 warps per SM, and a grouped block order that keeps the active tiles' rows of A
// and columns of B resident in the 60 MiB L2.
//
// This is the shape cuBLAS itself runs for fp32 on the H200 (its kernel is
// sm80_xmma_gemm_f32f32_..._tilesize256x128x8_stage3_warpsize4x2x1_ffma: 256 threads,
// 254 registers, 1 block per SM; fixtures/ncu). Per lane and per k: 8 values of A and 16 of B
// feed 128 FFMAs, so shared loads per FFMA fall from 1/16 (8x8 lane tiles, steps 7-10) to
// 6/128 = 1/21, and the block re-reads A 1/128 and B 1/256 as often per FLOP as step 10's
// 128x128 tile did with 1/128 each. With so much independent work per lane, 8 warps per SM
// hide latency through instruction-level parallelism instead of occupancy.
// Block order: consecutive blocks walk down GROUP_M tile rows before moving right, so the
// ~132 resident blocks share ~GROUP_M row panels of A and ~132/GROUP_M column panels of B.
// Everything else is step 10: cp.async ring of STAGES buffers, zero-filled edges, 4-byte
// copies for unaligned rows, row-major padded A read along k with LDS.128.
// Proof: FFMA share of issued instructions (sm__inst_executed_pipe_fma / sm__inst_executed)
// rises toward cuBLAS's ~88 %; lts__t_sectors_srcunit_tex_op_read.sum and dram__bytes_read.sum
// fall against step 10.
// Launch: block 256 threads, grid ceil(M/BM) * ceil(N/BN) (1-D, swizzled in the kernel),
// dynamic shared memory STAGES * (BM * (BK + 4) + BK * BN) * 4 bytes (65,536 by default).
#include "common.cuh"

#ifndef BM
#define BM 256
#endif
#ifndef BN
#define BN 128
#endif
#ifndef BK
#define BK 8
#endif
#ifndef STAGES
#define STAGES 4
#endif
#ifndef GROUP_M
#define GROUP_M 8
#endif
constexpr int WM = 64, WN = 64;                     // warp tile: 8 x 4 lanes, 8 x 16 per lane
constexpr int WARPS_M = BM / WM, WARPS_N = BN / WN;
constexpr int THREADS = 32 * WARPS_M * WARPS_N;
constexpr int TM = WM / 8, TN = WN / 4;
constexpr int A_LD = BK + 4;
constexpr int A_STAGE = BM * A_LD, B_STAGE = BK * BN;
static_assert(BK % 4 == 0 && TN % 4 == 0, "float4 fragments");
static_assert((BM * BK / 4) % THREADS == 0 && (BK * BN / 4) % THREADS == 0, "even copy split");

__device__ __forceinline__ void load_tile(float *As, float *Bs, const float *A, int lda,
                                          const float *B, int ldb, int M, int N, int K,
                                          int row0, int col0, int k0, bool a_aligned,
                                          bool b_aligned) {
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

extern "C" __global__ void __launch_bounds__(THREADS, 1) sgemm_hopper_tiles(SGEMM_ARGS) {
    DYNAMIC_SHARED_FLOATS(smem);
    float *As = smem;
    float *Bs = smem + STAGES * A_STAGE;

    // Grouped order: tile (tm, tn) from the linear block id, GROUP_M tile rows at a time.
    const int tiles_m = (M + BM - 1) / BM, tiles_n = (N + BN - 1) / BN;
    const int group = blockIdx.x / (GROUP_M * tiles_n);
    const int first_m = group * GROUP_M;
    const int group_rows = min(tiles_m - first_m, GROUP_M);
    const int in_group = blockIdx.x % (GROUP_M * tiles_n);
    const int row0 = (first_m + in_group % group_rows) * BM;
    const int col0 = (in_group / group_rows) * BN;

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int w_row = (warp / WARPS_N) * WM, w_col = (warp % WARPS_N) * WN;
    const int l_row = lane / 4, l_col = lane % 4;
    const bool a_aligned = rows_are_16b_aligned(A, lda);
    const bool b_aligned = rows_are_16b_aligned(B, ldb);
    const int k_tiles = (K + BK - 1) / BK;

#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < k_tiles)
            load_tile(As + s * A_STAGE, Bs + s * B_STAGE, A, lda, B, ldb, M, N, K, row0, col0,
                      s * BK, a_aligned, b_aligned);
        cp_async_commit();
    }

    float acc[TM][TN] = {};
    float a_frag[TM][4], b_frag[TN];
    for (int kt = 0; kt < k_tiles; ++kt) {
        cp_async_wait<STAGES - 2>();
        __syncthreads();
        const int next = kt + STAGES - 1;
        if (next < k_tiles) {
            const int s = next % STAGES;
            load_tile(As + s * A_STAGE, Bs + s * B_STAGE, A, lda, B, ldb, M, N, K, row0, col0,
                      next * BK, a_aligned, b_aligned);
        }
        cp_async_commit();

        const float *a_tile = As + (kt % STAGES) * A_STAGE;
        const float *b_tile = Bs + (kt % STAGES) * B_STAGE;
#pragma unroll
        for (int k4 = 0; k4 < BK; k4 += 4) {
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
