"""The CuTe-DSL softmax kernel (cute_dsl.py plans and launches it). Imports cutlass.

One row per cluster of C CTAs (C = 1 for rows that one CTA holds); each CTA holds its slice
of cols_per_cta values in registers, read once by 128-bit loads and written once:
  read  cols x itemsize, write cols x itemsize per row (the ideal traffic, nothing more);
  on the SM-to-SM network 2 x 4 bytes per CTA pair of the cluster, once.
The statistics are folded online in the log2 domain: each thread's (max, sum 2^(x-max)),
then warp, CTA and cluster (../cute_cluster.py), so one exchange gives both max and sum. The
cluster exchange lands on an mbarrier (MBARRIER, the default: each CTA waits for its peers'
pairs only) or is closed by a cluster barrier. BULK: the CTA's slice comes into shared memory
by one cp.async.bulk (the TMA unit) on an mbarrier, then into registers (LDS.128), instead of
each thread's 128-bit global loads; rows of whole 16-byte vectors only.
"""

from __future__ import annotations

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass import Float32

from kernelab.ops.cute_cluster import (
    FINITE_LOWEST,
    LOG2_E,
    arm_exchange,
    cluster_pair,
    cta_pair,
    load_row_slice,
    row_copy,
)


@cute.kernel
def softmax_kernel(
    mX: cute.Tensor,
    mO: cute.Tensor,
    tiled_copy: cute.TiledCopy,
    tile_cols: cutlass.Constexpr,
    num_warps: cutlass.Constexpr,
    cluster: cutlass.Constexpr,
    mbarrier: cutlass.Constexpr,
    bulk: cutlass.Constexpr,
):
    tidx, _, _ = cute.arch.thread_idx()
    # clusters group consecutive blocks along x: block x = row x cluster + rank (rows along
    # x, whose limit is 2^31 - 1, not y's 65,535)
    bidx, _, _ = cute.arch.block_idx()
    row = bidx // cluster
    rank = bidx % cluster

    smem = cutlass.utils.SmemAllocator()
    slots = smem.allocate_tensor(Float32, cute.make_layout((num_warps, 2), stride=(2, 1)), 16)
    peers = smem.allocate_tensor(Float32, cute.make_layout((cluster, 2), stride=(2, 1)), 16)
    arrived = smem.allocate_array(cutlass.Int64, num_elems=1)  # the exchange's mbarrier
    if cutlass.const_expr(cluster > 1):
        if cutlass.const_expr(mbarrier):
            arm_exchange(arrived, cluster * 8)  # a (max, sum) pair from each CTA
        cute.arch.cluster_arrive_relaxed()  # waited on before the first remote store

    # this CTA's slice of the row: one (1, tile_cols) tile, and the coordinates for bounds
    gX = cute.local_tile(mX, (1, tile_cols), (row, rank))
    gO = cute.local_tile(mO, (1, tile_cols), (row, rank))
    cX = cute.local_tile(cute.make_identity_tensor(mX.shape), (1, tile_cols), (row, rank))
    thr = tiled_copy.get_slice(tidx)
    tXgX = thr.partition_S(gX)
    tXgO = thr.partition_D(gO)
    tXcX = thr.partition_S(cX)
    tXrX = cute.make_fragment_like(tXgX)
    # one predicate per 128-bit vector: the row length is a multiple of the vector width
    tXpX = cute.make_fragment(cute.make_layout(cute.size(tXcX, mode=[2])), cutlass.Boolean)
    for i in cutlass.range_constexpr(cute.size(tXpX)):
        tXpX[i] = cute.elem_less(tXcX[0, 0, i][1], mX.shape[1])
    tXrX.fill(float("-inf"))  # the tail past the row end: no effect on max or sum
    load_row_slice(tiled_copy, thr, gX, tXgX, tXrX, tXpX, smem, mX.shape[1], rank, tile_cols,
                   bulk)  # fmt: skip

    # log2 domain: 2^(x log2e - m) = e^(x - m/log2e); one FMUL saved per exp
    x = tXrX.load().to(Float32) * LOG2_E
    m = x.reduce(cute.ReductionOp.MAX, init_val=-Float32.inf, reduction_profile=0)
    local = cute.arch.fmax(m, Float32(FINITE_LOWEST))
    e = cute.math.exp2(x - local, fastmath=True)  # one exp per value, kept for the output
    s = e.reduce(cute.ReductionOp.ADD, init_val=Float32(0.0), reduction_profile=0)
    m, s = cta_pair(m, s, slots, num_warps)
    if cutlass.const_expr(cluster > 1):
        cute.arch.cluster_wait()
        m, s = cluster_pair(m, s, peers, arrived, rank, cluster, mbarrier)
    # e was taken against this thread's own max: rescale to the row's (a row of only -inf
    # gives 0 x inf = NaN, as torch.softmax does)
    scale = cute.math.exp2(local - cute.arch.fmax(m, Float32(FINITE_LOWEST)), fastmath=True)
    y = e * (scale * cute.arch.rcp_approx(s))

    tXrO = cute.make_fragment_like(tXgO)
    tXrO.store(y.to(tXrO.element_type))
    for i in cutlass.range_constexpr(cute.size(tXpX)):
        if tXpX[i]:
            cute.copy(tiled_copy, tXrO[None, None, i], tXgO[None, None, i])


@cute.jit
def softmax_launch(
    mX: cute.Tensor,
    mO: cute.Tensor,
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
    kernel = softmax_kernel(mX, mO, tiled_copy, tile_cols, threads // 32, cluster, mbarrier, bulk)
    kernel.launch(
        grid=(cluster * rows, 1, 1),
        block=(threads, 1, 1),
        cluster=(cluster, 1, 1),
        stream=stream,
    )
