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
// Lean K loop: every non-FFMA instruction in it takes an issue slot from an FFMA, so each
// thread works out where its copies go once, advances its source pointers by one K-tile per
// load, and re-checks bounds only on the last, partial K-tile. Rows that are not 16-byte
// aligned take a separate instantiation of the whole body (4-byte copies, full checks), so
// the common path carries no alignment branches.
// The rest is step 10: a cp.async ring of STAGES buffers with zero-filled edges, row-major
// padded A read along k with LDS.128.
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
constexpr int A_COPIES = BM * BK / 4 / THREADS;  // 16-byte copies per thread per K-tile
constexpr int B_COPIES = BK * BN / 4 / THREADS;

// This thread's share of every K-tile copy, worked out once. Sources advance one K-tile per
// load (loads happen in K order); rows or columns outside the matrix copy 0 bytes.
struct CopyPlan {
    const float *a_src[A_COPIES];
    const float *b_src[B_COPIES];
    int a_dst[A_COPIES], a_k[A_COPIES];  // smem offset; k offset within the tile
    int b_dst[B_COPIES], b_k[B_COPIES];
    bool a_row_in[A_COPIES];
    int b_bytes[B_COPIES];  // bytes of the 16 that lie inside N
};

__device__ __forceinline__ void plan_copies(CopyPlan &p, const float *A, int lda, const float *B,
                                            int ldb, int M, int N, int row0, int col0) {
#pragma unroll
    for (int i = 0; i < A_COPIES; ++i) {
        const int idx = threadIdx.x + i * THREADS;
        const int r = idx / (BK / 4), c = (idx % (BK / 4)) * 4;
        p.a_row_in[i] = row0 + r < M;
        p.a_src[i] = p.a_row_in[i] ? A + static_cast<size_t>(row0 + r) * lda + c : A;
        p.a_dst[i] = r * A_LD + c;
        p.a_k[i] = c;
    }
#pragma unroll
    for (int i = 0; i < B_COPIES; ++i) {
        const int idx = threadIdx.x + i * THREADS;
        const int r = idx / (BN / 4), c = (idx % (BN / 4)) * 4;
        p.b_bytes[i] = 4 * max(0, min(4, N - (col0 + c)));
        p.b_src[i] = p.b_bytes[i] > 0 ? B + static_cast<size_t>(r) * ldb + col0 + c : B;
        p.b_dst[i] = r * BN + c;
        p.b_k[i] = r;
    }
}

// 16-byte copies of the tile that starts at k0; bounds only matter when it is the last.
__device__ __forceinline__ void load_tile_fast(CopyPlan &p, float *As, float *Bs, const float *A,
                                               const float *B, int ldb, int K, int k0) {
    const bool full = k0 + BK <= K;
#pragma unroll
    for (int i = 0; i < A_COPIES; ++i) {
        int bytes = p.a_row_in[i] ? 16 : 0;
        if (!full) bytes = p.a_row_in[i] ? 4 * max(0, min(4, K - (k0 + p.a_k[i]))) : 0;
        cp_async_16(As + p.a_dst[i], bytes > 0 ? p.a_src[i] : A, bytes);
        p.a_src[i] += BK;
    }
#pragma unroll
    for (int i = 0; i < B_COPIES; ++i) {
        const int bytes = (full || k0 + p.b_k[i] < K) ? p.b_bytes[i] : 0;
        cp_async_16(Bs + p.b_dst[i], bytes > 0 ? p.b_src[i] : B, bytes);
        p.b_src[i] += static_cast<size_t>(BK) * ldb;
    }
}

// Rows that are not 16-byte aligned: 4-byte copies, every bound checked (slow, but right).
__device__ __forceinline__ void load_tile_slow(float *As, float *Bs, const float *A, int lda,
                                               const float *B, int ldb, int M, int N, int K,
                                               int row0, int col0, int k0) {
#pragma unroll
    for (int idx = threadIdx.x; idx < BM * BK / 4; idx += THREADS) {
        const int r = idx / (BK / 4), c = (idx % (BK / 4)) * 4;
        cp_async_row4(&As[r * A_LD + c], A, lda, row0 + r, k0 + c, M, K, false);
    }
#pragma unroll
    for (int idx = threadIdx.x; idx < BK * BN / 4; idx += THREADS) {
        const int r = idx / (BN / 4), c = (idx % (BN / 4)) * 4;
        cp_async_row4(&Bs[r * BN + c], B, ldb, k0 + r, col0 + c, K, N, false);
    }
}

template <bool Aligned>
__device__ __forceinline__ void hopper_tiles(SGEMM_ARGS, int row0, int col0, float *smem) {
    float *As = smem;
    float *Bs = smem + STAGES * A_STAGE;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int w_row = (warp / WARPS_N) * WM, w_col = (warp % WARPS_N) * WN;
    const int l_row = lane / 4, l_col = lane % 4;
    const int k_tiles = (K + BK - 1) / BK;

    CopyPlan plan;
    if constexpr (Aligned) plan_copies(plan, A, lda, B, ldb, M, N, row0, col0);
    auto load = [&](int kt, int stage) {
        float *as = As + stage * A_STAGE, *bs = Bs + stage * B_STAGE;
        if constexpr (Aligned)
            load_tile_fast(plan, as, bs, A, B, ldb, K, kt * BK);
        else
            load_tile_slow(as, bs, A, lda, B, ldb, M, N, K, row0, col0, kt * BK);
    };

#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < k_tiles) load(s, s);
        cp_async_commit();
    }

    float acc[TM][TN] = {};
    float a_frag[TM][4], b_frag[TN];
    int read_stage = 0, write_stage = STAGES - 1;
    for (int kt = 0; kt < k_tiles; ++kt) {
        cp_async_wait<STAGES - 2>();
        __syncthreads();
        if (kt + STAGES - 1 < k_tiles) load(kt + STAGES - 1, write_stage);
        cp_async_commit();
        write_stage = write_stage + 1 == STAGES ? 0 : write_stage + 1;

        const float *a_tile = As + read_stage * A_STAGE;
        const float *b_tile = Bs + read_stage * B_STAGE;
        read_stage = read_stage + 1 == STAGES ? 0 : read_stage + 1;
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

extern "C" __global__ void __launch_bounds__(THREADS, 1) sgemm_hopper_tiles(SGEMM_ARGS) {
    DYNAMIC_SHARED_FLOATS(smem);
    // Grouped order: tile (tm, tn) from the linear block id, GROUP_M tile rows at a time.
    const int tiles_m = (M + BM - 1) / BM, tiles_n = (N + BN - 1) / BN;
    const int group = blockIdx.x / (GROUP_M * tiles_n);
    const int first_m = group * GROUP_M;
    const int group_rows = min(tiles_m - first_m, GROUP_M);
    const int in_group = blockIdx.x % (GROUP_M * tiles_n);
    const int row0 = (first_m + in_group % group_rows) * BM;
    const int col0 = (in_group / group_rows) * BN;
    if (rows_are_16b_aligned(A, lda) && rows_are_16b_aligned(B, ldb))
        hopper_tiles<true>(M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, row0, col0, smem);
    else
        hopper_tiles<false>(M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, row0, col0, smem);
}
