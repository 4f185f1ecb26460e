// What every step of the Hopper bf16 GEMM ladder shares: the bf16 epilogue, ldmatrix and
// mma.sync, the wgmma shared-memory descriptor, wgmma itself, mbarriers and TMA.
//
// Contract of every step: C[M,N] = A[M,K] @ B[K,N] in bf16 with fp32 accumulation, C
// row-major with leading dimension ldc. A is row-major (K-major). Step 01 reads B row-major
// [K,N]; the wgmma steps read B^T [N,K] (K-major, as the launcher hands it over). Rows that
// cp.async or TMA read must start 16-byte aligned (ld % 8 == 0): the launcher pads when not.
// Any M, N, K >= 1.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "../sgemm/common.cuh"  // smem_address, cp_async_16, cp_async_commit, cp_async_wait

using bf16 = __nv_bfloat16;

// C[row, col] and C[row, col + 1] from two fp32 accumulators, inside the matrix only. One
// 4-byte store when both are inside and the pair is 4-byte aligned (col is always even here,
// so an even ldc keeps every pair aligned).
__device__ __forceinline__ void store_pair(bf16 *C, int ldc, int row, int col, int M, int N,
                                           float x, float y) {
    if (row >= M || col >= N) return;
    bf16 *p = C + static_cast<size_t>(row) * ldc + col;
    if (col + 1 < N && (ldc & 1) == 0) {
        *reinterpret_cast<__nv_bfloat162 *>(p) = __floats2bfloat162_rn(x, y);
    } else {
        p[0] = __float2bfloat16_rn(x);
        if (col + 1 < N) p[1] = __float2bfloat16_rn(y);
    }
}

// 16 bytes = 8 bf16 of row `row` starting at column `col` of a rows x cols matrix, zero past
// its edges: the part inside is copied, cp.async zero-fills the rest.
__device__ __forceinline__ void cp_async_row8(void *smem, const bf16 *ptr, int ld, int row,
                                              int col, int rows, int cols) {
    const int valid = row < rows ? max(0, min(8, cols - col)) : 0;
    const bf16 *src = valid > 0 ? ptr + static_cast<size_t>(row) * ld + col : ptr;
    cp_async_16(smem, src, valid * 2);
}

// ---- mma.sync (sm_80+): warp-level tensor-core MMA fed from registers ---------------------

// Four 8x8 b16 matrices; lanes 8i..8i+7 give the row addresses of matrix i, and register i
// of lane t receives row t/4, columns 2(t%4) and 2(t%4)+1 of matrix i.
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void *smem) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_address(smem))
                 : "memory");
}

// The same with each 8x8 matrix transposed on the way: lane t receives column t/4, rows
// 2(t%4) and 2(t%4)+1. Reading B stored [k][n] this way yields the "col" B fragment.
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void *smem) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_address(smem))
                 : "memory");
}

// d += a @ b for a 16x16 (row) by 16x8 (col) bf16 tile: 4096 FLOP per warp per instruction.
__device__ __forceinline__ void mma_16816(float (&d)[4], const uint32_t (&a)[4],
                                          const uint32_t (&b)[2]) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// ---- wgmma (sm_90a): warpgroup-level MMA with both operands in shared memory --------------

// The 128-byte swizzle that TMA's CU_TENSOR_MAP_SWIZZLE_128B writes and the wgmma descriptor
// (layout type 1) reads: in a tile of 128-byte rows whose base is 1024-byte aligned, the
// 16-byte chunk c of row r lives at chunk c ^ (r % 8) (address bits 4-6 XOR bits 7-9).
__device__ __forceinline__ int swizzle_128b_offset(int row, int chunk) {
    return row * 128 + ((chunk ^ (row & 7)) << 4);
}

// The 64-bit shared-memory matrix descriptor (PTX ISA, "Matrix Descriptor Format"):
//   bits  0-13  start address >> 4
//   bits 16-29  leading-dimension byte offset >> 4: unused for swizzled K-major layouts (the
//               16 k of one instruction sit inside one 128-byte row); 1 by convention
//   bits 32-45  stride-dimension byte offset >> 4: from one group of 8 rows (M or N) to the
//               next = 8 rows x 128 bytes = 1024
//   bits 49-51  base offset: 0, because every tile starts 1024-byte aligned
//   bits 62-63  swizzle: 1 = 128-byte
// Moving along K inside the 128-byte row is a plain +32 bytes per k16 on the start address:
// the hardware applies the XOR to the final address, the same bits TMA swizzled on the way in.
__device__ __forceinline__ uint64_t smem_desc_128b(const void *smem) {
    const uint64_t address = smem_address(smem);
    uint64_t desc = (address & 0x3FFFF) >> 4;
    desc |= uint64_t(16 >> 4) << 16;
    desc |= uint64_t(1024 >> 4) << 32;
    desc |= uint64_t(1) << 62;
    return desc;
}

// wgmma reads its operands through the async proxy: writes made by ordinary stores or
// cp.async (the generic proxy) must be fenced before a wgmma may see them.
__device__ __forceinline__ void fence_proxy_async() {
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// Orders the accumulator registers' earlier accesses before the next wgmma.
__device__ __forceinline__ void wgmma_fence() {
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}

__device__ __forceinline__ void wgmma_commit() {
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}

template <int Pending>
__device__ __forceinline__ void wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(Pending) : "memory");
}

// d[64 x 128] += A[64 x 16] @ B[16 x 128] from shared memory, fp32 accumulators. A is K-major
// (trans-a = 0); B is K-major when TransB = 0 (steps 02-03) and N-major when TransB = 1
// (imm-trans-b, valid for bf16/fp16 only; the descriptor must then describe the MN-major
// layout, smem_desc_128b_mn). Lane t of warp w of the warpgroup holds, for j = 0..15,
// d[4j + 0..1] = rows 16w + t/4, columns 8j + 2(t%4) + 0..1, and d[4j + 2..3] = the same
// columns of row 16w + t/4 + 8. 2 * 64 * 128 * 16 = 262,144 FLOP per instruction.
template <int TransB = 0>
__device__ __forceinline__ void wgmma_m64n128k16(float (&d)[64], uint64_t desc_a, uint64_t desc_b) {
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "setp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
        "%64, %65, p, 1, 1, 0, %67;\n"
        "}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
          "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]),
          "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]),
          "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),
          "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]),
          "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]),
          "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]),
          "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
          "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]),
          "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]),
          "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "l"(desc_a), "l"(desc_b), "r"(1), "n"(TransB));
}

// ---- N-major B, 64 x 256 instructions (steps 04+) ------------------------------------------

// The descriptor of an MN-major operand in the 128-byte swizzle (PTX ISA, "Strides": for
// MN-major swizzled layouts the two offsets swap roles against K-major). The tile is stored
// as TMA writes B[K, N] with a box 64 n wide: one 128-byte row (64 n) per k, rows in k order,
// 16-byte chunk c of row k at chunk c ^ (k % 8). Before the swizzle, the canonical layout is
// ((8 chunks of 8 n, n / 64 atoms), (8 k, k / 8 groups)) with byte strides
// ((16, LBO), (128, SBO)):
//   LBO (bits 16-29) = bytes from one 64-wide n atom to the next: `n_atom_bytes` (the next
//                      TMA box, BK rows x 128 bytes further on);
//   SBO (bits 32-45) = bytes from one group of 8 k to the next = 8 rows x 128 = 1024.
// Moving along K by 16 is +16 rows = +2048 bytes on the start address: still a multiple of
// 1024, so the swizzle phase (base offset, bits 49-51) stays 0.
__device__ __forceinline__ uint64_t smem_desc_128b_mn(const void *smem, uint32_t n_atom_bytes) {
    const uint64_t address = smem_address(smem);
    uint64_t desc = (address & 0x3FFFF) >> 4;
    desc |= uint64_t((n_atom_bytes >> 4) & 0x3FFF) << 16;
    desc |= uint64_t(1024 >> 4) << 32;
    desc |= uint64_t(1) << 62;
    return desc;
}

#define HGEMM_ACC4(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3])
#define HGEMM_ACC16(i) HGEMM_ACC4(i), HGEMM_ACC4(i + 4), HGEMM_ACC4(i + 8), HGEMM_ACC4(i + 12)

// d[64 x 256] += A[64 x 16] @ B[16 x 256]: the widest wgmma, 524,288 FLOP per instruction,
// and the least shared-memory traffic per FLOP (the 64 x 16 A slice is read once for 256
// columns). Accumulator fragment as wgmma_m64n128k16 with j = 0..31: 128 fp32 per lane.
// scale_d 0: d = A @ B, the accumulators' old values ignored (a tile's first k16 need not
// zero them first).
template <int TransB>
__device__ __forceinline__ void wgmma_m64n256k16(float (&d)[128], uint64_t desc_a,
                                                 uint64_t desc_b, int scale_d = 1) {
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "setp.ne.b32 p, %130, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
        "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
        "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
        "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, "
        "%110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, "
        "%124, %125, %126, %127}, "
        "%128, %129, p, 1, 1, 0, %131;\n"
        "}\n"
        : HGEMM_ACC16(0), HGEMM_ACC16(16), HGEMM_ACC16(32), HGEMM_ACC16(48), HGEMM_ACC16(64),
          HGEMM_ACC16(80), HGEMM_ACC16(96), HGEMM_ACC16(112)
        : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(TransB));
}

#undef HGEMM_ACC16
#undef HGEMM_ACC4

// One consumer warpgroup's share of a 64-deep K-tile in steps 05+: its 64 rows of A
// (K-major, 128-byte rows at `a_rows`) against 256 columns of B (N-major: four 64 k x 64 n
// boxes of `box_bytes` each at `b_tile`), 4 x m64n256k16 issued as one wgmma group. The caller
// decides how long to wait for the group.
__device__ __forceinline__ void wgmma_k_tile_m64n256(float (&acc)[128], const unsigned char *a_rows,
                                                     const unsigned char *b_tile,
                                                     uint32_t box_bytes) {
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
        wgmma_m64n256k16<1>(acc, smem_desc_128b(a_rows + kk * 32),
                            smem_desc_128b_mn(b_tile + kk * 16 * 128, box_bytes));
    }
    wgmma_commit();
}

// The same K-tile from the descriptors of its first k16 slice, stepped instead of rebuilt: in
// the descriptors' address field (16-byte units) a k16 step is +2 along A's 128-byte rows
// (32 bytes) and +128 down B's N-major boxes (16 rows of 128 bytes). The field stays inside
// its 14 bits: every shared address of these kernels is below 232,448 bytes (14,528 units).
// `accumulate` false: the first k16 overwrites the accumulators (a tile's first K-tile).
__device__ __forceinline__ void wgmma_k_tile_m64n256_stepped(float (&acc)[128], uint64_t a_desc,
                                                             uint64_t b_desc,
                                                             bool accumulate = true) {
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
        wgmma_m64n256k16<1>(acc, a_desc + 2 * kk, b_desc + 128 * kk, kk > 0 || accumulate);
    }
    wgmma_commit();
}

// Write a warpgroup's m64 x Width accumulators (rows row0.., columns col0..) to C as bf16
// pairs, bounds-checked: the fragment layout of wgmma_m64n128k16 with Width / 8 column blocks.
template <int Width>
__device__ __forceinline__ void store_accumulators(bf16 *C, int ldc, int row0, int col0, int M,
                                                   int N, const float (&d)[Width / 2]) {
    const int warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
    const int row = row0 + 16 * warp + lane / 4;
#pragma unroll
    for (int j = 0; j < Width / 8; ++j) {
        const int col = col0 + 8 * j + 2 * (lane % 4);
        store_pair(C, ldc, row, col, M, N, d[4 * j + 0], d[4 * j + 1]);
        store_pair(C, ldc, row + 8, col, M, N, d[4 * j + 2], d[4 * j + 3]);
    }
}

// Write one m64n128 accumulator (rows row0.., columns col0..) of this warpgroup to C.
__device__ __forceinline__ void store_m64n128(bf16 *C, int ldc, int row0, int col0, int M, int N,
                                              const float (&d)[64]) {
    store_accumulators<128>(C, ldc, row0, col0, M, N, d);
}

// ---- mbarrier and TMA (sm_90) -------------------------------------------------------------

__device__ __forceinline__ void mbarrier_init(uint64_t *bar, int arrivals) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_address(bar)),
                 "r"(arrivals)
                 : "memory");
}

// Make initialised barriers visible to the TMA unit (the async proxy) and the cluster.
__device__ __forceinline__ void fence_barrier_init() {
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    fence_proxy_async();
}

// One plain arrival (a consumer releasing a stage to the producer).
__device__ __forceinline__ void mbarrier_arrive(uint64_t *bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_address(bar)) : "memory");
}

// One arrival that also tells the barrier to expect `bytes` more bytes of TMA traffic; the
// phase completes when the arrival count and the byte count both reach zero.
__device__ __forceinline__ void mbarrier_arrive_expect_tx(uint64_t *bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(
                     smem_address(bar)),
                 "r"(bytes)
                 : "memory");
}

// Spin until the phase with parity `parity` has completed.
__device__ __forceinline__ void mbarrier_wait(uint64_t *bar, uint32_t parity) {
    uint32_t done = 0;
    do {
        asm volatile(
            "{\n"
            ".reg .pred p;\n"
            "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
            "selp.u32 %0, 1, 0, p;\n"
            "}\n"
            : "=r"(done)
            : "r"(smem_address(bar)), "r"(parity)
            : "memory");
    } while (!done);
}

// A 2-D box of the tensor `map` describes, at element (inner, outer), into shared memory;
// completion is signalled to `bar` as bytes. Parts of the box outside the tensor arrive as
// zeros and still count their bytes.
__device__ __forceinline__ void tma_load_2d(void *smem, const void *map, int inner, int outer,
                                            uint64_t *bar) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
        " [%0], [%1, {%2, %3}], [%4];\n" ::"r"(smem_address(smem)),
        "l"(reinterpret_cast<uint64_t>(map)), "r"(inner), "r"(outer), "r"(smem_address(bar))
        : "memory");
}

// Dynamic shared memory rounded up to `Align` bytes (the swizzled tiles need 1024): the
// launcher adds Align bytes of slack so the rounded pointer stays inside the allocation.
template <int Align>
__device__ __forceinline__ unsigned char *aligned_dynamic_smem(unsigned char *base) {
    const uint32_t address = smem_address(base);
    return base + ((Align - (address % Align)) % Align);
}

// Warp specialisation: hand registers from the producer warpgroup (which only issues TMA) to
// the consumer warpgroups (which hold the accumulators). Every thread of a warpgroup must
// execute the same one; counts are multiples of 8 in 24..256.
template <int Registers>
__device__ __forceinline__ void release_registers() {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(Registers));
}

template <int Registers>
__device__ __forceinline__ void claim_registers() {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(Registers));
}

// ---- clusters, TMA multicast and TMA stores (steps 07+) ----------------------------------

__device__ __forceinline__ uint32_t cluster_cta_rank() {
    uint32_t rank;
    asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(rank));
    return rank;
}

__device__ __forceinline__ uint32_t cluster_index() {
    uint32_t index;
    asm volatile("mov.u32 %0, %%clusterid.x;\n" : "=r"(index));
    return index;
}

__device__ __forceinline__ uint32_t cluster_count() {
    uint32_t count;
    asm volatile("mov.u32 %0, %%nclusterid.x;\n" : "=r"(count));
    return count;
}

// Every thread of every CTA of the cluster: the barrier inits become visible cluster-wide
// (release/acquire), and at the end no CTA exits while a peer may still arrive on its
// mbarriers. Not .aligned: the warps reach it from different roles.
__device__ __forceinline__ void cluster_sync() {
    asm volatile(
        "barrier.cluster.arrive.release;\n"
        "barrier.cluster.wait.acquire;\n" ::
            : "memory");
}

// One arrival on the mbarrier at the same shared-memory offset in CTA `cta_rank` of the
// cluster (mapa turns the local address into that CTA's shared::cluster address). Default
// semantics (release at CTA scope), as CUTLASS's ClusterBarrier: an explicit .release.cluster
// compiles to MEMBAR.ALL.GPU, which would wait for this SM's in-flight global stores in the
// middle of the main loop. The wgmma reads this arrival publishes are already complete
// (wait_group) when it is made.
__device__ __forceinline__ void mbarrier_arrive_cluster(uint64_t *bar, uint32_t cta_rank) {
    asm volatile(
        "{\n"
        ".reg .b32 remote;\n"
        "mapa.shared::cluster.u32 remote, %0, %1;\n"
        "mbarrier.arrive.shared::cluster.b64 _, [remote];\n"
        "}\n" ::"r"(smem_address(bar)),
        "r"(cta_rank)
        : "memory");
}

// tma_load_2d delivered to every CTA of the cluster named in `cta_mask`: the box lands at the
// same shared-memory offset in each, and each one's mbarrier at `bar`'s offset receives the
// bytes. One L2 read feeds several SMs.
__device__ __forceinline__ void tma_load_2d_multicast(void *smem, const void *map, int inner,
                                                      int outer, uint64_t *bar,
                                                      uint16_t cta_mask) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
        ".multicast::cluster [%0], [%1, {%2, %3}], [%4], %5;\n" ::"r"(smem_address(smem)),
        "l"(reinterpret_cast<uint64_t>(map)), "r"(inner), "r"(outer), "r"(smem_address(bar)),
        "h"(cta_mask)
        : "memory");
}

// A 2-D box from shared memory to the tensor `map` describes, at element (inner, outer); the
// parts outside the tensor are not written. Completes asynchronously in a bulk group.
__device__ __forceinline__ void tma_store_2d(const void *map, const void *smem, int inner,
                                             int outer) {
    asm volatile(
        "cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];\n" ::"l"(
            reinterpret_cast<uint64_t>(map)),
        "r"(smem_address(smem)), "r"(inner), "r"(outer)
        : "memory");
}

__device__ __forceinline__ void bulk_commit() {
    asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
}

// Until at most `Pending` bulk groups still READ shared memory (their global writes may
// still be in flight): the source buffer can then be overwritten.
template <int Pending>
__device__ __forceinline__ void bulk_wait_read() {
    asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(Pending) : "memory");
}

// Until at most `Pending` bulk groups are incomplete, global writes included.
template <int Pending>
__device__ __forceinline__ void bulk_wait() {
    asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(Pending) : "memory");
}

// Four 8x8 b16 matrices from registers to shared memory: the inverse of ldmatrix_x4. Lanes
// 8i..8i+7 give the row addresses of matrix i; register i of lane t holds row t/4, columns
// 2(t%4) and 2(t%4)+1 of matrix i: exactly an m16n8 accumulator fragment once packed.
__device__ __forceinline__ void stmatrix_x4(void *smem, uint32_t r0, uint32_t r1, uint32_t r2,
                                            uint32_t r3) {
    asm volatile(
        "stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(
            smem_address(smem)),
        "r"(r0), "r"(r1), "r"(r2), "r"(r3)
        : "memory");
}

__device__ __forceinline__ uint32_t pack_bf16x2(float low, float high) {
    const __nv_bfloat162 pair = __floats2bfloat162_rn(low, high);
    return *reinterpret_cast<const uint32_t *>(&pair);
}

// A barrier for `threads` threads (a multiple of 32) on hardware barrier `id` (1..15; 0 is
// __syncthreads): one warpgroup can meet without stopping the others.
__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// Arrive on hardware barrier `id` without waiting: the other side of a named_barrier_sync
// whose `threads` count includes these arrivals (one warpgroup signals another).
__device__ __forceinline__ void named_barrier_arrive(int id, int threads) {
    asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
