"""RMSNorm backward, the form a learner writes first: one program per row, the row in
registers, the weight's gradient left to torch.

For y = x * r * w with r = 1 / sqrt(mean(x^2) + eps), x_hat = x * r and g = dy * w:
dx = r * (g - x_hat * mean(g * x_hat)) per row, and dw = sum over rows of dy * x_hat. Each
program writes its row's dx and its row's dy * x_hat into an fp32 [rows, cols] buffer, which
torch sums: simple, but that buffer costs rows x cols x 4 bytes written and read again, where
backward.py keeps one fp32 partial per program. Output: stack(dx, dw) [rows + 1, cols].
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

MAX_COLS = 8192


@triton.jit
def rmsnorm_backward_kernel(x_ptr, w_ptr, dy_ptr, dx_ptr, dw_rows_ptr, n_cols, x_stride,
                            dy_stride, dx_stride, eps, BLOCK: tl.constexpr):  # fmt: skip
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * x_stride + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    dy = tl.load(dy_ptr + row * dy_stride + cols, mask=mask, other=0.0).to(tl.float32)
    r = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    x_hat = x * r
    g = dy * w
    dx = r * (g - x_hat * (tl.sum(g * x_hat, axis=0) / n_cols))
    tl.store(dx_ptr + row * dx_stride + cols, dx.to(dx_ptr.dtype.element_ty), mask=mask)
    tl.store(dw_rows_ptr + row * n_cols + cols, dy * x_hat, mask=mask)


def rmsnorm_backward(x, weight, dy, eps: float = 1e-6):
    """stack(dx, dweight) [rows + 1, cols] of rmsnorm(x, weight, eps) for the gradient dy."""
    if x.dim() != 2 or dy.shape != x.shape or weight.shape != (x.shape[1],):
        raise ValueError(f"rmsnorm_backward needs x and dy [rows, cols] and weight[cols], got "
                         f"{tuple(x.shape)}, {tuple(dy.shape)} and {tuple(weight.shape)}")  # fmt: skip
    if x.dtype not in (torch.float32, torch.bfloat16, torch.float16) or {dy.dtype, weight.dtype} != {x.dtype}:
        raise ValueError(f"rmsnorm_backward supports fp32, bf16 and fp16 (all inputs alike), "
                         f"not {x.dtype}, {weight.dtype} and {dy.dtype}")  # fmt: skip
    if x.shape[1] > MAX_COLS:
        raise ValueError(f"the teaching rmsnorm_backward holds a row in registers: at most "
                         f"{MAX_COLS} columns, got {x.shape[1]}")  # fmt: skip
    x = x if x.stride(1) == 1 else x.contiguous()
    dy = dy if dy.stride(1) == 1 else dy.contiguous()
    weight = weight.contiguous()
    rows, cols = x.shape
    out = torch.empty((rows + 1, cols), device=x.device, dtype=x.dtype)
    if rows == 0 or cols == 0:
        return out.zero_()
    dw_rows = torch.empty((rows, cols), device=x.device, dtype=torch.float32)
    rmsnorm_backward_kernel[(rows,)](x, weight, dy, out, dw_rows, cols, x.stride(0), dy.stride(0),
                                     out.stride(0), eps, BLOCK=triton.next_power_of_2(cols))  # fmt: skip
    out[rows] = dw_rows.sum(dim=0).to(x.dtype)
    return out
