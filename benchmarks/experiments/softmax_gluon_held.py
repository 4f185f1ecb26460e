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

Session 12 (H200, v2-v7; gpu-log.md has each run): c4096 w2 with the L2 prefetch, 3.851-
3.866 at bf16 262K in four runs against 3.762-3.798 for the tuned library, became the
library's kernels/triton/softmax_held.py (the helpers above are imported from it). Three
variants, each beside it in the same run, lost:
  STAGED (the next rows' chunks by cp.async into a third buffer, two rows ahead, no L2
    prefetch): bf16 262K c2048 3.794, c4096 w2 3.827, c4096 w4 3.840 against 3.851-3.863;
  HOLD_EXPS (the fp32 exps held instead of the inputs, so no second ex2 at the finish: 27 %
    fewer SASS instructions at bf16 c4096 w2, same 168 registers, twice the shared memory):
    bf16 262K 3.590 against 3.857, 131K 3.768 against 3.920;
  PAD_SLOTS (unused buffers that only move the shared-memory carveout, so shrink the L1):
    two slots cost 1.4-1.6 % at c4096 w2 (6 programs per SM either way), and 13-16 % at
    c2048 w1, where they also cut the programs per SM from 16 to 13.

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

# the helpers of the library's version of this kernel (its plain configuration, landed in
# session 12); this script keeps the variants measured beside it
from kernelab.kernels.triton.softmax_held import (
    LOG2E,
    MAX_SPINS,
    _load_chunk,
    _poll,
    _prefetch_to_l2,
    _scale_after_wait,
)


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
def _finish(held, c, scale, out_ptr, row, out_row_stride, cols, layout: gl.constexpr,
            HOLD_EXPS: gl.constexpr):  # fmt: skip
    """Write the held chunk of `row`, read back from shared memory (the only write of the row:
    CHUNK x itemsize bytes): exps * scale, or from inputs 2^(x log2 e - c) * scale."""
    if HOLD_EXPS:
        y = held.load(layout) * scale
    else:
        x = held.load(layout).to(gl.float32)
        c_safe = gl.where(c == float("-inf"), 0.0, c)
        y = gl.exp2(x * LOG2E - c_safe) * scale
    gl.store(out_ptr + row.to(gl.int64) * out_row_stride + cols, y.to(out_ptr.dtype.element_ty))


@gluon.jit(do_not_specialize=["n_rows", "n_groups"])
def _held_kernel(
    x_ptr, out_ptr, words_ptr, n_rows, x_row_stride, out_row_stride, n_chunks, n_groups,
    CHUNK: gl.constexpr, BLOCK_CHUNKS: gl.constexpr, L2_AHEAD: gl.constexpr,
    STAGED: gl.constexpr, HOLD_EXPS: gl.constexpr, PAD_SLOTS: gl.constexpr,
    MAX_SPINS: gl.constexpr, num_warps: gl.constexpr,
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
    gl.static_assert(not (STAGED and HOLD_EXPS), "HOLD_EXPS holds the exps of registers")
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
        HELD_DTYPE: gl.constexpr = gl.float32 if HOLD_EXPS else x_ptr.dtype.element_ty
        # PAD_SLOTS more buffers nobody uses: they only move the carveout (shrink the L1)
        held = gl.allocate_shared_memory(
            HELD_DTYPE, [2 + PAD_SLOTS, CHUNK], gl.SwizzledSharedLayout(1, 1, 1, [0])
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
            if not HOLD_EXPS:
                held.index(iteration % 2).store(current)
            upcoming = _load_chunk(x_ptr, row + n_groups, n_rows, x_row_stride, cols)
            x = current.to(gl.float32)
        c = gl.max(x, axis=0) * LOG2E
        c_safe = gl.where(c == float("-inf"), 0.0, c)
        exps = gl.exp2(x * LOG2E - c_safe)
        chunk_sum = gl.sum(exps, axis=0)
        if HOLD_EXPS:
            held.index(iteration % 2).store(exps)
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
                row - n_groups, out_row_stride, cols, layout, HOLD_EXPS,
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
        group + (iteration - 1) * n_groups, out_row_stride, cols, layout, HOLD_EXPS,
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
        HOLD_EXPS=config.get("HOLD_EXPS", False), PAD_SLOTS=config.get("PAD_SLOTS", 0),
        MAX_SPINS=MAX_SPINS, num_warps=config["num_warps"],
    )  # fmt: skip
    if "maxnreg" in config:
        kwargs["maxnreg"] = config["maxnreg"]
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
        exps = " exps" if config.get("HOLD_EXPS") else ""
        pad = f" pad{config['PAD_SLOTS']}" if config.get("PAD_SLOTS") else ""
        cap = f" r{config['maxnreg']}" if config.get("maxnreg") else ""
        knobs = f"c{config['CHUNK']} w{config['num_warps']} l2a{config.get('L2_AHEAD', 1)}"
        return f"held {knobs}{staged}{exps}{pad}{cap}"

    description = __doc__.splitlines()[0]
    return compare_main(argv, description, CONFIGS, label, launch, "softmax_gluon_held.json")


if __name__ == "__main__":
    raise SystemExit(main())
