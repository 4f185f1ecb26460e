"""Rows longer than the single pass holds: one loop for the statistics, one to normalize.

Bytes: the row read twice (the second read from L2 where it is still there) and written once.
One program per row, BLOCK values per step.
"""

from __future__ import annotations

import triton
import triton.language as tl

from kernelab.runtime.tuner import interpreting

LOOP_BLOCK = 4096
INTERPRETER_LOOP_BLOCK = 16


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


def launch(x2d, weight, bias, bias_arg, out, eps, is_rms) -> None:
    n_rows, n_cols = x2d.shape
    flags = {"IS_RMS": is_rms, "HAS_BIAS": bias is not None}
    block = INTERPRETER_LOOP_BLOCK if interpreting() else LOOP_BLOCK
    _norm_looped_kernel[(n_rows,)](
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
