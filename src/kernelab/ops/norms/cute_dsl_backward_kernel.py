"""The CuTe-DSL RMSNorm backward kernel (cute_dsl_backward.py plans and launches it). Imports
cutlass.

A persistent grid of CTAs; each walks rows bidx, bidx + grid, ... with the row's x and dy
held in registers, and keeps its fp32 dweight partial in registers across the rows:
  per row: read cols x itemsize (x) + cols x itemsize (dy) + w from L2, write cols x itemsize
  (dx); per CTA: write cols x 4 bytes of dweight partial, once.
  rstd = rsqrt(mean(x^2) + eps); c = mean(w*dy*x) * rstd^2
  dx = rstd * (w*dy - x * c); dweight += dy * x * rstd
BULK: the row's x and dy come into shared memory by two cp.async.bulk (the TMA unit) on one
mbarrier, one phase a row, then into registers (LDS.128); rows of whole 16-byte vectors only.
The next row's copies are issued as soon as the CTA's sums close (every thread has read the
buffers by then), so they fly while this row's dx is computed and stored. Shared bytes:
2 x tile_cols x itemsize, at most 2 x 8,192 x 4 = 64 KiB a CTA, 128 KiB for the two CTAs an
SM runs (of 228 KiB). w keeps its global loads (from L2 after the first rows).
"""

from __future__ import annotations

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass import Float32, Int32

from kernelab.ops.cute_cluster import bulk_slices, row_copy, warp_sum


@cute.jit
def cta_sums(a, b, slots: cute.Tensor, num_warps: cutlass.Constexpr):
    """The CTA's sums of a and b; `slots` is a shared [num_warps, 2] fp32 array, free again
    when this returns (the closing barrier: the next row's sums overwrite it)."""
    a = warp_sum(a)
    b = warp_sum(b)
    warp = cute.arch.warp_idx()
    if cute.arch.lane_idx() == 0:
        slots[warp, 0] = a
        slots[warp, 1] = b
    cute.arch.sync_threads()
    a = slots[0, 0]
    b = slots[0, 1]
    for w in cutlass.range_constexpr(1, num_warps):
        a = a + slots[w, 0]
        b = b + slots[w, 1]
    cute.arch.sync_threads()
    return a, b


@cute.kernel
def rmsnorm_backward_kernel(
    mX: cute.Tensor,
    mW: cute.Tensor,
    mDY: cute.Tensor,
    mDX: cute.Tensor,
    mP: cute.Tensor,
    eps: Float32,
    tiled_copy: cute.TiledCopy,
    tile_cols: cutlass.Constexpr,
    num_warps: cutlass.Constexpr,
    bulk: cutlass.Constexpr,
):
    tidx, _, _ = cute.arch.thread_idx()
    bidx, _, _ = cute.arch.block_idx()
    grid, _, _ = cute.arch.grid_dim()
    rows = mX.shape[0]
    n = mX.shape[1]

    smem = cutlass.utils.SmemAllocator()
    slots = smem.allocate_tensor(Float32, cute.make_layout((num_warps, 2), stride=(2, 1)), 16)

    thr = tiled_copy.get_slice(tidx)
    cX = cute.local_tile(cute.make_identity_tensor(mX.shape), (1, tile_cols), (0, 0))
    tXcX = thr.partition_S(cX)
    tXpX = cute.make_fragment(cute.make_layout(cute.size(tXcX, mode=[2])), cutlass.Boolean)
    for i in cutlass.range_constexpr(cute.size(tXpX)):
        tXpX[i] = cute.elem_less(tXcX[0, 0, i][1], n)
    tXgW = thr.partition_S(cute.local_tile(mW, (1, tile_cols), (0, 0)))
    tXgP = thr.partition_D(cute.local_tile(mP, (1, tile_cols), (bidx, 0)))

    tXrX = cute.make_fragment_like(tXgW)
    tXrDY = cute.make_fragment_like(tXgW)
    tXrW = cute.make_fragment_like(tXgW[None, None, 0])
    tXrO = cute.make_fragment_like(tXgW[None, None, 0])
    tXrP = cute.make_fragment_like(tXgP, Float32)
    tXrP.fill(0.0)

    phase = Int32(0)  # the parity of the loads' mbarrier phase this row waits for
    if cutlass.const_expr(bulk):
        # x and dy through shared memory: thread 0 makes the mbarrier and has the TMA unit
        # bring the first row (grid <= rows: every CTA has one)
        sX = smem.allocate_tensor(mX.element_type, cute.make_layout((1, tile_cols)), 128)
        sDY = smem.allocate_tensor(mX.element_type, cute.make_layout((1, tile_cols)), 128)
        loaded = smem.allocate_array(cutlass.Int64, num_elems=1)
        if tidx == 0:
            cute.arch.mbarrier_init(loaded, 1)
            cute.arch.mbarrier_init_fence()
            bulk_slices(loaded, (sX, sDY), (cute.local_tile(mX, (1, tile_cols), (bidx, 0)),
                        cute.local_tile(mDY, (1, tile_cols), (bidx, 0))), n)  # fmt: skip
        cute.arch.sync_threads()  # no thread waits on the mbarrier before it is made
        tXsX = thr.partition_S(sX)
        tXsDY = thr.partition_S(sDY)

    for row in cutlass.range(bidx, rows, grid):
        if cutlass.const_expr(bulk):
            cute.arch.mbarrier_wait(loaded, phase)
            phase = phase ^ 1
            tXgX = tXsX  # the row's x and dy, read from shared memory below
            tXgDY = tXsDY
        else:
            tXgX = thr.partition_S(cute.local_tile(mX, (1, tile_cols), (row, 0)))
            tXgDY = thr.partition_S(cute.local_tile(mDY, (1, tile_cols), (row, 0)))
        tXgDX = thr.partition_D(cute.local_tile(mDX, (1, tile_cols), (row, 0)))
        tXrX.fill(0.0)  # the tail adds nothing to either sum
        tXrDY.fill(0.0)
        squares = Float32(0.0)
        products = Float32(0.0)
        for i in cutlass.range_constexpr(cute.size(tXpX)):
            if tXpX[i]:
                cute.copy(tiled_copy, tXgX[None, None, i], tXrX[None, None, i])
                cute.copy(tiled_copy, tXgDY[None, None, i], tXrDY[None, None, i])
                cute.copy(tiled_copy, tXgW[None, None, i], tXrW)  # from L2 after the first row
                xi = tXrX[None, None, i].load().to(Float32)
                wdy = tXrW.load().to(Float32) * tXrDY[None, None, i].load().to(Float32)
                squares = squares + (xi * xi).reduce(
                    cute.ReductionOp.ADD, init_val=Float32(0.0), reduction_profile=0
                )
                products = products + (wdy * xi).reduce(
                    cute.ReductionOp.ADD, init_val=Float32(0.0), reduction_profile=0
                )
        squares, products = cta_sums(squares, products, slots, num_warps)
        if cutlass.const_expr(bulk):
            # every thread has read this row's x and dy (cta_sums closes on a barrier): the
            # buffers take the next row's while this one's dx is computed and stored
            if tidx == 0 and row + grid < rows:
                after = (row + grid, 0)
                bulk_slices(loaded, (sX, sDY), (cute.local_tile(mX, (1, tile_cols), after),
                            cute.local_tile(mDY, (1, tile_cols), after)), n)  # fmt: skip
        rstd = cute.math.rsqrt(squares / n + eps, fastmath=False)
        c = products / n * rstd * rstd
        for i in cutlass.range_constexpr(cute.size(tXpX)):
            if tXpX[i]:
                cute.copy(tiled_copy, tXgW[None, None, i], tXrW)
                xi = tXrX[None, None, i].load().to(Float32)
                dyi = tXrDY[None, None, i].load().to(Float32)
                tXrO.store(((tXrW.load().to(Float32) * dyi - xi * c) * rstd).to(tXrO.element_type))
                cute.copy(tiled_copy, tXrO, tXgDX[None, None, i])
                tXrP[None, None, i].store(tXrP[None, None, i].load() + dyi * xi * rstd)

    for i in cutlass.range_constexpr(cute.size(tXpX)):
        if tXpX[i]:
            tXgP[None, None, i].store(tXrP[None, None, i].load())


@cute.jit
def rmsnorm_backward_launch(
    mX: cute.Tensor,
    mW: cute.Tensor,
    mDY: cute.Tensor,
    mDX: cute.Tensor,
    mP: cute.Tensor,
    eps: Float32,
    stream: cuda.CUstream,
    vec: cutlass.Constexpr,
    threads: cutlass.Constexpr,
    tile_cols: cutlass.Constexpr,
    bulk: cutlass.Constexpr = False,
):
    tiled_copy = row_copy(mX.element_type, vec, threads)
    grid = cute.size(mP, mode=[0])  # one CTA per partial row (dynamic: one compile serves all)
    kernel = rmsnorm_backward_kernel(mX, mW, mDY, mDX, mP, eps, tiled_copy, tile_cols,
                                     threads // 32, bulk)  # fmt: skip
    kernel.launch(grid=(grid, 1, 1), block=(threads, 1, 1), stream=stream)
