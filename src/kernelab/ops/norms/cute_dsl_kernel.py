"""The CuTe-DSL RMSNorm forward kernel (cute_dsl.py plans and launches it). Imports cutlass.

y = x * rsqrt(mean(x^2) + eps) * w, one row per cluster of C CTAs (C = 1 for rows one CTA
holds), the row slice held in registers between the statistic and the output:
  read  cols x itemsize (x) + cols x itemsize (w, shared by every row: L2-resident after the
  first rows), write cols x itemsize per row; 4 bytes per CTA pair over DSMEM, once, landing
  on the receiving CTA's mbarrier (MBARRIER, the default) or closed by a cluster barrier.
BULK: the CTA's slice of x comes into shared memory by one cp.async.bulk (the TMA unit) on an
mbarrier, then into registers (LDS.128), instead of each thread's 128-bit global loads; rows of
whole 16-byte vectors only. Shared bytes: tile_cols x itemsize, at most 32,768 x 4 = 128 KiB
(of the 227 KiB a CTA may take on sm_90). w keeps its global loads: its slice beside x's would
be 256 KiB at that tile, and w is read from L2 after the first rows anyway.
"""

from __future__ import annotations

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass import Float32

from kernelab.ops.cute_cluster import (
    arm_exchange,
    cluster_sum,
    cta_sum,
    load_row_slice,
    row_copy,
)


@cute.kernel
def rmsnorm_kernel(
    mX: cute.Tensor,
    mW: cute.Tensor,
    mO: cute.Tensor,
    eps: Float32,
    tiled_copy: cute.TiledCopy,
    tile_cols: cutlass.Constexpr,
    num_warps: cutlass.Constexpr,
    cluster: cutlass.Constexpr,
    mbarrier: cutlass.Constexpr,
    bulk: cutlass.Constexpr,
):
    tidx, _, _ = cute.arch.thread_idx()
    bidx, _, _ = cute.arch.block_idx()  # block x = row x cluster + rank, as the softmax's
    row = bidx // cluster
    rank = bidx % cluster

    smem = cutlass.utils.SmemAllocator()
    slots = smem.allocate_tensor(Float32, cute.make_layout(num_warps), 16)
    peers = smem.allocate_tensor(Float32, cute.make_layout(cluster), 16)
    arrived = smem.allocate_array(cutlass.Int64, num_elems=1)  # the exchange's mbarrier
    if cutlass.const_expr(cluster > 1):
        if cutlass.const_expr(mbarrier):
            arm_exchange(arrived, cluster * 4)  # a sum of squares from each CTA
        cute.arch.cluster_arrive_relaxed()

    gX = cute.local_tile(mX, (1, tile_cols), (row, rank))
    gW = cute.local_tile(mW, (1, tile_cols), (0, rank))  # w viewed as [1, cols]
    gO = cute.local_tile(mO, (1, tile_cols), (row, rank))
    cX = cute.local_tile(cute.make_identity_tensor(mX.shape), (1, tile_cols), (row, rank))
    thr = tiled_copy.get_slice(tidx)
    tXgX = thr.partition_S(gX)
    tXgW = thr.partition_S(gW)
    tXgO = thr.partition_D(gO)
    tXcX = thr.partition_S(cX)
    tXrX = cute.make_fragment_like(tXgX)
    tXpX = cute.make_fragment(cute.make_layout(cute.size(tXcX, mode=[2])), cutlass.Boolean)
    for i in cutlass.range_constexpr(cute.size(tXpX)):
        tXpX[i] = cute.elem_less(tXcX[0, 0, i][1], mX.shape[1])
    tXrX.fill(0.0)  # the tail adds nothing to the sum of squares
    load_row_slice(tiled_copy, thr, gX, tXgX, tXrX, tXpX, smem, mX.shape[1], rank, tile_cols,
                   bulk)  # fmt: skip

    x = tXrX.load().to(Float32)
    v = (x * x).reduce(cute.ReductionOp.ADD, init_val=Float32(0.0), reduction_profile=0)
    v = cta_sum(v, slots, num_warps)
    if cutlass.const_expr(cluster > 1):
        cute.arch.cluster_wait()
        v = cluster_sum(v, peers, arrived, rank, cluster, mbarrier)
    rstd = cute.math.rsqrt(v / mX.shape[1] + eps, fastmath=True)

    # w one vector at a time: holding it whole beside x would spill at 32 values a thread
    tXrW = cute.make_fragment_like(tXgW[None, None, 0])
    tXrO = cute.make_fragment_like(tXgO[None, None, 0])
    for i in cutlass.range_constexpr(cute.size(tXpX)):
        if tXpX[i]:
            cute.copy(tiled_copy, tXgW[None, None, i], tXrW)
            xi = tXrX[None, None, i].load().to(Float32)
            tXrO.store((xi * rstd * tXrW.load().to(Float32)).to(tXrO.element_type))
            cute.copy(tiled_copy, tXrO, tXgO[None, None, i])


@cute.jit
def rmsnorm_launch(
    mX: cute.Tensor,
    mW: cute.Tensor,
    mO: cute.Tensor,
    eps: Float32,
    stream: cuda.CUstream,
    vec: cutlass.Constexpr,
    threads: cutlass.Constexpr,
    tile_cols: cutlass.Constexpr,
    cluster: cutlass.Constexpr,
    mbarrier: cutlass.Constexpr = True,
    bulk: cutlass.Constexpr = False,
):
    tiled_copy = row_copy(mX.element_type, vec, threads)
    rows = cute.size(mX, mode=[0])
    kernel = rmsnorm_kernel(mX, mW, mO, eps, tiled_copy, tile_cols, threads // 32, cluster,
                            mbarrier, bulk)  # fmt: skip
    kernel.launch(
        grid=(cluster * rows, 1, 1),
        block=(threads, 1, 1),
        cluster=(cluster, 1, 1),
        stream=stream,
    )
