// Step 5, 2D block tiling: each thread computes an 8x8 tile of C from 8 values of A and 8 of
// B per k, an outer product of 64 FMAs for 16 shared-memory loads.
//
// Shared loads per FMA: 16 / 64 = 0.25 (step 4: 1.125). The 128x128 block tile reads
// (128 + 128) * BK floats per 2 * 128 * 128 * BK FLOPs: 32 FLOP/byte at the L2.
// Proof: sm__inst_executed_pipe_lsu / sm__inst_executed_pipe_fma falls; FFMA share of
// issued instructions rises (smsp__sass_thread_inst_executed_op_ffma_pred_on.sum).
// Launch: block 256 threads, grid (ceil(N/128), ceil(M/128)).
#include "common.cuh"

constexpr int BM = 128, BN = 128, BK = 8, TM = 8, TN = 8;
constexpr int THREADS = (BM / TM) * (BN / TN);  // 256

extern "C" __global__ void __launch_bounds__(THREADS) sgemm_2d_blocktiling(SGEMM_ARGS) {
    __shared__ float As[BM * BK];
    __shared__ float Bs[BK * BN];
    const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
    const int t_row = threadIdx.x / (BN / TN), t_col = threadIdx.x % (BN / TN);
    // Loader roles: A tile 128 x 8 in 4 passes of 32 rows, B tile 8 x 128 in 4 passes of 2.
    const int a_row = threadIdx.x / BK, a_col = threadIdx.x % BK;
    const int b_row = threadIdx.x / BN, b_col = threadIdx.x % BN;
    constexpr int A_STRIDE = THREADS / BK, B_STRIDE = THREADS / BN;

    float acc[TM][TN] = {};
    float a_frag[TM], b_frag[TN];
    for (int k0 = 0; k0 < K; k0 += BK) {
        for (int r = a_row; r < BM; r += A_STRIDE) {
            const int gr = row0 + r, gk = k0 + a_col;
            As[r * BK + a_col] = (gr < M && gk < K) ? A[static_cast<size_t>(gr) * lda + gk] : 0.f;
        }
        for (int r = b_row; r < BK; r += B_STRIDE) {
            const int gk = k0 + r, gc = col0 + b_col;
            Bs[r * BN + b_col] = (gk < K && gc < N) ? B[static_cast<size_t>(gk) * ldb + gc] : 0.f;
        }
        __syncthreads();
#pragma unroll
        for (int k = 0; k < BK; ++k) {
#pragma unroll
            for (int i = 0; i < TM; ++i) a_frag[i] = As[(t_row * TM + i) * BK + k];
#pragma unroll
            for (int j = 0; j < TN; ++j) b_frag[j] = Bs[k * BN + t_col * TN + j];
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int j = 0; j < TN; ++j) acc[i][j] += a_frag[i] * b_frag[j];
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < TM; ++i) {
        const int row = row0 + t_row * TM + i;
        if (row >= M) continue;
#pragma unroll
        for (int j = 0; j < TN; ++j) {
            const int col = col0 + t_col * TN + j;
            if (col < N) {
                float *c = C + static_cast<size_t>(row) * ldc + col;
                *c = epilogue(acc[i][j], alpha, beta, c);
            }
        }
    }
}
