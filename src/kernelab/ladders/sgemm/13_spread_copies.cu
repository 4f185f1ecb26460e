// Step 13, copies that never hold up the fragment loads: step 12's register pipeline with A
// copied along k, as cuBLAS does, and each K-tile's copies spread over its k steps.
//
// What the H200 profile of step 12 (128x256x8, benchmarks/results/h200/profiles.json) says:
// issue slots 77 % busy against cuBLAS's 90 %, and the stall that makes the difference is
// short_scoreboard, 0.56 cycles per issued instruction against cuBLAS's 0.21: warps wait on
// LDS results although every fragment is loaded a whole k step (128 FFMAs) ahead. The LDS
// share the LSU's in-order queue with the cp.async copies, and step 12 issues a tile's
// copies as one burst right after the barrier, when all 8 warps are in step:
// * its 4-byte A copies run along m (a warp covers 16 rows x 2 groups of 4 k), so one
//   LDGSTS.E touches 16 cache lines: 16 tag lookups in L1 for 128 bytes. Per K-tile of
//   128x256 that is 32 such requests, ~512 L1 cycles, against 256 issue cycles of FFMAs a
//   scheduler has in hand (2 warps x 128) before it needs the k + 1 fragment queued behind them.
// * cuBLAS's LDGSTS read 4 sectors per request (fixtures/ncu: 100.7 M sectors for 25.2 M
//   requests): 8 lanes along the 8 k of a row, 4 rows per request, 1 lookup per row.
// The change:
// * A copies along k: thread t copies k = t % BK of rows t / BK + i * THREADS / BK, so a
//   warp's request covers 32 / BK rows x BK k: 4 lines for 128 bytes, a quarter of the
//   lookups. With A_LD = 4 mod 32 the transposing writes As[k][row] land on banks 4 k + row:
//   32 distinct banks, conflict-free. The price: each copy has its own row, so its own
//   source pointer (2 registers each instead of one pointer shared by 4 copies).
// * SPREAD = 7: the copies of the tile STAGES - 1 ahead are issued one or two per k step
//   over k = 0..6 instead of all at k = 0, so the LSU queue never holds more than a few
//   requests in front of a fragment load. The group is committed after the last of them,
//   before the wait at k = BK - 1. SPREAD = 1 keeps step 12's burst, so the tuner's table
//   separates the two changes; 3 is between. The price: each spread copy recomputes its
//   shared address (~2 % more instructions in the loop). Rows of B that are not 16-byte
//   aligned always take the burst (see copy_step).
// Proof: smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active falls from 0.56
// toward cuBLAS's 0.21 and smsp__issue_active rises toward 90 %;
// l1tex__t_sectors_pipe_lsu_mem_global_op_ldgsts / ..._t_requests_... ~ 4 for the A copies;
// l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ldgsts.sum ~ 0.
// Launch: as step 12: block 32 * (BM / WM) * (BN / WN) threads, grid ceil(M/BM) * ceil(N/BN)
// (1-D, grouped in the kernel), dynamic shared memory STAGES * BK * (BM + 4 + BN) * 4 bytes.
#include "common.cuh"

#include <type_traits>

#ifndef BM
#define BM 128
#endif
#ifndef BN
#define BN 256
#endif
#ifndef BK
#define BK 8
#endif
#ifndef WM
#define WM 64
#endif
#ifndef WN
#define WN 64
#endif
#ifndef STAGES
#define STAGES 3
#endif
#ifndef GROUP_M
#define GROUP_M 8
#endif
#ifndef SPREAD
#define SPREAD 7  // k steps a K-tile's copies are spread over; 1: one burst, as step 12
#endif
constexpr int LANES_M = 8, LANES_N = 4;
constexpr int TM = WM / LANES_M, TN = WN / LANES_N;  // outputs per lane: 8 x 16 by default
constexpr int WARPS_M = BM / WM, WARPS_N = BN / WN;
constexpr int THREADS = 32 * WARPS_M * WARPS_N;
// 8 warps per SM at 128 accumulators a lane (255 registers), 16 at 64 (128 registers).
constexpr int MIN_BLOCKS = (TM * TN > 64 ? 256 : 512) / THREADS;
constexpr int A_LD = BM + 4;
constexpr int A_STAGE = BK * A_LD, B_STAGE = BK * BN;
static_assert(STAGES >= 2, "a ring needs two stages");
static_assert(TM % 4 == 0 && TN % 4 == 0, "fragments are float4 chunks");
static_assert(BK == 8 || BK == 16, "a warp's A copy covers whole rows of the K-tile");
static_assert(BM % 32 == 0, "A_LD = 4 mod 32 keeps the transposing writes conflict-free");
static_assert(THREADS % BK == 0 && BM % (THREADS / BK) == 0, "A rows split evenly");
static_assert((BK * BN / 4) % THREADS == 0, "B chunks split evenly");
constexpr int A_COPIES = BM * BK / THREADS;      // 4-byte copies, one row each, per thread
constexpr int A_ROW_STEP = THREADS / BK;         // rows between a thread's A copies
constexpr int B_COPIES = BK * BN / 4 / THREADS;  // 16-byte chunks of one k row, per thread
// The copies of one K-tile, B first, issued over the first `Steps` k steps of the loop (at
// most BK - 1: the group is committed before the wait at k = BK - 1). Only the aligned path
// spreads: the unaligned one (4-byte B copies, each bounds-checked) would hold its bounds
// and addresses live across the k loop and spill; it keeps step 12's burst (Steps = 1).
constexpr int COPY_OPS = B_COPIES + A_COPIES;
static_assert(SPREAD >= 1 && SPREAD <= BK - 1, "copies span 1 .. BK - 1 k steps");
template <int Steps>
__device__ constexpr int copy_step(int op) {
    return op * Steps / COPY_OPS;
}

// This thread's share of every K-tile copy, worked out once. Sources advance one K-tile per
// load. Rows of A past M and columns of B past N point at valid memory and copy 0 bytes.
struct CopyPlan {
    const float *a_src[A_COPIES];
    const float *b_src[B_COPIES];
    bool a_row_in[A_COPIES];
    int a_dst0, a_k;  // smem offset of (a_k, first row); a_k, this thread's k in the tile
    int b_dst[B_COPIES], b_k[B_COPIES];
    int b_bytes[B_COPIES];  // bytes of the 16 that lie inside N
};

__device__ __forceinline__ void plan_copies(CopyPlan &p, const float *A, int lda, const float *B,
                                            int ldb, int M, int N, int row0, int col0, int k0) {
    // Lane l takes k = l % BK of row l / BK: a warp covers 32 / BK whole rows of the tile.
    const int r0 = threadIdx.x / BK;
    p.a_k = threadIdx.x % BK;
    p.a_dst0 = p.a_k * A_LD + r0;
#pragma unroll
    for (int i = 0; i < A_COPIES; ++i) {
        const int row = row0 + r0 + i * A_ROW_STEP;
        p.a_row_in[i] = row < M;
        p.a_src[i] = A + (p.a_row_in[i] ? static_cast<ptrdiff_t>(row) * lda : 0) + k0 + p.a_k;
    }
#pragma unroll
    for (int i = 0; i < B_COPIES; ++i) {
        const int idx = threadIdx.x + i * THREADS;
        const int r = idx / (BN / 4), c = (idx % (BN / 4)) * 4;
        p.b_bytes[i] = 4 * max(0, min(4, N - (col0 + c)));
        p.b_src[i] = B + static_cast<ptrdiff_t>(k0 + r) * ldb + (p.b_bytes[i] > 0 ? col0 + c : 0);
        p.b_dst[i] = r * BN + c;
        p.b_k[i] = r;
    }
}

// Copy number `op` of the K-tile that starts at k0, into one stage. Only the first tile can
// be partial (the skew of step 12), so only it checks k.
template <bool BAligned, bool CheckK>
__device__ __forceinline__ void copy_op(int op, CopyPlan &p, float *as, float *bs, const float *A,
                                        const float *B, int ldb, int N, int K, int col0, int k0) {
    if (op < B_COPIES) {
        const int i = op;
        const int k = k0 + p.b_k[i];
        if constexpr (BAligned && !CheckK) {
            cp_async_16(bs + p.b_dst[i], p.b_src[i], p.b_bytes[i]);
        } else {  // k < 0 (the skewed first tile) reads zeros, as row K does; 4-byte copies
            const int row = k >= 0 ? k : K;  // when rows are not 16-byte aligned
            cp_async_row4(bs + p.b_dst[i], B, ldb, row, col0 + p.b_dst[i] % BN, K, N, BAligned);
        }
    } else {
        const int i = op - B_COPIES;
        float *dst = as + p.a_dst0 + i * A_ROW_STEP;
        if constexpr (CheckK) {
            const int k = k0 + p.a_k;
            const bool in = p.a_row_in[i] && k >= 0 && k < K;
            cp_async_4(dst, in ? p.a_src[i] : A, in ? 4 : 0);
        } else {
            cp_async_4(dst, p.a_src[i], p.a_row_in[i] ? 4 : 0);
        }
    }
}

template <bool BAligned, bool CheckK>
__device__ __forceinline__ void load_tile(CopyPlan &p, float *as, float *bs, const float *A,
                                          const float *B, int ldb, int N, int K, int col0,
                                          int k0) {
#pragma unroll
    for (int op = 0; op < COPY_OPS; ++op)
        copy_op<BAligned, CheckK>(op, p, as, bs, A, B, ldb, N, K, col0, k0);
}

// Sources move on one K-tile. Called once per tile whether or not it was loaded, so the
// pointers never need copying between branches (past the last tile they are never used).
__device__ __forceinline__ void advance(CopyPlan &p, int ldb) {
#pragma unroll
    for (int i = 0; i < A_COPIES; ++i) p.a_src[i] += BK;
#pragma unroll
    for (int i = 0; i < B_COPIES; ++i) p.b_src[i] += static_cast<ptrdiff_t>(BK) * ldb;
}

template <bool BAligned>
__device__ __forceinline__ void spread_copies(SGEMM_ARGS, int row0, int col0, float *smem) {
    constexpr int spread = BAligned ? SPREAD : 1;
    float *As = smem;                     // STAGES x [BK][A_LD], k-major
    float *Bs = smem + STAGES * A_STAGE;  // STAGES x [BK][BN]
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int m0 = (warp / WARPS_N) * WM + (lane / LANES_N) * 4;  // first row of this lane
    const int n0 = (warp % WARPS_N) * WN + (lane % LANES_N) * 4;  // first column
    // The partial K-tile goes first (tile t covers k from t * BK - skew; k < 0 reads zeros),
    // so the tiles loaded inside the K loop are whole and their copies carry no bounds checks.
    const int skew = (BK - K % BK) % BK;
    const int k_tiles = (K + skew) / BK;

    CopyPlan plan;
    plan_copies(plan, A, lda, B, ldb, M, N, row0, col0, -skew);
    load_tile<BAligned, true>(plan, As, Bs, A, B, ldb, N, K, col0, -skew);
    advance(plan, ldb);
    cp_async_commit();
#pragma unroll
    for (int s = 1; s < STAGES - 1; ++s) {
        if (s < k_tiles)
            load_tile<BAligned, false>(plan, As + s * A_STAGE, Bs + s * B_STAGE, A, B, ldb, N, K,
                                       col0, s * BK - skew);
        advance(plan, ldb);
        cp_async_commit();
    }

    float acc[TM][TN] = {};
    float a_frag[2][TM], b_frag[2][TN];
    // Row k of one stage into fragment buffer `buf`: TM / 4 + TN / 4 LDS.128.
    auto load_fragments = [&](int buf, const float *as, const float *bs) {
#pragma unroll
        for (int i = 0; i < TM / 4; ++i)
            *reinterpret_cast<float4 *>(&a_frag[buf][4 * i]) =
                *reinterpret_cast<const float4 *>(&as[m0 + 32 * i]);
#pragma unroll
        for (int j = 0; j < TN / 4; ++j)
            *reinterpret_cast<float4 *>(&b_frag[buf][4 * j]) =
                *reinterpret_cast<const float4 *>(&bs[n0 + 16 * j]);
    };

    cp_async_wait<STAGES - 2>();
    __syncthreads();
    load_fragments(0, As, Bs);
    int read_stage = 0, write_stage = STAGES - 1;
    for (int kt = 0; kt < k_tiles; ++kt) {
        const float *as = As + read_stage * A_STAGE, *bs = Bs + read_stage * B_STAGE;
        read_stage = read_stage + 1 == STAGES ? 0 : read_stage + 1;
        const float *as_next = As + read_stage * A_STAGE, *bs_next = Bs + read_stage * B_STAGE;
        const bool copy = kt + STAGES - 1 < k_tiles;
        const int k_write = (kt + STAGES - 1) * BK - skew;  // where the copied tile starts
        float *as_write = As + write_stage * A_STAGE, *bs_write = Bs + write_stage * B_STAGE;
#pragma unroll
        for (int kk = 0; kk < BK; ++kk) {
            if (kk == BK - 1) {
                // Tile kt + 1 has landed for everyone, and nobody reads stage kt any more
                // (its last fragment is already in registers): the next tile may reuse it.
                cp_async_wait<STAGES - 2>();
                __syncthreads();
                load_fragments((kk + 1) % 2, as_next, bs_next);  // past the end: unused
            } else {
                load_fragments((kk + 1) % 2, as + (kk + 1) * A_LD, bs + (kk + 1) * BN);
            }
            // This k step's share of the copies for tile kt + STAGES - 1, into the stage
            // that the barrier of the previous tile released.
#pragma unroll
            for (int op = 0; op < COPY_OPS; ++op)
                if (copy_step<spread>(op) == kk && copy)
                    copy_op<BAligned, false>(op, plan, as_write, bs_write, A, B, ldb, N, K, col0,
                                             k_write);
            if (kk == spread - 1) {
                advance(plan, ldb);
                cp_async_commit();
                write_stage = write_stage + 1 == STAGES ? 0 : write_stage + 1;
            }
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int j = 0; j < TN; ++j) acc[i][j] += a_frag[kk % 2][i] * b_frag[kk % 2][j];
        }
    }
    cp_async_wait<0>();

    store_lane_tile<TM, TN>(C, ldc, M, N, row0, m0, col0, n0, acc, alpha, beta);
}

extern "C" __global__ void __launch_bounds__(THREADS, MIN_BLOCKS)
    sgemm_spread_copies(SGEMM_ARGS) {
    DYNAMIC_SHARED_FLOATS(smem);
    int row0, col0;
    grouped_tile_origin(blockIdx.x, M, N, BM, BN, GROUP_M, row0, col0);
    if (rows_are_16b_aligned(B, ldb))
        spread_copies<true>(M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, row0, col0, smem);
    else
        spread_copies<false>(M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, row0, col0, smem);
}
