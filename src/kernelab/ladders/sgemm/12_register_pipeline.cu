// Step 12, a software pipeline down to the registers: while a lane's FFMAs for k run, the
// shared loads for k + 1 are already in flight, so no warp ever waits on shared memory.
//
// Step 11 reads A row-major, 4 k at a time (an 8 x 4 fragment, 32 registers), so holding the
// next fragment as well would cost 64 registers on top of 128 accumulators: ptxas cannot, and
// at 2 warps per scheduler the LDS latency at each 4-k boundary is exposed. cuBLAS's fp32
// kernel on this card (fixtures/ncu) avoids that by keeping A k-major in shared memory, which
// it fills with 4-byte LDGSTS that transpose on the way in. This step does the same:
// * A is stored k-major, As[k][m] with rows of BM + 4 floats, filled by 4-byte cp.async (the
//   transpose costs nothing: each 4-byte copy may land anywhere). Four copies per thread share
//   one source pointer (immediate offsets). The +4 padding makes the transposing writes of a
//   warp (16 rows x 2 groups of 4 k) land on 32 distinct banks. Only 4-byte alignment is
//   needed, so A never needs an unaligned path.
// * Per k a lane needs TM + TN floats (8 + 16 by default: 2 + 4 LDS.128, 21 FFMA per load),
//   and holds two such fragments: 48 registers, so 128 accumulators + 48 still fit in 255.
// * The fragment for k + 1 is loaded before the FFMAs of k; at the last k of a tile the
//   block syncs once, then loads k = 0 of the next stage before the last FFMAs of this one.
//   One __syncthreads per K-tile; the copies for a tile STAGES - 1 ahead are issued right
//   after it, into the stage every thread has just finished reading.
// * Lanes form 8 (M) x 4 (N): a lane's rows are 4 consecutive m at 32-row strides and its
//   columns 4 consecutive n at 16-column strides, so an A load is 8 distinct 16-byte chunks
//   and a B load 4, each broadcast: every LDS.128 is conflict-free.
// Proof: smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active and
// ..._mio_throttle_... fall against step 11; FFMA share of issued instructions
// (sm__inst_executed_pipe_fma / sm__inst_executed) >= 90 %; LDGSTS.E.32 (A) and
// LDGSTS.E.BYPASS.128 (B) in SASS; l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld ~ 0.
// Launch: block 32 * (BM / WM) * (BN / WN) threads, grid ceil(M/BM) * ceil(N/BN) (1-D,
// grouped in the kernel), dynamic shared memory STAGES * BK * (BM + 4 + BN) * 4 bytes.
#include "common.cuh"

#include <type_traits>

#ifndef BM
#define BM 128
#endif
#ifndef BN
#define BN 128
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
#define STAGES 4
#endif
#ifndef GROUP_M
#define GROUP_M 8
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
static_assert(BK % 8 == 0, "A copies walk k in blocks of 8");
static_assert(BM % 32 == 0, "A_LD = 4 mod 32 keeps the transposing writes conflict-free");
static_assert((BM * BK / 4) % THREADS == 0 && (BK * BN / 4) % THREADS == 0, "even copy split");
constexpr int A_COPIES = BM * BK / 4 / THREADS;  // groups of 4 k of one row, per thread
constexpr int B_COPIES = BK * BN / 4 / THREADS;  // 16-byte chunks of one k row, per thread

// This thread's share of every K-tile copy, worked out once. Sources advance one K-tile per
// load. Rows of A past M and columns of B past N point at valid memory and copy 0 bytes.
struct CopyPlan {
    const float *a_src[A_COPIES];
    const float *b_src[B_COPIES];
    int a_dst[A_COPIES], a_k[A_COPIES];  // smem offset of (k, row); k offset in the tile
    int b_dst[B_COPIES], b_k[B_COPIES];
    bool a_row_in[A_COPIES];
    int b_bytes[B_COPIES];  // bytes of the 16 that lie inside N
};

__device__ __forceinline__ void plan_copies(CopyPlan &p, const float *A, int lda, const float *B,
                                            int ldb, int M, int N, int row0, int col0, int k0) {
#pragma unroll
    for (int i = 0; i < A_COPIES; ++i) {
        // A warp takes 16 rows x 2 groups of 4 k within one block of 8 k: with A_LD = 4 mod 32
        // its 4-byte writes to As[k][row] fall on 32 distinct banks.
        const int idx = threadIdx.x + i * THREADS;
        const int block8 = idx / (2 * BM), in_block = idx % (2 * BM);
        const int r = in_block / 2, c = block8 * 8 + (in_block % 2) * 4;
        p.a_row_in[i] = row0 + r < M;
        p.a_src[i] = A + (p.a_row_in[i] ? static_cast<ptrdiff_t>(row0 + r) * lda : 0) + k0 + c;
        p.a_dst[i] = c * A_LD + r;
        p.a_k[i] = c;
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

// The K-tile that starts at k0 into one stage. Only the first tile can be partial (see
// register_pipeline), so only it checks k; the others copy exactly what the plan says.
template <bool BAligned, bool CheckK>
__device__ __forceinline__ void load_tile(CopyPlan &p, float *as, float *bs, const float *A,
                                          const float *B, int ldb, int N, int K, int col0,
                                          int k0) {
#pragma unroll
    for (int i = 0; i < A_COPIES; ++i)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            float *dst = as + p.a_dst[i] + e * A_LD;
            if constexpr (CheckK) {
                const int k = k0 + p.a_k[i] + e;
                const bool in = p.a_row_in[i] && k >= 0 && k < K;
                cp_async_4(dst, in ? p.a_src[i] + e : A, in ? 4 : 0);
            } else {
                cp_async_4(dst, p.a_src[i] + e, p.a_row_in[i] ? 4 : 0);
            }
        }
#pragma unroll
    for (int i = 0; i < B_COPIES; ++i) {
        const int k = k0 + p.b_k[i];
        if constexpr (BAligned && !CheckK) {
            cp_async_16(bs + p.b_dst[i], p.b_src[i], p.b_bytes[i]);
        } else {  // k < 0 (the skewed first tile) reads zeros, as row K does; 4-byte copies
            const int row = k >= 0 ? k : K;  // when rows are not 16-byte aligned
            cp_async_row4(bs + p.b_dst[i], B, ldb, row, col0 + p.b_dst[i] % BN, K, N, BAligned);
        }
    }
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
__device__ __forceinline__ void register_pipeline(SGEMM_ARGS, int row0, int col0, float *smem) {
    float *As = smem;  // STAGES x [BK][A_LD], k-major
    float *Bs = smem + STAGES * A_STAGE;  // STAGES x [BK][BN]
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int m0 = (warp / WARPS_N) * WM + (lane / LANES_N) * 4;  // first row of this lane
    const int n0 = (warp % WARPS_N) * WN + (lane % LANES_N) * 4;  // first column
    // When BK does not divide K, the partial tile goes first: tile t covers k from
    // t * BK - skew, and k < 0 reads zeros. Then every tile loaded inside the K loop is whole
    // and its copies carry no bounds checks at all.
    const int skew = (BK - K % BK) % BK;
    const int k_tiles = (K + skew) / BK;

    CopyPlan plan;
    plan_copies(plan, A, lda, B, ldb, M, N, row0, col0, -skew);
    auto load = [&](int kt, int stage, auto check_k) {
        load_tile<BAligned, decltype(check_k)::value>(plan, As + stage * A_STAGE,
                                                      Bs + stage * B_STAGE, A, B, ldb, N, K,
                                                      col0, kt * BK - skew);
    };
    load(0, 0, std::true_type{});
    advance(plan, ldb);
    cp_async_commit();
#pragma unroll
    for (int s = 1; s < STAGES - 1; ++s) {
        if (s < k_tiles) load(s, s, std::false_type{});
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
            if (kk == 0) {
                if (kt + STAGES - 1 < k_tiles)
                    load(kt + STAGES - 1, write_stage, std::false_type{});
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
    sgemm_register_pipeline(SGEMM_ARGS) {
    DYNAMIC_SHARED_FLOATS(smem);
    int row0, col0;
    grouped_tile_origin(blockIdx.x, M, N, BM, BN, GROUP_M, row0, col0);
    if (rows_are_16b_aligned(B, ldb))
        register_pipeline<true>(M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, row0, col0, smem);
    else
        register_pipeline<false>(M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, row0, col0, smem);
}
