// Step 6, vectorized memory access: 128-bit loads and stores everywhere the data allows.
//
// Global: each thread fetches one float4 of A and one of B per K-tile (LDG.E.128), and C is
// written as float4 (STG.E.128). Shared: A is stored transposed (As[k][m]) so that a thread's
// 8 values of A for one k are contiguous and, like its 8 values of B, arrive in two LDS.128
// instead of eight LDS: 4 shared-load instructions per 64 FMAs (step 5: 16).
// Rows that are not 16-byte aligned (lda or ldb not a multiple of 4, an offset view) and the
// last partial float4 of a row take a guarded scalar path, so any shape stays correct.
// Proof: LDG.E.128 / LDS.128 / STG.E.128 in the SASS; smsp__inst_executed_op_shared_ld.sum
// and smsp__inst_executed_op_global_ld.sum drop about 4x.
// Launch: block 256 threads, grid (ceil(N/128), ceil(M/128)).
#include "common.cuh"

constexpr int BM = 128, BN = 128, BK = 8, TM = 8, TN = 8;
constexpr int THREADS = (BM / TM) * (BN / TN);  // 256

extern "C" __global__ void __launch_bounds__(THREADS) sgemm_vectorized(SGEMM_ARGS) {
    __shared__ __align__(16) float As[BK * BM];  // transposed: As[k * BM + m]
    __shared__ __align__(16) float Bs[BK * BN];
    const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
    const int t_row = threadIdx.x / (BN / TN), t_col = threadIdx.x % (BN / TN);
    // Loader roles: A tile 128 x 8 = 256 float4 (one row, 4 k each), B tile 8 x 128 = 256 float4.
    const int a_row = threadIdx.x / (BK / 4), a_col = (threadIdx.x % (BK / 4)) * 4;
    const int b_row = threadIdx.x / (BN / 4), b_col = (threadIdx.x % (BN / 4)) * 4;
    const bool a_aligned = rows_are_16b_aligned(A, lda);
    const bool b_aligned = rows_are_16b_aligned(B, ldb);

    float acc[TM][TN] = {};
    float a_frag[TM], b_frag[TN];
    for (int k0 = 0; k0 < K; k0 += BK) {
        const float4 a = load4(A, lda, row0 + a_row, k0 + a_col, M, K, a_aligned);
        As[(a_col + 0) * BM + a_row] = a.x;
        As[(a_col + 1) * BM + a_row] = a.y;
        As[(a_col + 2) * BM + a_row] = a.z;
        As[(a_col + 3) * BM + a_row] = a.w;
        *reinterpret_cast<float4 *>(&Bs[b_row * BN + b_col]) =
            load4(B, ldb, k0 + b_row, col0 + b_col, K, N, b_aligned);
        __syncthreads();
#pragma unroll
        for (int k = 0; k < BK; ++k) {
#pragma unroll
            for (int i = 0; i < TM; i += 4)
                *reinterpret_cast<float4 *>(&a_frag[i]) =
                    *reinterpret_cast<const float4 *>(&As[k * BM + t_row * TM + i]);
#pragma unroll
            for (int j = 0; j < TN; j += 4)
                *reinterpret_cast<float4 *>(&b_frag[j]) =
                    *reinterpret_cast<const float4 *>(&Bs[k * BN + t_col * TN + j]);
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int j = 0; j < TN; ++j) acc[i][j] += a_frag[i] * b_frag[j];
        }
        __syncthreads();
    }
    const bool c_aligned = rows_are_16b_aligned(C, ldc);
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; j += 4)
            store4(C, ldc, row0 + t_row * TM + i, col0 + t_col * TN + j, M, N,
                   make_float4(acc[i][j], acc[i][j + 1], acc[i][j + 2], acc[i][j + 3]), alpha,
                   beta, c_aligned);
}
