"""The CuTe-DSL Hopper bf16 GEMM kernel (cute_dsl.py plans and launches it). Imports cutlass.

Warp-specialised and persistent, as the CUDA C++ ladder's top steps:
  warpgroup 0     producer: setmaxnreg down to 40; one warp walks the tiles, and for each
                  k-tile waits the slot's "empty" mbarrier, arms "full" with the slot's bytes
                  (BM x BK + BN x BK bf16) and issues the two TMA loads into it;
  warpgroups 1-2  consumers: setmaxnreg up to 232; each owns 64 x BN of the tile's
                  accumulators (128 fp32 a thread), waits "full", issues BK / 16 wgmma
                  m64n256k16 on the slot, keeps one wgmma group in flight, and releases the
                  previous slot; then stores its accumulators to C as bf16.
Per tile: reads (BM + BN) x K bf16 through TMA, writes BM x BN bf16; B is read as [N, K]
with N contiguous (torch's [K, N] row-major transposed as a view: no copy), so its wgmma
operand is MN-major. TMA fills out-of-range rows and columns with zeros; the epilogue masks
the stores past M and N.
"""

from __future__ import annotations

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
import cutlass.utils as utils
import cutlass.utils.hopper_helpers as sm90
from cutlass import BFloat16, Float32
from cutlass.cute.nvgpu import cpasync, warpgroup

PRODUCER_REGS = 40
CONSUMER_REGS = 232


class HopperGemm:
    """One compiled configuration: tile (bm, bn, bk), `stages` slots, `consumers` warpgroups."""

    def __init__(self, bm: int, bn: int, bk: int, stages: int, consumers: int, cluster_m: int = 1):
        self.tile = (bm, bn, bk)
        self.stages = stages
        self.consumers = consumers
        self.threads = 128 * (consumers + 1)
        # cluster_m CTAs along M share each B tile: each loads 1 / cluster_m of it by TMA
        # multicast into every peer's slot, so B crosses L2 -> SM once per cluster
        self.cluster_m = cluster_m

    def _smem_layout(self, layout: utils.LayoutEnum, rows: int, major: int):
        """Swizzled (rows, BK, stages) slots for one operand: the 128-byte swizzle atom wgmma
        reads without bank conflicts and TMA writes in the same pattern."""
        atom = warpgroup.make_smem_layout_atom(
            sm90.get_smem_layout_atom(layout, BFloat16, major), BFloat16
        )
        order = (0, 1, 2) if layout == utils.LayoutEnum.ROW_MAJOR else (1, 0, 2)
        return cute.tile_to_shape(atom, (rows, self.tile[2], self.stages), order=order)

    @cute.jit
    def __call__(
        self,
        mA: cute.Tensor,
        mB: cute.Tensor,
        mC: cute.Tensor,
        max_ctas: cutlass.Int32,
        stream: cuda.CUstream,
    ):
        bm, bn, bk = self.tile
        a_layout = utils.LayoutEnum.from_tensor(mA)  # [M, K], K contiguous
        b_layout = utils.LayoutEnum.from_tensor(mB)  # [N, K], N contiguous
        tiled_mma = sm90.make_trivial_tiled_mma(
            BFloat16,
            BFloat16,
            a_layout.sm90_mma_major_mode(),
            b_layout.sm90_mma_major_mode(),
            Float32,
            atom_layout_mnk=(self.consumers, 1, 1),
            tiler_mn=(64, bn),
        )
        a_major = bk if a_layout == utils.LayoutEnum.ROW_MAJOR else bm
        b_major = bk if b_layout == utils.LayoutEnum.ROW_MAJOR else bn
        sA_layout = self._smem_layout(a_layout, bm, a_major)
        sB_layout = self._smem_layout(b_layout, bn, b_major)
        tma_a, tma_mA = cpasync.make_tiled_tma_atom(
            cpasync.CopyBulkTensorTileG2SOp(), mA, cute.slice_(sA_layout, (None, None, 0)), (bm, bk)
        )
        b_op = cpasync.CopyBulkTensorTileG2SOp()
        if cutlass.const_expr(self.cluster_m > 1):
            b_op = cpasync.CopyBulkTensorTileG2SMulticastOp()
        tma_b, tma_mB = cpasync.make_tiled_tma_atom(
            b_op, mB, cute.slice_(sB_layout, (None, None, 0)), (bn, bk),
            num_multicast=self.cluster_m,
        )  # fmt: skip
        tiles = (cute.ceil_div(mC.shape[0], bm), cute.ceil_div(mC.shape[1], bn), 1)
        sched = utils.PersistentTileSchedulerParams(tiles, (self.cluster_m, 1, 1))
        grid = utils.StaticPersistentTileScheduler.get_grid_shape(sched, max_ctas // self.cluster_m)
        smem_bytes = (cute.cosize(sA_layout) + cute.cosize(sB_layout)) * 2 + 2 * self.stages * 8
        self.kernel(
            tma_a, tma_mA, tma_b, tma_mB, mC, tiled_mma, sA_layout, sB_layout, sched
        ).launch(
            grid=grid,
            block=(self.threads, 1, 1),
            cluster=(self.cluster_m, 1, 1),
            smem=smem_bytes + 2048,  # + alignment of the swizzled slots
            stream=stream,
        )

    @cute.kernel
    def kernel(
        self,
        tma_a: cute.CopyAtom,
        mA: cute.Tensor,
        tma_b: cute.CopyAtom,
        mB: cute.Tensor,
        mC: cute.Tensor,
        tiled_mma: cute.TiledMma,
        sA_layout: cute.ComposedLayout,
        sB_layout: cute.ComposedLayout,
        sched: utils.PersistentTileSchedulerParams,
    ):
        bm, bn, bk = self.tile
        tidx, _, _ = cute.arch.thread_idx()
        warp = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        if warp == 0:
            cpasync.prefetch_descriptor(tma_a)
            cpasync.prefetch_descriptor(tma_b)

        smem = utils.SmemAllocator()
        barriers = smem.allocate_array(cutlass.Int64, num_elems=2 * self.stages)
        sA = smem.allocate_tensor(BFloat16, sA_layout.outer, 1024, sA_layout.inner)
        sB = smem.allocate_tensor(BFloat16, sB_layout.outer, 1024, sB_layout.inner)
        slot_bytes = (bm + bn) * bk * 2  # what lands in each CTA's slot, from all loads
        cluster = cute.make_layout((self.cluster_m, 1, 1))  # CTAs of a cluster along M
        coord = cluster.get_flat_coord(
            cute.arch.make_warp_uniform(cute.arch.block_idx_in_cluster())
        )
        b_mask = cute.make_layout_image_mask(cluster, coord, mode=0)  # peers sharing n
        ring = pipeline.PipelineTmaAsync.create(
            num_stages=self.stages,
            producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread),
            # a slot is free once every consumer warp of every CTA that writes into it (by
            # multicast) released it: one arrive per warp per such CTA
            consumer_group=pipeline.CooperativeGroup(
                pipeline.Agent.Thread, 4 * self.consumers * self.cluster_m
            ),
            tx_count=slot_bytes,
            barrier_storage=barriers,
            cta_layout_vmnk=cute.make_layout((1, self.cluster_m, 1, 1)),
        )

        scheduler = utils.StaticPersistentTileScheduler.create(
            sched, cute.arch.block_idx(), cute.arch.grid_dim()
        )
        work = scheduler.initial_work_tile_info()
        k_tiles = cute.ceil_div(mA.shape[1], bk)

        if warp < 4:  # the producer warpgroup
            cute.arch.warpgroup_reg_dealloc(PRODUCER_REGS)
            if warp == 0:
                state = pipeline.make_pipeline_state(
                    pipeline.PipelineUserType.Producer, self.stages
                )
                while work.is_valid_tile:
                    m, n, _ = work.tile_idx
                    gA = cute.local_tile(mA, (bm, bk), (m, None))  # (BM, BK, k-tiles)
                    gB = cute.local_tile(mB, (bn, bk), (n, None))
                    tAsA, tAgA = cpasync.tma_partition(
                        tma_a, 0, cute.make_layout(1),
                        cute.group_modes(sA, 0, 2), cute.group_modes(gA, 0, 2),
                    )  # fmt: skip
                    tBsB, tBgB = cpasync.tma_partition(  # this CTA's share of the B tile
                        tma_b, coord[0], cute.make_layout(self.cluster_m),
                        cute.group_modes(sB, 0, 2), cute.group_modes(gB, 0, 2),
                    )  # fmt: skip
                    for k in cutlass.range(k_tiles, unroll=1):
                        ring.producer_acquire(state)  # wait "empty", arm "full"
                        full = ring.producer_get_barrier(state)
                        cute.copy(tma_a, tAgA[None, k], tAsA[None, state.index], tma_bar_ptr=full)
                        if cutlass.const_expr(self.cluster_m > 1):
                            cute.copy(tma_b, tBgB[None, k], tBsB[None, state.index],
                                      tma_bar_ptr=full, mcast_mask=b_mask)  # fmt: skip
                        else:
                            cute.copy(tma_b, tBgB[None, k], tBsB[None, state.index],
                                      tma_bar_ptr=full)  # fmt: skip
                        ring.producer_commit(state)
                        state.advance()
                    scheduler.advance_to_next_work()
                    work = scheduler.get_current_work()
                ring.producer_tail(state)
        else:  # the consumer warpgroups
            cute.arch.warpgroup_reg_alloc(CONSUMER_REGS)
            thr_mma = tiled_mma.get_slice(tidx - 128)
            tCrA = tiled_mma.make_fragment_A(thr_mma.partition_A(sA))
            tCrB = tiled_mma.make_fragment_B(thr_mma.partition_B(sB))
            k_blocks = cute.size(tCrA, mode=[2])
            read = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.stages)
            done = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.stages)
            tiled_mma.set(warpgroup.Field.ACCUMULATE, True)
            while work.is_valid_tile:
                m, n, _ = work.tile_idx
                gC = cute.local_tile(mC, (bm, bn), (m, n))
                cC = cute.local_tile(cute.make_identity_tensor(mC.shape), (bm, bn), (m, n))
                tCgC = thr_mma.partition_C(gC)
                tCcC = thr_mma.partition_C(cC)
                acc = cute.make_fragment(tCgC.shape, Float32)
                acc.fill(0.0)
                for k in cutlass.range(k_tiles, unroll=1):
                    ring.consumer_wait(read)
                    warpgroup.fence()
                    for kb in cutlass.range_constexpr(k_blocks):
                        cute.gemm(tiled_mma, acc, tCrA[None, None, kb, read.index],
                                  tCrB[None, None, kb, read.index], acc)  # fmt: skip
                    warpgroup.commit_group()
                    warpgroup.wait_group(1)  # the previous k-tile's wgmma are done: free it
                    if k > 0:
                        ring.consumer_release(done)
                        done.advance()
                    read.advance()
                warpgroup.wait_group(0)
                ring.consumer_release(done)
                done.advance()
                # epilogue: bf16 from registers; whole tiles by vectors (each thread holds
                # column pairs: 4-byte stores), tiles at the edges of C masked value by value
                inside = ((m + 1) * bm <= mC.shape[0]) & ((n + 1) * bn <= mC.shape[1])
                if inside:
                    rC = cute.make_fragment_like(acc, BFloat16)
                    rC.store(acc.load().to(BFloat16))
                    cute.autovec_copy(rC, tCgC)
                else:
                    for i in cutlass.range_constexpr(cute.size(acc)):
                        if cute.elem_less(tCcC[i], mC.shape):
                            tCgC[i] = acc[i].to(BFloat16)
                scheduler.advance_to_next_work()
                work = scheduler.get_current_work()


def lower_args(plan, a, b, out, sms: int):
    """The arguments of HopperGemm(...)(...) for torch tensors a [M, K], b [K, N], out [M, N]
    (b passed as its transposed view [N, K]: N contiguous)."""
    from cutlass.cute.runtime import from_dlpack

    def dynamic(t, order, contiguous_mode):
        """Both extents dynamic, the contiguous one (and so the other's stride) a multiple of
        8 elements: 16-byte rows, which TMA needs and which lets C's stores be vectors."""
        t = from_dlpack(t, assumed_align=16)
        t = t.mark_compact_shape_dynamic(mode=contiguous_mode, stride_order=order, divisibility=8)
        return t.mark_compact_shape_dynamic(mode=1 - contiguous_mode, stride_order=order)

    tensors = [dynamic(a, (0, 1), 1), dynamic(b.t(), (1, 0), 0), dynamic(out, (0, 1), 1)]
    return tensors, cutlass.Int32(sms)
