"""The CuTe-DSL softmax backward kernel (cute_dsl_backward.py plans and launches it). Imports
cutlass.

dx = y * (dy - dy . y), one row per cluster of C CTAs (C = 1 for rows one CTA holds), the
row slices of y and dy held in registers between the dot product and dx:
  read  cols x itemsize (y) + cols x itemsize (dy), write cols x itemsize (dx) per row: the
  ideal traffic; 4 bytes per CTA pair over DSMEM, once, landing on the receiving CTA's
  mbarrier (MBARRIER, the default, as the forward's) or closed by a cluster barrier.
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
    row_copy,
)


@cute.kernel
def softmax_backward_kernel(
    mY: cute.Tensor,
    mDY: cute.Tensor,
    mDX: cute.Tensor,
    tiled_copy: cute.TiledCopy,
    tile_cols: cutlass.Constexpr,
    num_warps: cutlass.Constexpr,
    cluster: cutlass.Constexpr,
    mbarrier: cutlass.Constexpr,
):
    tidx, _, _ = cute.arch.thread_idx()
    bidx, _, _ = cute.arch.block_idx()  # block x = row x cluster + rank, as the forward's
    row = bidx // cluster
    rank = bidx % cluster

    smem = cutlass.utils.SmemAllocator()
    slots = smem.allocate_tensor(Float32, cute.make_layout(num_warps), 16)
    peers = smem.allocate_tensor(Float32, cute.make_layout(cluster), 16)
    arrived = smem.allocate_array(cutlass.Int64, num_elems=1)  # the exchange's mbarrier
    if cutlass.const_expr(cluster > 1):
        if cutlass.const_expr(mbarrier):
            arm_exchange(arrived, cluster * 4)  # a partial dot product from each CTA
        cute.arch.cluster_arrive_relaxed()  # waited on before the first remote store

    gY = cute.local_tile(mY, (1, tile_cols), (row, rank))
    gDY = cute.local_tile(mDY, (1, tile_cols), (row, rank))
    gDX = cute.local_tile(mDX, (1, tile_cols), (row, rank))
    cY = cute.local_tile(cute.make_identity_tensor(mY.shape), (1, tile_cols), (row, rank))
    thr = tiled_copy.get_slice(tidx)
    tYgY = thr.partition_S(gY)
    tYgDY = thr.partition_S(gDY)
    tYgDX = thr.partition_D(gDX)
    tYcY = thr.partition_S(cY)
    tYrY = cute.make_fragment_like(tYgY)
    tYrDY = cute.make_fragment_like(tYgDY)
    tYpY = cute.make_fragment(cute.make_layout(cute.size(tYcY, mode=[2])), cutlass.Boolean)
    for i in cutlass.range_constexpr(cute.size(tYpY)):
        tYpY[i] = cute.elem_less(tYcY[0, 0, i][1], mY.shape[1])
    tYrY.fill(0.0)  # the tail past the row end adds nothing to the dot product
    tYrDY.fill(0.0)
    for i in cutlass.range_constexpr(cute.size(tYpY)):
        if tYpY[i]:
            cute.copy(tiled_copy, tYgY[None, None, i], tYrY[None, None, i])
            cute.copy(tiled_copy, tYgDY[None, None, i], tYrDY[None, None, i])

    y = tYrY.load().to(Float32)
    dy = tYrDY.load().to(Float32)
    dot = (y * dy).reduce(cute.ReductionOp.ADD, init_val=Float32(0.0), reduction_profile=0)
    dot = cta_sum(dot, slots, num_warps)
    if cutlass.const_expr(cluster > 1):
        cute.arch.cluster_wait()
        dot = cluster_sum(dot, peers, arrived, rank, cluster, mbarrier)

    tYrDX = cute.make_fragment_like(tYgDX)
    tYrDX.store((y * (dy - dot)).to(tYrDX.element_type))
    for i in cutlass.range_constexpr(cute.size(tYpY)):
        if tYpY[i]:
            cute.copy(tiled_copy, tYrDX[None, None, i], tYgDX[None, None, i])


@cute.jit
def softmax_backward_launch(
    mY: cute.Tensor,
    mDY: cute.Tensor,
    mDX: cute.Tensor,
    stream: cuda.CUstream,
    vec: cutlass.Constexpr,
    threads: cutlass.Constexpr,
    tile_cols: cutlass.Constexpr,
    cluster: cutlass.Constexpr,
    mbarrier: cutlass.Constexpr = True,
):
    tiled_copy = row_copy(mY.element_type, vec, threads)
    rows = cute.size(mY, mode=[0])
    kernel = softmax_backward_kernel(mY, mDY, mDX, tiled_copy, tile_cols, threads // 32,
                                     cluster, mbarrier)  # fmt: skip
    kernel.launch(
        grid=(cluster * rows, 1, 1),
        block=(threads, 1, 1),
        cluster=(cluster, 1, 1),
        stream=stream,
    )
