"""The row reductions the CuTe-DSL softmax and RMSNorm share: warp, CTA and thread-block
cluster (through distributed shared memory), and the inline PTX the 4.2.1 DSL has no
wrapper for. Imports cutlass at the top: only the CuTe-DSL kernel modules import it.

A row split over the C CTAs of a cluster is reduced in three levels:
  warp     butterfly shuffles, every lane ends with the warp's value
  CTA      lane 0 of each warp writes one slot of a shared array; every thread folds them
  cluster  thread r of each CTA writes the CTA's value into slot [own rank] of CTA r's
           shared array (mapa + a store over the SM-to-SM network: 4 or 8 bytes), and every
           thread folds the C slots from its own shared memory once all have landed. Two ways
           to know they have:
             mbarrier  (the default) the store is st.async with complete_tx on the receiving
                       CTA's mbarrier, armed at the kernel's start for C values' bytes: each
                       CTA waits for its own C arrivals only, never for the whole cluster;
             barrier   st.shared::cluster, then one cluster barrier (arrive has release, wait
                       acquire semantics): every CTA waits for every other's stores.
           Either way one cluster barrier at the start (after the mbarrier's init) makes every
           CTA's shared memory and mbarrier live before the first remote store.
Softmax carries (max, sum of exp(x - max)) pairs, folded online, so one exchange serves
both statistics; RMSNorm carries one sum of squares.
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass import Float32, Int32
from cutlass._mlir.dialects import llvm
from cutlass.cutlass_dsl import T, dsl_user_op

LOG2_E = 1.4426950408889634
FINITE_LOWEST = -3.4028234663852886e38  # stands in for -inf as a max, so exp(-inf - it) = 0


def row_copy(element_type, vec, threads):
    """The tiled copy every row kernel loads and stores with: `threads` threads side by side
    along the row, each moving `vec` contiguous elements per access (128-bit where the row
    allows it). Runs at trace time inside a @cute.jit launcher."""
    atom = cute.make_copy_atom(
        cute.nvgpu.CopyUniversalOp(), element_type, num_bits_per_copy=vec * element_type.width
    )
    return cute.make_tiled_copy_tv(
        atom,
        cute.make_layout((1, threads), stride=(threads, 1)),
        cute.make_layout((1, vec), stride=(vec, 1)),
    )


def _in_peer(smem_ptr: cute.Pointer, peer: Int32, *, loc=None, ip=None):
    """The 32-bit shared::cluster address that `smem_ptr` (this CTA's) has in CTA `peer`."""
    local = smem_ptr.toint(loc=loc, ip=ip).ir_value()
    return llvm.inline_asm(
        T.i32(),
        [local, Int32(peer).ir_value(loc=loc, ip=ip)],
        "mapa.shared::cluster.u32 $0, $1, $2;",
        "=r,r,r",
        has_side_effects=False,
        is_align_stack=False,
        asm_dialect=llvm.AsmDialect.AD_ATT,
    )


@dsl_user_op
def store_to_peer(smem_ptr: cute.Pointer, value: Float32, peer: Int32, *, loc=None, ip=None):
    """st.shared::cluster.f32 of `value` at the address `smem_ptr` has in CTA `peer`."""
    remote = _in_peer(smem_ptr, peer, loc=loc, ip=ip)
    llvm.inline_asm(
        None,
        [remote, Float32(value).ir_value(loc=loc, ip=ip)],
        "st.shared::cluster.f32 [$0], $1;",
        "r,f",
        has_side_effects=True,
        is_align_stack=False,
        asm_dialect=llvm.AsmDialect.AD_ATT,
    )


@dsl_user_op
def store_async_to_peer(
    smem_ptr: cute.Pointer, values: tuple, mbar_ptr: cute.Pointer, peer: Int32, *, loc=None,
    ip=None,
):
    """st.async of one or two fp32 `values` at the address `smem_ptr` has in CTA `peer`,
    completing their 4 or 8 bytes of the transaction that CTA's mbarrier (at the address
    `mbar_ptr` has there) expects."""
    remote = _in_peer(smem_ptr, peer, loc=loc, ip=ip)
    remote_bar = _in_peer(mbar_ptr, peer, loc=loc, ip=ip)
    floats = [Float32(v).ir_value(loc=loc, ip=ip) for v in values]
    if len(floats) == 2:
        asm = "st.async.shared::cluster.mbarrier::complete_tx::bytes.v2.f32 [$0], {$1, $2}, [$3];"
        constraints = "r,f,f,r"
    else:
        asm = "st.async.shared::cluster.mbarrier::complete_tx::bytes.f32 [$0], $1, [$2];"
        constraints = "r,f,r"
    llvm.inline_asm(
        None,
        [remote, *floats, remote_bar],
        asm,
        constraints,
        has_side_effects=True,
        is_align_stack=False,
        asm_dialect=llvm.AsmDialect.AD_ATT,
    )


@dsl_user_op
def bulk_load(smem_ptr: cute.Pointer, gmem_ptr: cute.Pointer, size: Int32,
              mbar_ptr: cute.Pointer, *, loc=None, ip=None):  # fmt: skip
    """cp.async.bulk of `size` bytes (a multiple of 16, both addresses 16-byte aligned) from
    global memory into this CTA's shared memory by the TMA unit, completing that many bytes
    of the transaction the CTA's mbarrier expects: one instruction for the whole slice, no
    registers held while it flies."""
    llvm.inline_asm(
        None,
        [smem_ptr.toint(loc=loc, ip=ip).ir_value(), gmem_ptr.toint(loc=loc, ip=ip).ir_value(),
         Int32(size).ir_value(loc=loc, ip=ip), mbar_ptr.toint(loc=loc, ip=ip).ir_value()],
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [$0], [$1], $2, [$3];",
        "r,l,r,r",
        has_side_effects=True,
        is_align_stack=False,
        asm_dialect=llvm.AsmDialect.AD_ATT,
    )  # fmt: skip


@cute.jit
def slice_cols(cols, rank, tile_cols: cutlass.Constexpr):
    """The row's values in CTA `rank`'s slice: tile_cols, fewer in the last rank's, and none
    where the plan's rounding of held values leaves the last rank past the row's end (70,000
    bf16 values: 4 CTAs of 24,576 columns, the fourth starting at 73,728)."""
    n = cols - rank * tile_cols
    if n > tile_cols:
        n = tile_cols
    if n < 0:
        n = 0
    return n


@cute.jit
def bulk_slices(mbar: cute.Pointer, dsts: tuple, srcs: tuple, cols_here):
    """Thread 0's part of a bulk load: arm the CTA's mbarrier (made, one arrival) for
    `cols_here` values of each (shared `dsts[i]`, global `srcs[i]`) slice and have the TMA unit
    copy them. An empty slice arms for no bytes and copies nothing (a zero-size or negative
    cp.async.bulk is not a copy), so the phase still completes and the waiters go on."""
    nbytes = cols_here * (dsts[0].element_type.width // 8)
    cute.arch.mbarrier_arrive_and_expect_tx(mbar, nbytes * len(dsts))
    if cols_here > 0:
        for i in cutlass.range_constexpr(len(dsts)):
            bulk_load(dsts[i].iterator, srcs[i].iterator, nbytes, mbar)


@cute.jit
def load_row_slice(tiled_copy, thr, gX, tXgX, tXrX, tXpX, smem, cols, rank,
                   tile_cols: cutlass.Constexpr, bulk: cutlass.Constexpr):  # fmt: skip
    """This CTA's slice of a row (`gX`, rank `rank` of the cluster) into the registers `tXrX`,
    each vector whose predicate in `tXpX` is set. Plain: from global memory, one 128-bit load
    a vector. `bulk`: through shared memory. Thread 0 makes an mbarrier, arms it for the
    slice's bytes (fewer in the row's last CTA, none past the row's end) and has the TMA unit
    copy them; every thread waits for the bytes, then reads its vectors (LDS.128)."""
    if cutlass.const_expr(bulk):
        sX = smem.allocate_tensor(gX.element_type, cute.make_layout((1, tile_cols)), 128)
        loaded = smem.allocate_array(cutlass.Int64, num_elems=1)
        tidx, _, _ = cute.arch.thread_idx()
        if tidx == 0:
            cute.arch.mbarrier_init(loaded, 1)
            cute.arch.mbarrier_init_fence()
            bulk_slices(loaded, (sX,), (gX,), slice_cols(cols, rank, tile_cols))
        cute.arch.sync_threads()  # no thread waits on the mbarrier before it is made
        cute.arch.mbarrier_wait(loaded, 0)
        tXsX = thr.partition_S(sX)
        for i in cutlass.range_constexpr(cute.size(tXpX)):
            if tXpX[i]:
                cute.copy(tiled_copy, tXsX[None, None, i], tXrX[None, None, i])
    else:
        for i in cutlass.range_constexpr(cute.size(tXpX)):
            if tXpX[i]:
                cute.copy(tiled_copy, tXgX[None, None, i], tXrX[None, None, i])


@cute.jit
def arm_exchange(mbar: cute.Pointer, exchange_bytes: cutlass.Constexpr):
    """At the kernel's start, before its first cluster barrier: thread 0 makes the CTA's
    mbarrier (one arrival) and arms it for the exchange's bytes, so that the phase completes
    only when every peer's values have landed; the fence makes the init visible to the
    cluster by the time the barrier's wait returns in the peers."""
    tidx, _, _ = cute.arch.thread_idx()
    if tidx == 0:
        cute.arch.mbarrier_init(mbar, 1)
        cute.arch.mbarrier_init_fence()
        cute.arch.mbarrier_arrive_and_expect_tx(mbar, exchange_bytes)


def fold_pair(m_a, s_a, m_b, s_b):
    """(max, sum of exp(x - max)) of the union of two sets given as pairs (log2 domain)."""
    m = cute.arch.fmax(m_a, m_b)
    safe = cute.arch.fmax(m, Float32(FINITE_LOWEST))
    s = s_a * cute.math.exp2(m_a - safe, fastmath=True) + s_b * cute.math.exp2(
        m_b - safe, fastmath=True
    )
    return m, s


def warp_pair(m, s):
    for i in range(5):  # plain Python: unrolled while tracing
        m_o = cute.arch.shuffle_sync_bfly(m, offset=1 << i)
        s_o = cute.arch.shuffle_sync_bfly(s, offset=1 << i)
        m, s = fold_pair(m, s, m_o, s_o)
    return m, s


def warp_sum(v):
    for i in range(5):
        v = v + cute.arch.shuffle_sync_bfly(v, offset=1 << i)
    return v


@cute.jit
def cta_pair(m, s, slots: cute.Tensor, num_warps: cutlass.Constexpr):
    """The CTA's pair; `slots` is a shared [num_warps, 2] fp32 array."""
    m, s = warp_pair(m, s)
    warp = cute.arch.warp_idx()
    if cute.arch.lane_idx() == 0:
        slots[warp, 0] = m
        slots[warp, 1] = s
    cute.arch.sync_threads()
    m = slots[0, 0]
    s = slots[0, 1]
    for w in cutlass.range_constexpr(1, num_warps):
        m, s = fold_pair(m, s, slots[w, 0], slots[w, 1])
    return m, s


@cute.jit
def cta_sum(v, slots: cute.Tensor, num_warps: cutlass.Constexpr):
    """The CTA's sum; `slots` is a shared [num_warps] fp32 array."""
    v = warp_sum(v)
    if cute.arch.lane_idx() == 0:
        slots[cute.arch.warp_idx()] = v
    cute.arch.sync_threads()
    v = slots[0]
    for w in cutlass.range_constexpr(1, num_warps):
        v = v + slots[w]
    return v


@cute.jit
def _exchange(values: tuple, peers_slot: cute.Pointer, mbar: cute.Pointer, cluster,
              mbarrier: cutlass.Constexpr):  # fmt: skip
    """Thread r < cluster sends `values` to slot `peers_slot` of CTA r, then every thread
    waits until its own CTA's peers' values have landed: on the CTA's mbarrier (mbarrier:
    st.async, armed by arm_exchange) or, the other way, on a second cluster barrier after
    plain remote stores. The cluster barrier that made every CTA's shared memory (and
    mbarrier) live has been waited on."""
    tidx, _, _ = cute.arch.thread_idx()
    if cutlass.const_expr(mbarrier):
        if tidx < cluster:
            store_async_to_peer(peers_slot, values, mbar, tidx)
        cute.arch.mbarrier_wait(mbar, 0)
    else:
        if tidx < cluster:
            for i in cutlass.range_constexpr(len(values)):
                store_to_peer(peers_slot + i, values[i], tidx)
        cute.arch.cluster_arrive()
        cute.arch.cluster_wait()


@cute.jit
def cluster_pair(m, s, peers: cute.Tensor, mbar: cute.Pointer, rank,
                 cluster: cutlass.Constexpr, mbarrier: cutlass.Constexpr):  # fmt: skip
    """The cluster's pair; `peers` is a shared [cluster, 2] fp32 array in every CTA (_exchange
    says how the pairs travel)."""
    _exchange((m, s), peers.iterator + rank * 2, mbar, cluster, mbarrier)
    m = peers[0, 0]
    s = peers[0, 1]
    for c in cutlass.range_constexpr(1, cluster):
        m, s = fold_pair(m, s, peers[c, 0], peers[c, 1])
    return m, s


@cute.jit
def cluster_sum(v, peers: cute.Tensor, mbar: cute.Pointer, rank, cluster: cutlass.Constexpr,
                mbarrier: cutlass.Constexpr):  # fmt: skip
    """The cluster's sum; `peers` is a shared [cluster] fp32 array in every CTA."""
    _exchange((v,), peers.iterator + rank, mbar, cluster, mbarrier)
    v = peers[0]
    for c in cutlass.range_constexpr(1, cluster):
        v = v + peers[c]
    return v
