"""Rows that fit in registers: one pass over tiles of ROWS x BLOCK_N, read once, written once.

Autotuned per (padded row length, dtype) over runtime.tuner.row_tile_candidates: first what
Inductor generates for a persistent reduction (rows of <= 1,024 values packed 1024 / BLOCK_N
to a program of one warp, whose reductions are warp shuffles with no shared memory; longer
rows one per program), then 8-32 values per thread and a persistent grid. Where a Hopper
GPU's TMA can address the rows, the shared-memory row kernel (shared.py) joins the tuner.

Bytes: 2 x rows x cols x itemsize, the ideal; ~4 FLOPs per element.
"""

from __future__ import annotations

import triton
import triton.language as tl

from kernelab.ops.row_tiles import row_tiles
from kernelab.ops.softmax import held as softmax_held
from kernelab.ops.softmax import shared as softmax_shared
from kernelab.ops.softmax import shared_split as softmax_shared_split
from kernelab.ops.softmax.primitives import _exp_shifted
from kernelab.runtime.tuner import (
    interpreter_row_tile,
    interpreting,
    launch_row_tiles,
    row_tile_candidates,
    shared_bytes_per_program,
    tuned,
)


@triton.jit
def _softmax_tile(
    x_ptr,
    out_ptr,
    tile,
    n_rows,
    n_cols,
    x_row_stride,
    out_row_stride,
    BLOCK_N: tl.constexpr,
    ROWS: tl.constexpr,
    FTZ: tl.constexpr,
):
    cols = tl.arange(0, BLOCK_N)
    rows = (tile * ROWS + tl.arange(0, ROWS)).to(tl.int64)
    mask = (rows < n_rows)[:, None] & (cols < n_cols)[None, :]
    # read ROWS * cols * itemsize, used once: evict_first keeps it from displacing anything;
    # padding is -inf so it adds exp(-inf) = 0 to the sum
    x = tl.load(
        x_ptr + rows[:, None] * x_row_stride + cols[None, :],
        mask=mask,
        other=-float("inf"),
        eviction_policy="evict_first",
    ).to(tl.float32)
    row_max = tl.max(x, axis=1)
    numerator = _exp_shifted(x, row_max[:, None], FTZ)
    denominator = tl.sum(numerator, axis=1)
    y = numerator * (1.0 / denominator)[:, None]
    # write ROWS * cols * itemsize; one exp, ~4 FLOPs per element (~6 SASS instructions in
    # bf16 with the conversions, ~12 with tl.exp: docs/ops/softmax.md)
    tl.store(
        out_ptr + rows[:, None] * out_row_stride + cols[None, :],
        y.to(out_ptr.dtype.element_ty),
        mask=mask,
    )


@triton.jit
def _softmax_rows_kernel(
    x_ptr,
    out_ptr,
    n_rows,
    n_cols,
    x_row_stride,
    out_row_stride,
    BLOCK_N: tl.constexpr,
    ROWS: tl.constexpr,
    PERSISTENT: tl.constexpr,
    FTZ: tl.constexpr = False,
    PIPELINE: tl.constexpr = 1,
):
    # persistent: programs stride over the tiles; otherwise one tile per program
    first, last, step = row_tiles(n_rows, ROWS, PERSISTENT)
    # PIPELINE > 1: the software pipeliner copies the next PIPELINE - 1 tiles into shared
    # memory (cp.async) while this one is reduced, ROWS x BLOCK_N x itemsize bytes per stage in
    # flight without registers. Only num_stages on the loop itself turns it on (Triton 3.6 and
    # 3.9: the kernel-wide num_stages alone left this loop unpipelined); PIPELINE = 1 compiles
    # to the same SASS as a loop without it.
    for tile in tl.range(first, last, step, num_stages=PIPELINE):
        _softmax_tile(
            x_ptr,
            out_ptr,
            tile,
            n_rows,
            n_cols,
            x_row_stride,
            out_row_stride,
            BLOCK_N,
            ROWS,
            FTZ,
        )


TUNED: dict[tuple, dict] = {}


def nbytes(x2d) -> int:
    return x2d.numel() * x2d.element_size()


def shared_offers(x2d) -> tuple:
    """Which shared-memory configurations fit this tensor (softmax_shared, _split, _held):
    part of the tuners' keys, so a winner tuned on rows one fits is never reused on rows it
    does not (the padded row length alone does not say: 18,432 and 32,768 columns share a
    key)."""
    offers = (
        softmax_shared.candidates_for(x2d)
        + softmax_shared_split.candidates_for(x2d)
        + softmax_held.candidates_for(x2d)
    )
    return tuple(tuple(sorted(c.items())) for c in offers)


def tuner_key(x2d) -> tuple:
    block_n = triton.next_power_of_2(x2d.shape[1])
    return ("softmax.rows", block_n, x2d.dtype, x2d.device.index, shared_offers(x2d))


def launch(x2d, out, config: dict | None) -> None:
    n_rows, n_cols = x2d.shape
    block_n = triton.next_power_of_2(n_cols)
    args = (x2d, out, n_rows, n_cols, x2d.stride(0), out.stride(0))
    kwargs = {"BLOCK_N": block_n}

    def run(c: dict) -> None:
        if c.get("path") == "shared-row":
            softmax_shared.launch(x2d, out, c)
            return
        tile = {k: v for k, v in c.items() if k != "path"}
        extra = {"FTZ": not interpreting()}
        launch_row_tiles(_softmax_rows_kernel, args, {**kwargs, **extra}, n_rows, tile)

    if config is None:
        if interpreting():
            config = interpreter_row_tile(block_n)
        else:
            candidates = single_pass_candidates_for(x2d)
            key = tuner_key(x2d)
            config = tuned(TUNED, key, run, candidates, nbytes=nbytes(x2d))
    run(config)


# Rows of this many values also get one row per program at 64 values per thread (1, 2 and 4
# warps): fewer warps to combine in each reduction, the way one warp per row serves the rows
# of <= 1,024 values at 98 % of copy, where 2K-8K rows stayed at 93-94 %
# (triton_kernels_sweep_20261129-222625).
WIDE_THREAD_COLS = (2048, 4096, 8192)
WIDE_THREAD_VALUES = 64


# Rows of at least this many bytes take the shared-memory row kernel first where it fits (the
# untuned default: small inputs, and KERNELAB_TRITON_AUTOTUNE=0). In the tuned sweeps
# triton_kernels_sweep_20261130-023048 and -033357 it won every such row
# length the row tuner serves: fp32 2K-16K at 4.09-4.14 TB/s, bf16 4K-16K at 4.09-4.22; the
# 4 KiB rows (bf16 2K) kept the register tile (4.15-4.16).
SHARED_ROW_FIRST_MIN_BYTES = 8 << 10


def single_pass_candidates_for(x2d) -> list[dict]:
    """What the row tuner ranks: the register row tiles (row_candidates_for) and, where it
    fits, the shared-memory row kernel, first for rows of SHARED_ROW_FIRST_MIN_BYTES or more."""
    shared_rows = softmax_shared.candidates_for(x2d)
    if shared_rows and x2d.shape[1] * x2d.element_size() >= SHARED_ROW_FIRST_MIN_BYTES:
        return shared_rows + row_candidates_for(x2d)
    return row_candidates_for(x2d) + shared_rows


def row_candidates_for(x2d) -> list[dict]:
    """The single pass's tuning candidates for this input: the pipelined ones stage tiles of
    the row itself (its itemsize per column) within the device's shared memory; rows of
    WIDE_THREAD_COLS also one row per program at WIDE_THREAD_VALUES values per thread."""
    block_n = triton.next_power_of_2(x2d.shape[1])
    candidates = row_tile_candidates(
        block_n,
        loaded_bytes_per_column=x2d.element_size(),
        shared_bytes=shared_bytes_per_program(x2d.device),
    )
    if block_n in WIDE_THREAD_COLS:
        warps = block_n // (32 * WIDE_THREAD_VALUES)
        candidates.append({"ROWS": 1, "num_warps": warps, "num_stages": 1, "PERSISTENT": False})
    return candidates
