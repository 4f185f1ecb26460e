// Step 4, 1D block tiling: each thread computes a column of TM = 8 outputs, so one value of
// B read from shared memory feeds 8 FMAs held in registers.
//
// Shared-memory loads per FMA fall from 2 (step 3) to (1 + 8) / 8 = 1.125; the 64x64 block
// tile halves global traffic per FLOP again. Proof: smsp__inst_executed_op_shared_ld.sum per
// FFMA (or the LDS:FFMA ratio in SASS) drops; l1tex__data_pipe_lsu_wavefronts_mem_shared.sum
// falls.
// Launch: block 512 threads, grid (ceil(N/64), ceil(M/64)).
#include "common.cuh"

constexpr int BM = 64, BN = 64, BK = 8, TM = 8;
constexpr int THREADS = BM * BN / TM;  // 512

extern "C" __global__ void __launch_bounds__(THREADS) sgemm_1d_blocktiling(SGEMM_ARGS) {
    __shared__ float As[BM * BK];
    __shared__ float Bs[BK * BN];
    const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
    const int t_col = threadIdx.x % BN, t_row = threadIdx.x / BN;  // t_row in [0, 8)
    // Loader roles: one element of A (64 x 8) and one of B (8 x 64) per thread.
    const int a_row = threadIdx.x / BK, a_col = threadIdx.x % BK;
    const int b_row = threadIdx.x / BN, b_col = threadIdx.x % BN;

    float acc[TM] = {};
    for (int k0 = 0; k0 < K; k0 += BK) {
        const int ar = row0 + a_row, ak = k0 + a_col;
        As[a_row * BK + a_col] = (ar < M && ak < K) ? A[static_cast<size_t>(ar) * lda + ak] : 0.f;
        const int bk = k0 + b_row, bc = col0 + b_col;
        Bs[b_row * BN + b_col] = (bk < K && bc < N) ? B[static_cast<size_t>(bk) * ldb + bc] : 0.f;
        __syncthreads();
#pragma unroll
        for (int k = 0; k < BK; ++k) {
            const float b = Bs[k * BN + t_col];
#pragma unroll
            for (int i = 0; i < TM; ++i) acc[i] += As[(t_row * TM + i) * BK + k] * b;
        }
        __syncthreads();
    }
    const int col = col0 + t_col;
    if (col >= N) return;
#pragma unroll
    for (int i = 0; i < TM; ++i) {
        const int row = row0 + t_row * TM + i;
        if (row < M) {
            float *c = C + static_cast<size_t>(row) * ldc + col;
            *c = epilogue(acc[i], alpha, beta, c);
        }
    }
}
