"""LayerNorm and RMSNorm forward over the last dimension, fp32 statistics, any row stride.

layernorm(x, w, b, eps) = (x - mean) / sqrt(var + eps) * w + b   (biased var, bias optional)
rmsnorm(x, w, eps)      = x / sqrt(mean(x^2) + eps) * w

Both are memory-bound: the ideal traffic is one read and one write of x (2 * rows * cols *
itemsize bytes) plus the weight (and bias) once, which stays in L2 after the first rows.
Rows up to SINGLE_PASS_MAX_COLS live in registers for the whole computation (one read, one
write), ROWS rows per tile, autotuned per (padded row length, dtypes, op) over the same
launch configurations as the softmax (_runtime.row_tile_candidates): first Inductor's
choice for a persistent reduction (one warp per 1,024 values for short rows, one row per
program for long ones), then 8-32 values per thread, two tiles' worth of rows (half the
weight reads from L2 per row), and a persistent grid. Longer rows take a looped path: one
loop for the statistics, one to normalize (two reads, one write).

The statistics are accumulated in fp32 whatever the input dtype; the output has x's dtype.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernelab.ops.row_tiles import row_tiles
from kernelab.runtime.launch_plans import launch, planned
from kernelab.runtime.tuner import (
    interpreter_row_tile,
    interpreting,
    launch_row_tiles,
    row_tile_candidates,
    shared_bytes_per_program,
    tuned,
)

# the dtypes it takes; a module constant, not a tuple built on every call
SUPPORTED_DTYPES = (torch.float32, torch.bfloat16, torch.float16)

SINGLE_PASS_MAX_COLS = 32768
LOOP_BLOCK = 4096
INTERPRETER_LOOP_BLOCK = 16


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


@triton.jit
def _norm_looped_kernel(
    x_ptr,
    w_ptr,
    b_ptr,
    out_ptr,
    n_cols,
    x_row_stride,
    out_row_stride,
    eps,
    IS_RMS: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    BLOCK: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * x_row_stride
    offsets = tl.arange(0, BLOCK)
    # Sums of (x - shift) and its square with shift = the row's first element: the variance
    # then does not cancel catastrophically when |mean| >> std.
    shift = 0.0
    if not IS_RMS:
        shift = tl.load(x_row).to(tl.float32)
    total = tl.zeros([BLOCK], dtype=tl.float32)
    total_sq = tl.zeros([BLOCK], dtype=tl.float32)
    for start in tl.range(0, n_cols, BLOCK):
        cols = start + offsets
        mask = cols < n_cols
        x = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)  # first read of the row
        d = tl.where(mask, x - shift, 0.0)
        total += d
        total_sq += d * d
    mean_d = tl.sum(total, axis=0) / n_cols
    if IS_RMS:
        mean = 0.0
        rstd = 1.0 / tl.sqrt(tl.sum(total_sq, axis=0) / n_cols + eps)
    else:
        mean = shift + mean_d
        var = tl.maximum(tl.sum(total_sq, axis=0) / n_cols - mean_d * mean_d, 0.0)
        rstd = 1.0 / tl.sqrt(var + eps)
    for start in tl.range(0, n_cols, BLOCK):
        cols = start + offsets
        mask = cols < n_cols
        x = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)  # second read
        y = (x - mean) * rstd * tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        if HAS_BIAS:
            y += tl.load(b_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(out_ptr + row * out_row_stride + cols, y.to(out_ptr.dtype.element_ty), mask=mask)


_tuned: dict[tuple, dict] = {}


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


def _normalize(
    x,
    weight,
    bias,
    eps: float,
    *,
    is_rms: bool,
    single_pass_max_cols: int | None,
    config: dict | None,
):
    if x.dim() != 2:
        raise ValueError(f"norms expect a 2-D tensor [rows, cols], got shape {tuple(x.shape)}")
    if x.dtype not in SUPPORTED_DTYPES:
        # fp32 statistics: fp64 would silently lose precision, integers be rounded
        name = "rmsnorm" if is_rms else "layernorm"
        raise ValueError(f"{name} supports fp32, bf16 and fp16, not {x.dtype}")
    n_rows, n_cols = x.shape
    if weight.shape != (n_cols,) or (bias is not None and bias.shape != (n_cols,)):
        raise ValueError(f"weight and bias must have shape ({n_cols},)")
    x2d = x if x.stride(1) == 1 else x.contiguous()
    weight = weight.contiguous()
    bias_arg = bias.contiguous() if bias is not None else weight  # never read without HAS_BIAS
    # the same new contiguous tensor as torch.empty((n_rows, n_cols), device=, dtype=), for
    # two thirds of its Python cost (0.87 against 1.3 us on the CPU here)
    out = torch.empty_like(x2d, memory_format=torch.contiguous_format)
    if n_rows == 0 or n_cols == 0:
        return out
    if single_pass_max_cols is not None or config is not None:
        _launch(x2d, weight, bias, bias_arg, out, eps, is_rms, single_pass_max_cols, config)
        return out
    # the tuned choice: planned (launch_plans); eps and the flags are replayed as recorded,
    # so they are part of the key. Without a bias the kernel's bias pointer is weight's, which
    # the recording finds among the call's tensors by address: passing weight once keeps one
    # tensor and the aliasing check out of every key.
    if bias is None:
        _planned(x2d, weight, out, float(eps), is_rms, False)
    else:
        _planned_with_bias(x2d, weight, bias_arg, out, float(eps), is_rms, True)
    return out


@planned("triton.norms", tensors=3, untuned=None)
def _planned(x2d, weight, out, eps: float, is_rms: bool, has_bias: bool) -> None:
    """The tuned launch without a bias (the kernel's bias pointer is weight's)."""
    _launch(x2d, weight, None, weight, out, eps, is_rms, None, None)


@planned(_planned.plans, tensors=4, untuned=None)
def _planned_with_bias(x2d, weight, bias, out, eps: float, is_rms: bool, has_bias: bool) -> None:
    """The tuned launch with a bias."""
    _launch(x2d, weight, bias, bias, out, eps, is_rms, None, None)


PLANS = _planned.plans  # the launch plans (tests read and reset them)


def _launch(x2d, weight, bias, bias_arg, out, eps, is_rms, single_pass_max_cols, config) -> None:
    n_rows, n_cols = x2d.shape
    flags = {"IS_RMS": is_rms, "HAS_BIAS": bias is not None}
    limit = SINGLE_PASS_MAX_COLS if single_pass_max_cols is None else single_pass_max_cols
    if n_cols > limit:
        block = INTERPRETER_LOOP_BLOCK if interpreting() else LOOP_BLOCK
        launch(
            _norm_looped_kernel,
            (n_rows,),
            x2d,
            weight,
            bias_arg,
            out,
            n_cols,
            x2d.stride(0),
            out.stride(0),
            eps,
            BLOCK=block,
            num_warps=1 if interpreting() else 8,
            **flags,
        )
        return

    block_n = triton.next_power_of_2(n_cols)
    args = (x2d, weight, bias_arg, out, n_rows, n_cols, x2d.stride(0), out.stride(0), eps)
    kwargs = {"BLOCK_N": block_n, **flags}

    def run(c: dict) -> None:
        launch_row_tiles(_norm_rows_kernel, args, kwargs, n_rows, c)

    if config is None:
        if interpreting():
            config = interpreter_row_tile(block_n)
        else:
            key = (
                "norms",
                block_n,
                x2d.dtype,
                weight.dtype,
                is_rms,
                bias is not None,
                x2d.device.index,
            )
            nbytes = x2d.numel() * x2d.element_size()
            config = tuned(_tuned, key, run, candidates_for(x2d, weight, bias), nbytes=nbytes)
    run(config)


def layernorm(
    x,
    weight,
    bias=None,
    eps: float = 1e-5,
    *,
    single_pass_max_cols: int | None = None,
    config: dict | None = None,
):
    """LayerNorm of x[rows, cols] over cols; bias may be None. Returns a new tensor.

    config launches one of row_tile_candidates(next_power_of_2(cols)) instead of the tuned one.
    """
    return _normalize(
        x,
        weight,
        bias,
        float(eps),
        is_rms=False,
        single_pass_max_cols=single_pass_max_cols,
        config=config,
    )


def rmsnorm(
    x,
    weight,
    eps: float = 1e-6,
    *,
    single_pass_max_cols: int | None = None,
    config: dict | None = None,
):
    """RMSNorm of x[rows, cols] over cols. Returns a new tensor (config: as for layernorm)."""
    return _normalize(
        x,
        weight,
        None,
        float(eps),
        is_rms=True,
        single_pass_max_cols=single_pass_max_cols,
        config=config,
    )


def config_for(x, weight, bias=None, *, is_rms: bool) -> dict:
    """The path and launch configuration the norm of x uses (the default if not tuned yet)."""
    n_cols = x.shape[-1]
    if n_cols > SINGLE_PASS_MAX_COLS:
        return {"path": "looped", "BLOCK": LOOP_BLOCK}
    block_n = triton.next_power_of_2(n_cols)
    key = ("norms", block_n, x.dtype, weight.dtype, is_rms, bias is not None, x.device.index)
    config = _tuned.get(key) or row_tile_candidates(block_n)[0]
    return {"path": "single-pass", **config}
