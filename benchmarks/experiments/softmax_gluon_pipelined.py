"""Long softmax rows in shared memory, pipelined: the deferred exchange with TMA chunks (Gluon).

Written in session 8 after its last GPU call; run in session 9 (softmax_gluon_pipelined_v1):
every configuration correct and slower than the library's tuned softmax in the same run,
bf16 65K-262K 2.53-3.73 TB/s against 3.80-3.95, fp32 3.55-3.97 against 4.03-4.08. Refuted.
Session 11 ran it at 4-16 KiB chunks (--configs): no better (softmax_gluon_pipelined_v2).

Why: the split shared-memory kernel (softmax_shared_split.py) took fp32 32K-65K rows to 4.07
TB/s but left bf16 65K-262K at 3.76-3.84, below the deferred register kernel (3.94-3.97). Each
of its programs sits on its 64 KiB while the exchange completes. This one is the deferred
kernel's order with the chunks in shared memory instead of registers: a persistent program
per (group, chunk) walks rows n_groups apart, holding three chunk buffers,

    step i (row r = group + i * n_groups):
      wait for r's chunk (TMA issued two steps ago) -> its max and sum of exps -> publish them
      -> poll r - n_groups's partials (published a step ago, so normally there) -> write that
         row's chunk from its buffer -> TMA r + 2 n_groups's chunk into the freed buffer.

so two chunks are in flight per program, none in registers, and the exchange's round trip is
a whole step off the critical path. The exchange is the deferred kernel's, through its own
helpers (softmax._packed, _turn_bit, _combine_stats): one packed word per chunk per turn, four
turn slots, a one-bit tag. It needs every program resident: the grid is what fits (shared
memory, threads and registers of the compiled kernel), as for the deferred kernel.

Bytes: one read (TMA) and one write of the tensor; per program and row, 8 bytes published and
n_chunks x 8 polled. Shared memory: 3 x CHUNK_BYTES per program.

    PYTHONPATH=src python3 benchmarks/experiments/softmax_gluon_pipelined.py --out $OUT

Each configuration is checked against the float64 reference (kernelab's check, 3 fresh
inputs) before it is timed cold beside the library's tuned softmax and torch's copy.
"""

from __future__ import annotations

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

from kernelab.ops import softmax as _softmax
from kernelab.ops.softmax import shared as shared

GIB = 1 << 30
LINE = shared.LINE
LOG2E = shared.LOG2E
# Triton 3.6 calls the CTA barrier thread_barrier; 3.9 calls it barrier
_cta_barrier = getattr(gl, "thread_barrier", None) or gl.barrier
MAX_SPINS = 1 << 22


@gluon.jit
def _issue(x_desc, bufs, bar, first_line, LINES: gl.constexpr, SUB: gl.constexpr):
    """TMA one chunk (LINES lines from first_line) into bufs, completing on bar."""
    mbarrier.expect(bar, (LINES // SUB) * x_desc.block_type.nbytes)
    for step in range(LINES // SUB):
        shared._tma_load(x_desc, [first_line + step * SUB, 0], bar, bufs.index(step))


@gluon.jit
def _publish_step(
    words_ptr, cur, cur_bar, i, n_iter, group, chunk, n_chunks, LINES: gl.constexpr,
    SUB: gl.constexpr, VEC: gl.constexpr, num_warps: gl.constexpr,
):  # fmt: skip
    """The first half of step i (see the module doc): wait for row i's chunk in cur, reduce
    it there and publish (c, sum) for turn i + 1. Returns c (0 past the last row)."""
    layout: gl.constexpr = gl.BlockedLayout([1, VEC], [1, 32], [num_warps, 1], [1, 0])
    c = 0.0
    if i < n_iter:
        mbarrier.wait(cur_bar, phase=(i // 3) & 1)
        c = shared._max_log2(cur, LINES, SUB, layout)
        c_safe = gl.where(c == float("-inf"), 0.0, c)
        chunk_sum = shared._exp_sum(cur, c_safe, LINES, SUB, layout)
        # publish turn i + 1 in slot i % 4, the deferred kernel's packed word
        slot = words_ptr + ((group * 4 + i % 4) * n_chunks + chunk)
        word = _softmax._packed(i + 1, c, chunk_sum)
        gl.atomic_xchg(slot, word, sem="relaxed", scope="gpu")
    return c


@gluon.jit
def _finish_step(
    x_desc, out_ptr, out_row_stride, words_ptr, prev, prev_bar, prev_c, i, n_iter, group, chunk,
    n_chunks, n_groups, healthy, LINES: gl.constexpr, SUB: gl.constexpr, VEC: gl.constexpr,
    BLOCK_CHUNKS: gl.constexpr, MAX_SPINS: gl.constexpr, num_warps: gl.constexpr,
):  # fmt: skip
    """The second half of step i: finish row i - 1 (turn i, slot (i - 1) % 4) from prev, then
    refill prev with row i + 2's chunk. Returns healthy (False once a wait gave up: that row
    and every later one come out NaN, as in the deferred kernel)."""
    layout: gl.constexpr = gl.BlockedLayout([1, VEC], [1, 32], [num_warps, 1], [1, 0])
    peer_layout: gl.constexpr = gl.BlockedLayout([1], [32], [num_warps], [0])
    if (i >= 1) & (i <= n_iter):
        turn = i
        peers = gl.arange(0, BLOCK_CHUNKS, layout=peer_layout)
        present = peers < n_chunks
        slots = words_ptr + (group * 4 + (turn - 1) % 4) * n_chunks + peers
        want = _softmax._turn_bit(turn)
        got = gl.load(slots, mask=present, other=0, volatile=True)
        late = gl.sum(((((got >> 31) & 1) != want) & present).to(gl.int32), axis=0)
        spins = 0
        while (late > 0) & (spins < MAX_SPINS):
            got = gl.load(slots, mask=present, other=0, volatile=True)
            late = gl.sum(((((got >> 31) & 1) != want) & present).to(gl.int32), axis=0)
            spins += 1
        healthy = healthy & (late == 0)
        maxes = (got >> 32).to(gl.int32).to(gl.float32, bitcast=True)
        maxes = gl.where(present, maxes, float("-inf"))
        sums = (got & 0x7FFFFFFF).to(gl.int32).to(gl.float32, bitcast=True)
        sums = gl.where(present, sums, 0.0)
        row_c, row_sum = _softmax._combine_stats(maxes, sums, True)
        scale = _softmax._chunk_scale(prev_c, row_c, row_sum, False)
        scale = gl.where(healthy, scale, float("nan"))
        row = group + (i - 1) * n_groups
        target = out_ptr + row.to(gl.int64) * out_row_stride + chunk * (LINES * LINE)
        prev_c_safe = gl.where(prev_c == float("-inf"), 0.0, prev_c)
        shared._write_scaled(prev, prev_c_safe, scale, target, LINES, SUB, layout)
    if i + 2 < n_iter:
        # every warp has read prev (the barrier), and those generic reads are ordered before
        # the TMA's async writes into it (the fence)
        _cta_barrier()
        fence_async_shared()
        row = group + (i + 2) * n_groups
        _issue(x_desc, prev, prev_bar, (row * n_chunks + chunk) * LINES, LINES, SUB)
    return healthy


@gluon.jit
def _step(
    x_desc, out_ptr, out_row_stride, words_ptr, cur, cur_bar, prev, prev_bar, prev_c, i, n_iter,
    group, chunk, n_chunks, n_groups, healthy, LINES: gl.constexpr, SUB: gl.constexpr,
    VEC: gl.constexpr, BLOCK_CHUNKS: gl.constexpr, MAX_SPINS: gl.constexpr,
    num_warps: gl.constexpr,
):  # fmt: skip
    """Step i: publish row i's partials from cur, then finish row i - 1 from prev and refill
    prev with row i + 2. Returns (row i's c, healthy)."""
    c = _publish_step(
        words_ptr, cur, cur_bar, i, n_iter, group, chunk, n_chunks, LINES, SUB, VEC, num_warps
    )
    healthy = _finish_step(
        x_desc, out_ptr, out_row_stride, words_ptr, prev, prev_bar, prev_c, i, n_iter, group,
        chunk, n_chunks, n_groups, healthy, LINES, SUB, VEC, BLOCK_CHUNKS, MAX_SPINS, num_warps,
    )  # fmt: skip
    return c, healthy


# n_rows and n_groups are not specialized on (a value of 1 would be compiled in): the
# occupancy probe (n_groups = 1) and the plan (one row) size the very binary that launches
@gluon.jit(do_not_specialize=["n_rows", "n_groups"])
def _pipelined_split_kernel(
    x_desc, out_ptr, out_row_stride, words_ptr, n_rows, n_chunks, n_groups,
    LINES: gl.constexpr, SUB: gl.constexpr, VEC: gl.constexpr, BLOCK_CHUNKS: gl.constexpr,
    MAX_SPINS: gl.constexpr, num_warps: gl.constexpr,
):  # fmt: skip
    group = gl.program_id(0) // n_chunks
    chunk = gl.program_id(0) % n_chunks
    n_iter = (n_rows - group + n_groups - 1) // n_groups  # rows of this group (>= 1)
    dtype: gl.constexpr = x_desc.dtype
    # three chunk buffers, used in turn: step i reduces buffer i % 3 and finishes the row in
    # buffer (i - 1) % 3, then refills that one with row i + 2's chunk
    buf0 = gl.allocate_shared_memory(dtype, [LINES // SUB, SUB, LINE], x_desc.layout)
    buf1 = gl.allocate_shared_memory(dtype, [LINES // SUB, SUB, LINE], x_desc.layout)
    buf2 = gl.allocate_shared_memory(dtype, [LINES // SUB, SUB, LINE], x_desc.layout)
    bar0 = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    bar1 = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    bar2 = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    mbarrier.init(bar0, count=1)
    mbarrier.init(bar1, count=1)
    mbarrier.init(bar2, count=1)
    _issue(x_desc, buf0, bar0, (group * n_chunks + chunk) * LINES, LINES, SUB)
    if n_iter > 1:
        row = group + n_groups
        _issue(x_desc, buf1, bar1, (row * n_chunks + chunk) * LINES, LINES, SUB)
    healthy = True
    c2 = 0.0  # the c of the row in buffer 2, before any
    for base in range(0, n_iter + 1, 3):
        # unrolled by three, so that every buffer is chosen at compile time
        c0, healthy = _step(
            x_desc, out_ptr, out_row_stride, words_ptr, buf0, bar0, buf2, bar2, c2, base, n_iter,
            group, chunk, n_chunks, n_groups, healthy, LINES, SUB, VEC, BLOCK_CHUNKS, MAX_SPINS,
            num_warps,
        )  # fmt: skip
        c1, healthy = _step(
            x_desc, out_ptr, out_row_stride, words_ptr, buf1, bar1, buf0, bar0, c0, base + 1,
            n_iter, group, chunk, n_chunks, n_groups, healthy, LINES, SUB, VEC, BLOCK_CHUNKS,
            MAX_SPINS, num_warps,
        )  # fmt: skip
        c2, healthy = _step(
            x_desc, out_ptr, out_row_stride, words_ptr, buf2, bar2, buf1, bar1, c1, base + 2,
            n_iter, group, chunk, n_chunks, n_groups, healthy, LINES, SUB, VEC, BLOCK_CHUNKS,
            MAX_SPINS, num_warps,
        )  # fmt: skip
    mbarrier.invalidate(bar0)
    mbarrier.invalidate(bar1)
    mbarrier.invalidate(bar2)


def launch(x, config: dict):
    """Softmax of a contiguous 2-D x (rows of whole chunks) with this kernel; (out, plan)."""
    from softmax_gluon_rows import resident_groups  # this folder's script

    n_rows, n_cols = x.shape
    itemsize = x.element_size()
    chunk = config["CHUNK_BYTES"] // itemsize
    n_chunks, lines = n_cols // chunk, chunk // shared.LINE_VALUES
    assert x.is_contiguous() and n_cols % chunk == 0 and lines % config["SUB"] == 0
    layout = gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=8 * itemsize, rank=2)
    view = x.view(n_rows * n_cols // shared.LINE_VALUES, shared.LINE_VALUES)
    box = [config["SUB"], shared.LINE_VALUES]
    x_desc = TensorDescriptor(view, list(view.shape), list(view.stride()), box, layout)
    out = torch.empty_like(x)
    kwargs = dict(
        LINES=lines, SUB=config["SUB"], VEC=16 // itemsize,
        BLOCK_CHUNKS=max(2, 1 << (n_chunks - 1).bit_length()), MAX_SPINS=MAX_SPINS,
        num_warps=config["num_warps"],
    )  # fmt: skip
    # every program must be resident, as for the deferred kernel
    probe = (x_desc, out, out.stride(0), torch.zeros(1, device=x.device, dtype=torch.int64),
             n_rows, n_chunks, 1)  # fmt: skip
    n_groups, plan, words = resident_groups(
        _pipelined_split_kernel, x.device, probe, kwargs, n_rows, n_chunks
    )
    _pipelined_split_kernel[(n_groups * n_chunks,)](
        x_desc, out, out.stride(0), words, n_rows, n_chunks, n_groups, **kwargs
    )
    return out, plan


CONFIGS = (
    {"CHUNK_BYTES": 32 << 10, "SUB": 8, "num_warps": 8},
    {"CHUNK_BYTES": 32 << 10, "SUB": 16, "num_warps": 4},
    {"CHUNK_BYTES": 16 << 10, "SUB": 8, "num_warps": 4},
    {"CHUNK_BYTES": 64 << 10, "SUB": 16, "num_warps": 4},
)


def main(argv=None) -> int:
    from softmax_gluon_rows import compare_main  # this folder's script

    def label(config: dict) -> str:
        chunk_kib, sub, warps = config["CHUNK_BYTES"] >> 10, config["SUB"], config["num_warps"]
        return f"pipelined c{chunk_kib}k sub{sub} w{warps}"

    description = __doc__.splitlines()[0]
    return compare_main(argv, description, CONFIGS, label, launch, "softmax_gluon_pipelined.json")


if __name__ == "__main__":
    raise SystemExit(main())
