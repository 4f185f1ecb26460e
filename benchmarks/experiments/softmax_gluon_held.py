"""The deferred softmax with the row it finishes held in shared memory, not in registers (Gluon).

The library's deferred kernel (softmax._softmax_coop_deferred_kernel) keeps a row's exps in
registers for a whole step, until its peers' partials arrive. In bf16 those held exps cost
twice the registers per byte they do in fp32 (an fp32 exp per 2-byte value), which caps the
chunk at 1,024 values per one-warp program (16 programs per SM) and so at 256 chunks per
262K row: 2 KiB of polled words per 2 KiB of data per program per row. The 2,048-value chunk
that halves those polls needed 209-242 registers (8 programs per SM) and lost.

Here a program holds the row it will finish as its input values in shared memory (2 bytes a
value in bf16, one buffer per step parity, written and read back by the same thread, so no
barrier) and takes the exps again when it finishes it:

    step (row r = group + i * n_groups):
      poll r - n_groups's partials (early) -> r's chunk, loaded a step ago, to shared memory
      -> its max and sum of exps -> publish (the packed word) -> load r + n_groups's chunk
      -> once r - n_groups's partials are all there: read it back from shared memory and write
         2^(x log2 e - c) * 2^(c - C) / S

Per value, against the register kernel: one shared-memory store and load, and an FFMA and an
ex2 more. The exchange is the deferred kernel's (four turn slots, the one-bit tagged packed
word: softmax._packed, _turn_bit, _combine_stats, _chunk_scale). Every program must be
resident; the grid is what fits, from the compiled kernel's registers and shared memory.

Session 11 ran it once (softmax_gluon_held_v1, H200, each configuration beside the
library's tuned softmax): correct everywhere; bf16 262K c2048 without the L2 prefetch 3.833
TB/s against 3.799 (with it 3.753; c1024 3.470); bf16 131K 3.80-3.82 against 3.997; fp32
262K 3.51-3.72 against 4.144. Registers (Triton 3.6, sm_90): 107-128 at c2048 one warp.

    PYTHONPATH=src python3 benchmarks/experiments/softmax_gluon_held.py --out $OUT

STAGED (written after that run, compiled here for sm_90, never run): the next rows' chunks
come by cp.async into a third shared buffer instead of through registers and the L2
prefetch (91 registers and 12 KiB at bf16 c2048, so 18 programs per SM by shared memory),
two rows ahead, each line crossing the L2 fabric once.

Each configuration is checked against the float64 reference (3 fresh inputs) before it is
timed cold beside the library's tuned softmax. fp32 rows are there for the check: its
tolerance catches a wrong scale that bf16's can hide (session 11's inline-PTX poll).
"""

from __future__ import annotations

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy

from kernelab.kernels.triton import softmax as _softmax

LOG2E = gl.constexpr(1.4426950408889634)
MINUS_INF_BITS = gl.constexpr(-8388608)  # float32 -inf as a signed int32 (0xFF800000)
MAX_SPINS = 1 << 22


@gluon.jit
def _load_chunk(x_ptr, row, n_rows, x_row_stride, cols):
    """One program's chunk of `row` (whole chunks only; a row past the last reads the last
    again, never used): CHUNK x itemsize bytes from HBM, evict_first."""
    last = gl.minimum(row, n_rows - 1)
    return gl.load(x_ptr + last.to(gl.int64) * x_row_stride + cols, eviction_policy="evict_first")


@gluon.jit
def _copy_chunk(buffer, x_ptr, row, n_rows, x_row_stride, cols):
    """cp.async of one program's chunk of `row` into `buffer`, as one commit group (a row past
    the last copies nothing: the group is empty, so every step commits exactly one)."""
    last = gl.minimum(row, n_rows - 1)
    inside = (cols >= 0) & (row < n_rows)
    async_copy.async_copy_global_to_shared(
        buffer, x_ptr + last.to(gl.int64) * x_row_stride + cols, mask=inside,
        eviction_policy="evict_first",
    )  # fmt: skip
    async_copy.commit_group()


@gluon.jit
def _finished_buffer(iteration, STAGED: gl.constexpr):
    """The buffer of the row finished at step `iteration` (the previous row's)."""
    if STAGED:
        return (iteration + 2) % 3
    else:
        return (iteration + 1) % 2


@gluon.jit
def _prefetch_to_l2(x_ptr, row, n_rows, x_row_stride, first_col, CHUNK: gl.constexpr,
                    num_warps: gl.constexpr):  # fmt: skip
    """Ask the L2 for the 128-byte lines of row's chunk (no register waits for them); nothing
    past the last row."""
    LINE_VALUES: gl.constexpr = 1024 // x_ptr.dtype.element_ty.primitive_bitwidth
    LINES: gl.constexpr = CHUNK // LINE_VALUES
    line_layout: gl.constexpr = gl.BlockedLayout([1], [32], [num_warps], [0])
    lines = first_col + gl.arange(0, LINES, layout=line_layout) * LINE_VALUES
    inside = (gl.full([LINES], 0, gl.int32, line_layout) + row < n_rows).to(gl.int32)
    gl.inline_asm_elementwise(
        "{ .reg .pred p; setp.ne.b32 p, $2, 0; @p prefetch.global.L2::evict_last [$1]; "
        "mov.b32 $0, 0; }",
        "=r,l,r",
        [x_ptr + row.to(gl.int64) * x_row_stride + lines, inside],
        dtype=gl.int32,
        is_pure=False,
        pack=1,
    )


@gluon.jit
def _poll(slot, peers, present, turn):
    """One volatile read of the group's packed words for `turn`; absent peers read as a
    published (-inf, 0) of this turn."""
    absent = (gl.full(peers.shape, MINUS_INF_BITS, gl.int64, peers.type.layout) << 32) | (
        _softmax._turn_bit(turn).to(gl.int64) << 31
    )
    return gl.load(slot + peers, mask=present, other=absent, volatile=True)


@gluon.jit
def _late(words, turn):
    return gl.sum((((words >> 31) & 1) != _softmax._turn_bit(turn)).to(gl.int32), axis=0)


@gluon.jit
def _scale_after_wait(slot, words, peers, present, turn, held_c, MAX_SPINS: gl.constexpr):
    """Poll until every peer's word is this turn's, then 2^(c - C) / S for the held chunk
    (c = held_c): (scale, whether every peer came within MAX_SPINS)."""
    late = _late(words, turn)
    spins = 0
    while (late > 0) & (spins < MAX_SPINS):
        words = _poll(slot, peers, present, turn)
        late = _late(words, turn)
        spins += 1
    maxes = gl.where(
        present, (words >> 32).to(gl.int32).to(gl.float32, bitcast=True), -float("inf")
    )
    sums = gl.where(present, (words & 0x7FFFFFFF).to(gl.int32).to(gl.float32, bitcast=True), 0.0)
    row_c, row_sum = _softmax._combine_stats(maxes, sums, True)
    return _softmax._chunk_scale(held_c, row_c, row_sum, False), late == 0


@gluon.jit
def _finish(held, c, scale, out_ptr, row, out_row_stride, cols, layout: gl.constexpr):
    """Write the held chunk of `row`: 2^(x log2 e - c) * scale, read back from shared memory
    (the only write of the row: CHUNK x itemsize bytes)."""
    x = held.load(layout).to(gl.float32)
    c_safe = gl.where(c == float("-inf"), 0.0, c)
    y = gl.exp2(x * LOG2E - c_safe) * scale
    gl.store(out_ptr + row.to(gl.int64) * out_row_stride + cols, y.to(out_ptr.dtype.element_ty))


@gluon.jit(do_not_specialize=["n_rows", "n_groups"])
def _held_kernel(
    x_ptr, out_ptr, words_ptr, n_rows, x_row_stride, out_row_stride, n_chunks, n_groups,
    CHUNK: gl.constexpr, BLOCK_CHUNKS: gl.constexpr, L2_AHEAD: gl.constexpr,
    STAGED: gl.constexpr, MAX_SPINS: gl.constexpr, num_warps: gl.constexpr,
):  # fmt: skip
    group = gl.program_id(0) // n_chunks
    chunk = gl.program_id(0) % n_chunks
    # 16 bytes per lane per access
    VEC: gl.constexpr = 128 // x_ptr.dtype.element_ty.primitive_bitwidth
    layout: gl.constexpr = gl.BlockedLayout([VEC], [32], [num_warps], [0])
    cols = chunk * CHUNK + gl.arange(0, CHUNK, layout=layout)
    peer_layout: gl.constexpr = gl.BlockedLayout([1], [32], [num_warps], [0])
    peers = gl.arange(0, BLOCK_CHUNKS, layout=peer_layout)
    present = peers < n_chunks
    # Each thread writes and reads back its own values (one layout throughout), so no barrier.
    if STAGED:
        # three buffers in turn: the row being finished, this row, and the next row's chunk in
        # flight by cp.async (no registers held, and one fabric crossing per line where the L2
        # prefetch makes two); two rows ahead are asked for before the first step
        held = gl.allocate_shared_memory(
            x_ptr.dtype.element_ty, [3, CHUNK], gl.SwizzledSharedLayout(1, 1, 1, [0])
        )
        _copy_chunk(held.index(0), x_ptr, group, n_rows, x_row_stride, cols)
        _copy_chunk(held.index(1), x_ptr, group + n_groups, n_rows, x_row_stride, cols)
    else:
        # two buffers by step parity, the row being finished and this row; the next row's
        # chunk travels in registers
        held = gl.allocate_shared_memory(
            x_ptr.dtype.element_ty, [2, CHUNK], gl.SwizzledSharedLayout(1, 1, 1, [0])
        )
        upcoming = _load_chunk(x_ptr, group, n_rows, x_row_stride, cols)
    iteration = 0
    healthy = True
    held_c = 0.0
    for row in range(group, n_rows, n_groups):
        if L2_AHEAD > 0:
            _prefetch_to_l2(
                x_ptr, row + (1 + L2_AHEAD) * n_groups, n_rows, x_row_stride, chunk * CHUNK,
                CHUNK, num_warps,
            )  # fmt: skip
        # the previous row's turn is `iteration`, in slot (iteration - 1) % 4 (at iteration 0
        # this reads a slot nobody finishes from: the words go unused)
        previous = words_ptr + (group * 4 + (iteration + 3) % 4) * n_chunks
        first = _poll(previous, peers, present, iteration)
        if STAGED:
            async_copy.wait_group(1)  # this row's copy (the older of the two in flight)
            x = held.index(iteration % 3).load(layout).to(gl.float32)
        else:
            current = upcoming
            held.index(iteration % 2).store(current)
            upcoming = _load_chunk(x_ptr, row + n_groups, n_rows, x_row_stride, cols)
            x = current.to(gl.float32)
        c = gl.max(x, axis=0) * LOG2E
        c_safe = gl.where(c == float("-inf"), 0.0, c)
        chunk_sum = gl.sum(gl.exp2(x * LOG2E - c_safe), axis=0)
        # publish turn iteration + 1 in slot iteration % 4: 8 bytes
        word = _softmax._packed(iteration + 1, c, chunk_sum)
        gl.atomic_xchg(
            words_ptr + (group * 4 + iteration % 4) * n_chunks + chunk, word, sem="relaxed",
            scope="gpu",
        )  # fmt: skip
        if iteration > 0:
            scale, met = _scale_after_wait(
                previous, first, peers, present, iteration, held_c, MAX_SPINS
            )
            healthy = healthy & met
            scale = gl.where(healthy, scale, float("nan"))
            _finish(
                held.index(_finished_buffer(iteration, STAGED)), held_c, scale, out_ptr,
                row - n_groups, out_row_stride, cols, layout,
            )  # fmt: skip
        if STAGED:
            # the buffer just finished (or, at the first step, the free one) takes the chunk
            # two rows ahead
            _copy_chunk(
                held.index((iteration + 2) % 3), x_ptr, row + 2 * n_groups, n_rows, x_row_stride,
                cols,
            )  # fmt: skip
        held_c = c
        iteration += 1
    if STAGED:
        async_copy.wait_group(0)  # copies of rows past the last (masked off) end too
    # the group's last row
    last = words_ptr + (group * 4 + (iteration - 1) % 4) * n_chunks
    first = _poll(last, peers, present, iteration)
    scale, met = _scale_after_wait(last, first, peers, present, iteration, held_c, MAX_SPINS)
    scale = gl.where(healthy & met, scale, float("nan"))
    _finish(
        held.index(_finished_buffer(iteration, STAGED)), held_c, scale, out_ptr,
        group + (iteration - 1) * n_groups, out_row_stride, cols, layout,
    )  # fmt: skip


def launch(x, config: dict):
    """Softmax of a contiguous 2-D x (rows of whole chunks) with this kernel; (out, plan)."""
    from softmax_gluon_rows import resident_groups  # this folder's script

    n_rows, n_cols = x.shape
    chunk = config["CHUNK"]
    n_chunks = n_cols // chunk
    assert x.is_contiguous() and n_cols % chunk == 0 and n_chunks <= 256
    out = torch.empty_like(x)
    kwargs = dict(
        CHUNK=chunk, BLOCK_CHUNKS=max(2, 1 << (n_chunks - 1).bit_length()),
        L2_AHEAD=config.get("L2_AHEAD", 1), STAGED=config.get("STAGED", False),
        MAX_SPINS=MAX_SPINS, num_warps=config["num_warps"],
    )  # fmt: skip
    probe = (x, out, torch.zeros(1, device=x.device, dtype=torch.int64), n_rows, x.stride(0),
             out.stride(0), n_chunks, 1)  # fmt: skip
    n_groups, plan, words = resident_groups(_held_kernel, x.device, probe, kwargs, n_rows, n_chunks)
    _held_kernel[(n_groups * n_chunks,)](
        x, out, words, n_rows, x.stride(0), out.stride(0), n_chunks, n_groups, **kwargs
    )
    return out, plan


CONFIGS = (
    {"CHUNK": 2048, "num_warps": 1, "L2_AHEAD": 1},
    {"CHUNK": 2048, "num_warps": 1, "L2_AHEAD": 0},
    {"CHUNK": 1024, "num_warps": 1, "L2_AHEAD": 1},
    {"CHUNK": 4096, "num_warps": 2, "L2_AHEAD": 1},
    # the next rows' chunks by cp.async into shared memory (written after the first run)
    {"CHUNK": 2048, "num_warps": 1, "L2_AHEAD": 0, "STAGED": True},
    {"CHUNK": 4096, "num_warps": 1, "L2_AHEAD": 0, "STAGED": True},
)


def main(argv=None) -> int:
    from softmax_gluon_rows import compare_main  # this folder's script

    def label(config: dict) -> str:
        staged = " staged" if config.get("STAGED") else ""
        return (
            f"held c{config['CHUNK']} w{config['num_warps']} l2a{config.get('L2_AHEAD', 1)}{staged}"
        )

    description = __doc__.splitlines()[0]
    return compare_main(argv, description, CONFIGS, label, launch, "softmax_gluon_held.json")


if __name__ == "__main__":
    raise SystemExit(main())
