"""Rows that fit in registers: one pass over tiles of ROWS rows, read once, written once.

ROWS rows per tile, autotuned per (padded row length, dtypes, op) over the softmax's row-tile
candidates (runtime.tuner.row_tile_candidates): first Inductor's choice for a persistent
reduction (one warp per 1,024 values for short rows, one row per program for long ones),
then 8-32 values per thread, two tiles' worth of rows (half the weight reads from L2 per
row), and a persistent grid. Bytes: the row read once (evict_first) and written once; the
weight and bias read from HBM once and from L2 by every later tile (evict_last).
"""

from __future__ import annotations

import triton
import triton.language as tl

from kernelab.ops.row_tiles import row_tiles
from kernelab.runtime.tuner import (
    interpreter_row_tile,
    interpreting,
    launch_row_tiles,
    row_tile_candidates,
    shared_bytes_per_program,
    tuned,
)


@triton.jit
def _norm_tile(
    x_ptr,
    w_ptr,
    b_ptr,
    out_ptr,
    tile,
    n_rows,
    n_cols,
    x_row_stride,
    out_row_stride,
    eps,
    IS_RMS: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    BLOCK_N: tl.constexpr,
    ROWS: tl.constexpr,
):
    cols = tl.arange(0, BLOCK_N)
    col_mask = cols < n_cols
    rows = (tile * ROWS + tl.arange(0, ROWS)).to(tl.int64)
    mask = (rows < n_rows)[:, None] & col_mask[None, :]
    # read ROWS * cols * itemsize, used once (masked lanes read 0 and add nothing to the sums)
    x = tl.load(
        x_ptr + rows[:, None] * x_row_stride + cols[None, :],
        mask=mask,
        other=0.0,
        eviction_policy="evict_first",
    ).to(tl.float32)
    if IS_RMS:
        mean_square = tl.sum(x * x, axis=1) / n_cols
        centered = x
        rstd = 1.0 / tl.sqrt(mean_square + eps)
    else:
        mean = tl.sum(x, axis=1) / n_cols
        centered = tl.where(mask, x - mean[:, None], 0.0)
        rstd = 1.0 / tl.sqrt(tl.sum(centered * centered, axis=1) / n_cols + eps)
    # weight (and bias): cols * itemsize each per tile, kept in L2 (evict_last) for the
    # other tiles: from HBM once, from L2 rows / ROWS times
    w = tl.load(w_ptr + cols, mask=col_mask, other=0.0, eviction_policy="evict_last")
    y = centered * rstd[:, None] * w.to(tl.float32)[None, :]
    if HAS_BIAS:
        b = tl.load(b_ptr + cols, mask=col_mask, other=0.0, eviction_policy="evict_last")
        y += b.to(tl.float32)[None, :]
    # write ROWS * cols * itemsize; ~7 FLOPs per element (layernorm), ~4 (rmsnorm)
    tl.store(
        out_ptr + rows[:, None] * out_row_stride + cols[None, :],
        y.to(out_ptr.dtype.element_ty),
        mask=mask,
    )


@triton.jit
def _norm_rows_kernel(
    x_ptr,
    w_ptr,
    b_ptr,
    out_ptr,
    n_rows,
    n_cols,
    x_row_stride,
    out_row_stride,
    eps,
    IS_RMS: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    BLOCK_N: tl.constexpr,
    ROWS: tl.constexpr,
    PERSISTENT: tl.constexpr,
    PIPELINE: tl.constexpr = 1,
):
    # persistent: programs stride over the tiles; otherwise one tile per program
    first, last, step = row_tiles(n_rows, ROWS, PERSISTENT)
    # PIPELINE > 1: the next tiles' loads in flight through shared memory (cp.async), turned
    # on by the loop's own num_stages, as in softmax.rows._softmax_rows_kernel
    for tile in tl.range(first, last, step, num_stages=PIPELINE):
        _norm_tile(
            x_ptr,
            w_ptr,
            b_ptr,
            out_ptr,
            tile,
            n_rows,
            n_cols,
            x_row_stride,
            out_row_stride,
            eps,
            IS_RMS,
            HAS_BIAS,
            BLOCK_N,
            ROWS,
        )


TUNED: dict[tuple, dict] = {}


def candidates_for(x2d, weight, bias=None) -> list[dict]:
    """The single pass's tuning candidates for these operands: a pipelined loop stages x, the
    weight and the bias (each loaded once per tile) in shared memory, so its depth is bounded
    by their itemsizes together and by the device's shared memory per program."""
    loaded = x2d.element_size() + weight.element_size()
    if bias is not None:
        loaded += bias.element_size()
    return row_tile_candidates(
        triton.next_power_of_2(x2d.shape[1]),
        loaded_bytes_per_column=loaded,
        shared_bytes=shared_bytes_per_program(x2d.device),
    )


def tuner_key(x2d, weight, is_rms: bool, has_bias: bool) -> tuple:
    block_n = triton.next_power_of_2(x2d.shape[1])
    return ("norms", block_n, x2d.dtype, weight.dtype, is_rms, has_bias, x2d.device.index)


def launch(x2d, weight, bias, bias_arg, out, eps, is_rms, config) -> None:
    """The single pass with `config` (a row-tile candidate), else the tuned one."""
    n_rows, n_cols = x2d.shape
    flags = {"IS_RMS": is_rms, "HAS_BIAS": bias is not None}
    block_n = triton.next_power_of_2(n_cols)
    args = (x2d, weight, bias_arg, out, n_rows, n_cols, x2d.stride(0), out.stride(0), eps)
    kwargs = {"BLOCK_N": block_n, **flags}

    def run(c: dict) -> None:
        launch_row_tiles(_norm_rows_kernel, args, kwargs, n_rows, c)

    if config is None:
        if interpreting():
            config = interpreter_row_tile(block_n)
        else:
            key = tuner_key(x2d, weight, is_rms, bias is not None)
            nbytes = x2d.numel() * x2d.element_size()
            config = tuned(TUNED, key, run, candidates_for(x2d, weight, bias), nbytes=nbytes)
    run(config)
