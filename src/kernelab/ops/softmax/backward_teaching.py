"""Softmax backward, the form a learner writes first: one program per row, the row in registers.

For y = softmax(x) and the gradient dy, dx = y * (dy - sum(dy * y)) over the row: one dot
product, then one multiply per element. Bytes: read y and dy, write dx (3 x rows x cols x
itemsize); FLOPs: 4 per element. The row must fit one program's registers (<= 16,384 values);
backward.py tiles long rows and shares programs between rows.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

MAX_COLS = 16384


@triton.jit
def softmax_backward_kernel(y_ptr, dy_ptr, dx_ptr, n_cols, y_stride, dy_stride, dx_stride,
                            BLOCK: tl.constexpr):  # fmt: skip
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    y = tl.load(y_ptr + row * y_stride + cols, mask=mask, other=0.0).to(tl.float32)
    dy = tl.load(dy_ptr + row * dy_stride + cols, mask=mask, other=0.0).to(tl.float32)
    dot = tl.sum(y * dy, axis=0)
    dx = y * (dy - dot)
    tl.store(dx_ptr + row * dx_stride + cols, dx.to(dx_ptr.dtype.element_ty), mask=mask)


def softmax_backward(y, dy):
    """dx of softmax over the last dim of y[rows, cols] for the gradient dy."""
    if y.dim() != 2 or dy.shape != y.shape:
        raise ValueError(f"softmax_backward needs y and dy of one shape [rows, cols], got "
                         f"{tuple(y.shape)} and {tuple(dy.shape)}")  # fmt: skip
    if y.dtype not in (torch.float32, torch.bfloat16, torch.float16) or dy.dtype != y.dtype:
        raise ValueError(f"softmax_backward supports fp32, bf16 and fp16 (y and dy alike), "
                         f"not {y.dtype} and {dy.dtype}")  # fmt: skip
    if y.shape[1] > MAX_COLS:
        raise ValueError(f"the teaching softmax_backward holds a row in registers: at most "
                         f"{MAX_COLS} columns, got {y.shape[1]}")  # fmt: skip
    y = y if y.stride(1) == 1 else y.contiguous()
    dy = dy if dy.stride(1) == 1 else dy.contiguous()
    dx = torch.empty(y.shape, device=y.device, dtype=y.dtype)
    if dx.numel():
        softmax_backward_kernel[(y.shape[0],)](y, dy, dx, y.shape[1], y.stride(0), dy.stride(0),
                                               dx.stride(0), BLOCK=triton.next_power_of_2(y.shape[1]))  # fmt: skip
    return dx
