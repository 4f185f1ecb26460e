// Helpers every SGEMM step shares: guarded loads, cp.async wrappers and the epilogue.
//
// Contract of every step: C[M,N] = alpha * A[M,K] @ B[K,N] + beta * C, all row-major fp32,
// with leading dimensions lda, ldb, ldc (elements between consecutive rows). Any M, N, K >= 1
// and any leading dimension >= the row length is valid; when beta == 0, C is never read, so
// an uninitialised C (torch.empty) cannot leak NaN into the result.
#pragma once

#include <cstdint>

#ifdef KERNELAB_HOST_EMULATION
#define CHECK_16B_ALIGNED(p) kernelab_emu::check_16b_aligned(p)  // a GPU would fault
#else
#define CHECK_16B_ALIGNED(p)
#endif

#define SGEMM_ARGS                                                                       \
    int M, int N, int K, float alpha, const float *__restrict__ A, int lda,            \
        const float *__restrict__ B, int ldb, float beta, float *__restrict__ C, int ldc

__device__ __forceinline__ float epilogue(float acc, float alpha, float beta, const float *c) {
    return beta == 0.0f ? alpha * acc : fmaf(alpha, acc, beta * *c);
}

// True when rows of `ptr` can be read as float4: 16-byte aligned base and a row stride that
// keeps every row 16-byte aligned.
__device__ __forceinline__ bool rows_are_16b_aligned(const float *ptr, int ld) {
#if defined(KERNELAB_HOST_EMULATION) && defined(KERNELAB_EMU_ASSUME_ALIGNED)
    return true;  // a known-wrong variant the tests build to show the emulator faults
#endif
    return (reinterpret_cast<uintptr_t>(ptr) & 15) == 0 && (ld & 3) == 0;
}

// Four consecutive elements (row, col..col+3) of a rows x cols matrix, zero outside it.
// One 128-bit load when all four are inside and the row is aligned; else four guarded loads.
__device__ __forceinline__ float4 load4(const float *ptr, int ld, int row, int col, int rows,
                                        int cols, bool aligned) {
    float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
    if (row >= rows) return v;
    const float *p = ptr + static_cast<size_t>(row) * ld + col;
    if (aligned && col + 3 < cols) {
        CHECK_16B_ALIGNED(p);
        return *reinterpret_cast<const float4 *>(p);
    }
    if (col + 0 < cols) v.x = p[0];
    if (col + 1 < cols) v.y = p[1];
    if (col + 2 < cols) v.z = p[2];
    if (col + 3 < cols) v.w = p[3];
    return v;
}

// C[row, col..col+3] = alpha * acc + beta * C, inside the matrix only.
__device__ __forceinline__ void store4(float *C, int ldc, int row, int col, int M, int N,
                                       float4 acc, float alpha, float beta, bool aligned) {
    if (row >= M) return;
    float *p = C + static_cast<size_t>(row) * ldc + col;
    if (aligned && col + 3 < N) {
        CHECK_16B_ALIGNED(p);
        float4 out;
        if (beta == 0.0f) {
            out = make_float4(alpha * acc.x, alpha * acc.y, alpha * acc.z, alpha * acc.w);
        } else {
            const float4 old = *reinterpret_cast<const float4 *>(p);
            out = make_float4(fmaf(alpha, acc.x, beta * old.x), fmaf(alpha, acc.y, beta * old.y),
                              fmaf(alpha, acc.z, beta * old.z), fmaf(alpha, acc.w, beta * old.w));
        }
        *reinterpret_cast<float4 *>(p) = out;
        return;
    }
    const float v[4] = {acc.x, acc.y, acc.z, acc.w};
#pragma unroll
    for (int i = 0; i < 4; ++i)
        if (col + i < N) p[i] = epilogue(v[i], alpha, beta, p + i);
}

// Grouped block order: the origin (row0, col0) of the tile a 1-D block id owns when blocks
// walk down `group_m` tile rows before moving one tile right, so the blocks resident at once
// share a few row panels of A and column panels of B in L2.
__device__ __forceinline__ void grouped_tile_origin(int block, int M, int N, int bm, int bn,
                                                    int group_m, int &row0, int &col0) {
    const int tiles_m = (M + bm - 1) / bm, tiles_n = (N + bn - 1) / bn;
    const int first_m = block / (group_m * tiles_n) * group_m;
    const int group_rows = min(tiles_m - first_m, group_m);
    const int in_group = block % (group_m * tiles_n);
    row0 = (first_m + in_group % group_rows) * bm;
    col0 = (in_group / group_rows) * bn;
}

// ---- cp.async (sm_80+): global -> shared without passing through registers ---------------
// src_bytes < copy size zero-fills the rest of the destination: that is how edge tiles read
// "zeros" past the matrix without a branch around the copy.

#ifndef KERNELAB_HOST_EMULATION
__device__ __forceinline__ uint32_t smem_address(const void *ptr) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(ptr));
}

// 16 bytes, bypassing L1 (.cg): the tile is staged in shared memory, L1 would only evict.
__device__ __forceinline__ void cp_async_16(void *smem, const void *gmem, int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_address(smem)),
                 "l"(gmem), "r"(src_bytes));
}

// 4 bytes (.ca: the only cache mode allowed below 16 bytes); the path for unaligned rows.
__device__ __forceinline__ void cp_async_4(void *smem, const void *gmem, int src_bytes) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_address(smem)),
                 "l"(gmem), "r"(src_bytes));
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n"); }

template <int Pending>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(Pending));
}

#define DYNAMIC_SHARED_FLOATS(name) extern __shared__ __align__(16) float name[]
#else
// The CPU emulation used by the tests (tests/cuda_host_emulation.hpp) copies synchronously.
#define cp_async_16(smem, gmem, src_bytes) kernelab_emu::copy_zero_fill(smem, gmem, src_bytes, 16)
#define cp_async_4(smem, gmem, src_bytes) kernelab_emu::copy_zero_fill(smem, gmem, src_bytes, 4)
inline void cp_async_commit() {}
template <int Pending>
inline void cp_async_wait() {}
#define DYNAMIC_SHARED_FLOATS(name) float *name = kernelab_emu::dynamic_shared()
#endif

// The epilogue of the register-pipeline steps (12, 13): a lane's Rows x Cols accumulators,
// whose rows are groups of 4 consecutive m at 32-row strides from m0 and whose columns are
// groups of 4 consecutive n at 16-column strides from n0 (lanes form 8 (M) x 4 (N) in a warp),
// stored as float4s into the block tile at (row0, col0): alpha * acc + beta * C, inside the
// matrix. (Not named TM / TN: those are -D tile macros of the tunable steps.)
template <int Rows, int Cols>
__device__ __forceinline__ void store_lane_tile(float *C, int ldc, int M, int N, int row0, int m0,
                                                int col0, int n0, const float (&acc)[Rows][Cols],
                                                float alpha, float beta) {
    const bool c_aligned = rows_are_16b_aligned(C, ldc);
#pragma unroll
    for (int i = 0; i < Rows; ++i)
#pragma unroll
        for (int j = 0; j < Cols / 4; ++j)
            store4(C, ldc, row0 + m0 + 32 * (i / 4) + i % 4, col0 + n0 + 16 * j, M, N,
                   make_float4(acc[i][4 * j], acc[i][4 * j + 1], acc[i][4 * j + 2],
                               acc[i][4 * j + 3]),
                   alpha, beta, c_aligned);
}

// Copy A[row, col..col+3] (zero outside rows x cols) into 16 bytes of shared memory.
// Aligned rows: one 16-byte cp.async whose src-size covers the part inside the matrix.
// Unaligned rows: four 4-byte copies, each zero-filled on its own.
__device__ __forceinline__ void cp_async_row4(float *smem, const float *ptr, int ld, int row,
                                              int col, int rows, int cols, bool aligned) {
    const bool row_in = row < rows;
    // Out-of-bounds copies still need a valid address; the matrix origin always is one.
    const float *p = row_in ? ptr + static_cast<size_t>(row) * ld + col : ptr;
    if (aligned) {
        const int valid = row_in ? max(0, min(4, cols - col)) : 0;
        cp_async_16(smem, valid > 0 ? p : ptr, valid * 4);
    } else {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const bool in = row_in && col + i < cols;
            cp_async_4(smem + i, in ? p + i : ptr, in ? 4 : 0);
        }
    }
}
