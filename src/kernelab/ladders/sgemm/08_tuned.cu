// Step 8, tuned tiles: step 7's kernel with its tile shape left open, so that a search on
// the card itself can pick it (-DBM=.. -DBN=.. -DBK=.. -DTM=.. -DTN=..).
//
// The best shape depends on the GPU (SM count, registers, shared memory, clocks) and on the
// problem (few large tiles starve 132 SMs on small matrices; small tiles re-read more of A
// and B). kernelab/ladders/sgemm/tuning.py compiles the candidates, times them and
// caches the winner per GPU and shape class; tuned_h200.json holds the H200's winners.
// Proof: the winner's time against step 7 in the same run; launch__waves_per_multiprocessor
// and sm__warps_active explain why it won.
// Launch: block (BM/TM)*(BN/TN) threads, grid (ceil(N/BN), ceil(M/BM)).
#include "common.cuh"

#ifndef BM
#define BM 128
#endif
#ifndef BN
#define BN 128
#endif
#ifndef BK
#define BK 8
#endif
#ifndef TM
#define TM 8
#endif
#ifndef TN
#define TN 8
#endif

constexpr int THREADS = (BM / TM) * (BN / TN);
constexpr int A_LD = BM + 4;  // padded transposed A row (see step 7)
constexpr int TM4 = TM / 4, TN4 = TN / 4;  // 4-wide fragment groups per thread
static_assert(TM % 4 == 0 && TN % 4 == 0 && BK % 4 == 0, "fragments are float4 groups");
static_assert((BM * BK / 4) % THREADS == 0 && (BK * BN / 4) % THREADS == 0,
              "every thread loads the same number of float4s");

extern "C" __global__ void __launch_bounds__(THREADS) sgemm_tuned(SGEMM_ARGS) {
    __shared__ __align__(16) float As[BK * A_LD];
    __shared__ __align__(16) float Bs[BK * BN];
    const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
    const int t_row = threadIdx.x / (BN / TN), t_col = threadIdx.x % (BN / TN);
    const bool a_aligned = rows_are_16b_aligned(A, lda);
    const bool b_aligned = rows_are_16b_aligned(B, ldb);

    float acc[TM][TN] = {};
    float a_frag[TM], b_frag[TN];
    for (int k0 = 0; k0 < K; k0 += BK) {
#pragma unroll
        for (int idx = threadIdx.x; idx < BM * BK / 4; idx += THREADS) {
            const int r = idx / (BK / 4), c = (idx % (BK / 4)) * 4;
            const float4 a = load4(A, lda, row0 + r, k0 + c, M, K, a_aligned);
            As[(c + 0) * A_LD + r] = a.x;
            As[(c + 1) * A_LD + r] = a.y;
            As[(c + 2) * A_LD + r] = a.z;
            As[(c + 3) * A_LD + r] = a.w;
        }
#pragma unroll
        for (int idx = threadIdx.x; idx < BK * BN / 4; idx += THREADS) {
            const int r = idx / (BN / 4), c = (idx % (BN / 4)) * 4;
            *reinterpret_cast<float4 *>(&Bs[r * BN + c]) =
                load4(B, ldb, k0 + r, col0 + c, K, N, b_aligned);
        }
        __syncthreads();
#pragma unroll
        for (int k = 0; k < BK; ++k) {
#pragma unroll
            for (int g = 0; g < TM4; ++g)
                *reinterpret_cast<float4 *>(&a_frag[g * 4]) = *reinterpret_cast<const float4 *>(
                    &As[k * A_LD + g * (BM / TM4) + t_row * 4]);
#pragma unroll
            for (int g = 0; g < TN4; ++g)
                *reinterpret_cast<float4 *>(&b_frag[g * 4]) = *reinterpret_cast<const float4 *>(
                    &Bs[k * BN + g * (BN / TN4) + t_col * 4]);
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
        const int row = row0 + (i / 4) * (BM / TM4) + t_row * 4 + i % 4;
#pragma unroll
        for (int g = 0; g < TN4; ++g)
            store4(C, ldc, row, col0 + g * (BN / TN4) + t_col * 4, M, N,
                   make_float4(acc[i][g * 4], acc[i][g * 4 + 1], acc[i][g * 4 + 2],
                               acc[i][g * 4 + 3]),
                   alpha, beta, c_aligned);
    }
}
