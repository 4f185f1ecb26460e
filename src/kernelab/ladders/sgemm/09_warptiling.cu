// Step 9, warp tiling: a middle level between the block tile and the thread tile. Each of
// the 8 warps owns a 64x32 sub-tile of the 128x128 block tile, and its 32 lanes (8 x 4)
// cover that sub-tile in 2 x 2 steps of 4x4 outputs.
//
// Why it helps: in step 7 the 16 column-threads of a warp spread over 128 columns, so each
// LDS.128 of B needed 256 bytes (2 wavefronts). Confined to 64 rows x 32 columns, a warp's
// LDS.128 of A asks for 8 distinct float4s (128 bytes) and of B for 4 (64 bytes, each
// broadcast to 8 lanes): every shared load is a single wavefront. BK = 16 halves the number
// of __syncthreads per FLOP. The A tile is written with 16 rows x 2 k-quads per warp, which
// keeps the transposed, padded stores conflict-free at BK = 16.
// Proof: l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum per
// smsp__inst_executed_op_shared_ld.sum falls to ~1; l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum ~0.
// Launch: block 256 threads, grid (ceil(N/128), ceil(M/128)).
#include "common.cuh"

constexpr int BM = 128, BN = 128, BK = 16;
constexpr int WM = 64, WN = 32;                     // warp tile
constexpr int WARPS_N = BN / WN;                    // 4 (and BM / WM = 2 warp rows)
constexpr int THREADS = 32 * (BM / WM) * WARPS_N;  // 256
constexpr int TM = 8, TN = 8;                       // per lane: 2 x 2 groups of 4 x 4
constexpr int A_LD = BM + 4;

extern "C" __global__ void __launch_bounds__(THREADS) sgemm_warptiling(SGEMM_ARGS) {
    __shared__ __align__(16) float As[BK * A_LD];  // transposed: As[k * A_LD + m]
    __shared__ __align__(16) float Bs[BK * BN];
    const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int w_row = (warp / WARPS_N) * WM, w_col = (warp % WARPS_N) * WN;
    const int l_row = lane / 4, l_col = lane % 4;  // 8 x 4 lanes
    const bool a_aligned = rows_are_16b_aligned(A, lda);
    const bool b_aligned = rows_are_16b_aligned(B, ldb);

    float acc[TM][TN] = {};
    float a_frag[TM], b_frag[TN];
    for (int k0 = 0; k0 < K; k0 += BK) {
        // A tile: 128 rows x 4 k-quads = 512 float4, 2 per thread. A warp takes 16 rows x 2
        // quads, so its transposed stores land on 32 distinct banks (A_LD = 132 shifts the
        // second quad by 16 banks).
#pragma unroll
        for (int idx = threadIdx.x; idx < BM * BK / 4; idx += THREADS) {
            const int r = idx % 16 + 16 * ((idx / 32) % (BM / 16));
            const int c = ((idx / (32 * (BM / 16))) * 2 + (idx / 16) % 2) * 4;
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
            for (int g = 0; g < 2; ++g) {
                *reinterpret_cast<float4 *>(&a_frag[g * 4]) = *reinterpret_cast<const float4 *>(
                    &As[k * A_LD + w_row + g * (WM / 2) + l_row * 4]);
                *reinterpret_cast<float4 *>(&b_frag[g * 4]) = *reinterpret_cast<const float4 *>(
                    &Bs[k * BN + w_col + g * (WN / 2) + l_col * 4]);
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
        const int row = row0 + w_row + (i / 4) * (WM / 2) + l_row * 4 + i % 4;
#pragma unroll
        for (int g = 0; g < 2; ++g)
            store4(C, ldc, row, col0 + w_col + g * (WN / 2) + l_col * 4, M, N,
                   make_float4(acc[i][g * 4], acc[i][g * 4 + 1], acc[i][g * 4 + 2],
                               acc[i][g * 4 + 3]),
                   alpha, beta, c_aligned);
    }
}
