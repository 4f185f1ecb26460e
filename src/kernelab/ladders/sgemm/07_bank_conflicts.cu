// Step 7, shared-memory bank conflicts: the data of step 6, laid out so that no warp asks
// one of the 32 banks for two different words in the same cycle.
//
// Two conflicts in step 6, both fixed here:
//  * Reading B: thread t_col loaded Bs[k][t_col*8 .. +7], so the 16 column-threads of a
//    warp touched 16 float4s 32 bytes apart, two per bank group: 2 wavefronts where 1 does.
//    Now each thread owns columns {t_col*4 .. +3} and {64 + t_col*4 .. +3}: each LDS.128 of
//    the warp reads 256 contiguous bytes. A is split the same way (rows t_row*4 and +64).
//  * Writing A transposed: the two threads of a row pair wrote As[k][m] and As[k+4][m],
//    512 floats apart, i.e. the same bank. A row padding of 4 floats (BM + 4) shifts k+4 by
//    16 banks.
// Proof: l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum and ..._op_st.sum fall
// toward 0; l1tex__data_pipe_lsu_wavefronts_mem_shared.sum drops.
// Launch: block 256 threads, grid (ceil(N/128), ceil(M/128)).
#include "common.cuh"

constexpr int BM = 128, BN = 128, BK = 8, TM = 8, TN = 8;
constexpr int THREADS = (BM / TM) * (BN / TN);  // 256
constexpr int A_LD = BM + 4;                    // padded row of the transposed A tile

extern "C" __global__ void __launch_bounds__(THREADS) sgemm_bank_conflicts(SGEMM_ARGS) {
    __shared__ __align__(16) float As[BK * A_LD];
    __shared__ __align__(16) float Bs[BK * BN];
    const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
    const int t_row = threadIdx.x / (BN / TN), t_col = threadIdx.x % (BN / TN);
    const int a_row = threadIdx.x / (BK / 4), a_col = (threadIdx.x % (BK / 4)) * 4;
    const int b_row = threadIdx.x / (BN / 4), b_col = (threadIdx.x % (BN / 4)) * 4;
    const bool a_aligned = rows_are_16b_aligned(A, lda);
    const bool b_aligned = rows_are_16b_aligned(B, ldb);

    float acc[TM][TN] = {};
    float a_frag[TM], b_frag[TN];
    for (int k0 = 0; k0 < K; k0 += BK) {
        const float4 a = load4(A, lda, row0 + a_row, k0 + a_col, M, K, a_aligned);
        As[(a_col + 0) * A_LD + a_row] = a.x;
        As[(a_col + 1) * A_LD + a_row] = a.y;
        As[(a_col + 2) * A_LD + a_row] = a.z;
        As[(a_col + 3) * A_LD + a_row] = a.w;
        *reinterpret_cast<float4 *>(&Bs[b_row * BN + b_col]) =
            load4(B, ldb, k0 + b_row, col0 + b_col, K, N, b_aligned);
        __syncthreads();
#pragma unroll
        for (int k = 0; k < BK; ++k) {
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                *reinterpret_cast<float4 *>(&a_frag[h * 4]) =
                    *reinterpret_cast<const float4 *>(&As[k * A_LD + h * (BM / 2) + t_row * 4]);
                *reinterpret_cast<float4 *>(&b_frag[h * 4]) =
                    *reinterpret_cast<const float4 *>(&Bs[k * BN + h * (BN / 2) + t_col * 4]);
            }
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int j = 0; j < TN; ++j) acc[i][j] += a_frag[i] * b_frag[j];
        }
        __syncthreads();
    }
    const bool c_aligned = rows_are_16b_aligned(C, ldc);
#pragma unroll
    for (int i = 0; i < TM; ++i) {
        const int row = row0 + (i / 4) * (BM / 2) + t_row * 4 + i % 4;
#pragma unroll
        for (int h = 0; h < 2; ++h)
            store4(C, ldc, row, col0 + h * (BN / 2) + t_col * 4, M, N,
                   make_float4(acc[i][h * 4], acc[i][h * 4 + 1], acc[i][h * 4 + 2],
                               acc[i][h * 4 + 3]),
                   alpha, beta, c_aligned);
    }
}
