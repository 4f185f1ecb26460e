// Step 1, naive: one thread per output element, every operand straight from global memory.
//
// threadIdx.x walks the rows of C, so the 32 threads of a warp read 32 different rows of A
// (addresses lda * 4 bytes apart: 32 sectors per request) and write C with the same stride.
// Per output: 2K loads for 2K FLOPs, an intensity of 0.25 FLOP/byte before any cache helps.
// Launch: block (32, 32), grid (ceil(M/32), ceil(N/32)).
#include "common.cuh"

extern "C" __global__ void sgemm_naive(SGEMM_ARGS) {
    const int row = blockIdx.x * blockDim.x + threadIdx.x;
    const int col = blockIdx.y * blockDim.y + threadIdx.y;
    if (row >= M || col >= N) return;
    const float *a = A + static_cast<size_t>(row) * lda;
    float acc = 0.0f;
    for (int k = 0; k < K; ++k) acc += a[k] * B[static_cast<size_t>(k) * ldb + col];
    float *c = C + static_cast<size_t>(row) * ldc + col;
    *c = epilogue(acc, alpha, beta, c);
}
