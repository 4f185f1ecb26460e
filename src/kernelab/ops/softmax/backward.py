"""Softmax backward: dx = y * (dy - sum(dy * y)) over the last dim, from the saved output y.

The gradient needs one number per row, the dot product dy . y, and then one elementwise pass.
The least traffic is one read of y and dy and one write of dx: 3 * rows * cols * itemsize.

    rows up to SINGLE_PASS_MAX_COLS   tiles of ROWS rows held in registers: the dot product
                                      and dx from one read (3 x the row bytes)
    longer rows                       split: a grid of (row, chunk) programs writes partial
                                      dot products (fp32, rows * chunks), then each chunk
                                      program sums its row's partials and writes dx. y and
                                      dy are read twice (5 x the row bytes, the second read
                                      from L2 while a chunk's lines are still there), but
                                      every SM works even on one row of 256K columns.

Products and sums in fp32 whatever the input dtype; dx has y's dtype.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

SUPPORTED_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
SINGLE_PASS_MAX_COLS = 16384
TILE_ELEMENTS = 4096  # elements per program in the single pass: 2 tensors x 8-16 per thread
CHUNK = 4096  # columns per program in the split path


@triton.jit
def _rows_kernel(y_ptr, dy_ptr, dx_ptr, n_rows, n_cols, y_stride, dy_stride, dx_stride,
                 BLOCK_N: tl.constexpr, ROWS: tl.constexpr):  # fmt: skip
    cols = tl.arange(0, BLOCK_N)
    rows = (tl.program_id(0) * ROWS + tl.arange(0, ROWS)).to(tl.int64)
    mask = (rows < n_rows)[:, None] & (cols < n_cols)[None, :]
    # read y and dy: 2 * ROWS * cols * itemsize, each used once (masked lanes add 0)
    y = tl.load(y_ptr + rows[:, None] * y_stride + cols[None, :], mask=mask, other=0.0,
                eviction_policy="evict_first").to(tl.float32)  # fmt: skip
    dy = tl.load(dy_ptr + rows[:, None] * dy_stride + cols[None, :], mask=mask, other=0.0,
                 eviction_policy="evict_first").to(tl.float32)  # fmt: skip
    dot = tl.sum(y * dy, axis=1)  # 2 FLOPs per element
    dx = y * (dy - dot[:, None])  # 2 FLOPs per element
    # write dx: ROWS * cols * itemsize
    tl.store(dx_ptr + rows[:, None] * dx_stride + cols[None, :],
             dx.to(dx_ptr.dtype.element_ty), mask=mask)  # fmt: skip


@triton.jit
def _partial_dots_kernel(y_ptr, dy_ptr, dots_ptr, n_cols, y_stride, dy_stride, n_chunks,
                         CHUNK: tl.constexpr):  # fmt: skip
    row = tl.program_id(0).to(tl.int64)
    chunk = tl.program_id(1)
    cols = chunk * CHUNK + tl.arange(0, CHUNK)
    mask = cols < n_cols
    # read a chunk of y and dy (kept in L2 for the second kernel: evict_last)
    y = tl.load(y_ptr + row * y_stride + cols, mask=mask, other=0.0,
                eviction_policy="evict_last").to(tl.float32)  # fmt: skip
    dy = tl.load(dy_ptr + row * dy_stride + cols, mask=mask, other=0.0,
                 eviction_policy="evict_last").to(tl.float32)  # fmt: skip
    # write one fp32 partial per (row, chunk): 4 / (CHUNK * 2 * itemsize) of the reads
    tl.store(dots_ptr + row * n_chunks + chunk, tl.sum(y * dy, axis=0))


@triton.jit
def _split_dx_kernel(y_ptr, dy_ptr, dx_ptr, dots_ptr, n_cols, y_stride, dy_stride, dx_stride,
                     n_chunks, CHUNK: tl.constexpr, CHUNKS_POW2: tl.constexpr):  # fmt: skip
    row = tl.program_id(0).to(tl.int64)
    chunk = tl.program_id(1)
    # the row's partial dot products: n_chunks fp32 values, summed in a fixed order
    parts = tl.arange(0, CHUNKS_POW2)
    dot = tl.sum(tl.load(dots_ptr + row * n_chunks + parts, mask=parts < n_chunks, other=0.0))
    cols = chunk * CHUNK + tl.arange(0, CHUNK)
    mask = cols < n_cols
    # read y and dy again (from L2 when the first kernel's lines survived), write dx
    y = tl.load(y_ptr + row * y_stride + cols, mask=mask, other=0.0,
                eviction_policy="evict_first").to(tl.float32)  # fmt: skip
    dy = tl.load(dy_ptr + row * dy_stride + cols, mask=mask, other=0.0,
                 eviction_policy="evict_first").to(tl.float32)  # fmt: skip
    tl.store(dx_ptr + row * dx_stride + cols, (y * (dy - dot)).to(dx_ptr.dtype.element_ty),
             mask=mask)  # fmt: skip


def _rows_config(block_n: int, n_rows: int) -> tuple[int, int]:
    """(ROWS, num_warps): about TILE_ELEMENTS per program, one warp per 512 of them."""
    rows = max(1, min(TILE_ELEMENTS // block_n, triton.next_power_of_2(n_rows)))
    return rows, max(1, min(16, rows * block_n // 512))


def softmax_backward(y, dy, *, single_pass_max_cols: int | None = None):
    """dx of softmax over the last dim of y[rows, cols] (= softmax(x)) for the gradient dy."""
    if y.dim() != 2 or dy.shape != y.shape:
        raise ValueError(f"softmax_backward needs y and dy of one shape [rows, cols], got "
                         f"{tuple(y.shape)} and {tuple(dy.shape)}")  # fmt: skip
    if y.dtype not in SUPPORTED_DTYPES or dy.dtype != y.dtype:
        raise ValueError(f"softmax_backward supports fp32, bf16 and fp16 (y and dy alike), "
                         f"not {y.dtype} and {dy.dtype}")  # fmt: skip
    y = y if y.stride(1) == 1 else y.contiguous()
    dy = dy if dy.stride(1) == 1 else dy.contiguous()
    n_rows, n_cols = y.shape
    dx = torch.empty((n_rows, n_cols), device=y.device, dtype=y.dtype)
    if dx.numel() == 0:
        return dx
    limit = SINGLE_PASS_MAX_COLS if single_pass_max_cols is None else single_pass_max_cols
    strides = (y.stride(0), dy.stride(0), dx.stride(0))
    if n_cols <= limit:
        block_n = triton.next_power_of_2(n_cols)
        rows, warps = _rows_config(block_n, n_rows)
        _rows_kernel[(triton.cdiv(n_rows, rows),)](
            y, dy, dx, n_rows, n_cols, *strides, BLOCK_N=block_n, ROWS=rows, num_warps=warps
        )
        return dx
    chunk = min(CHUNK, triton.next_power_of_2(limit))
    n_chunks = triton.cdiv(n_cols, chunk)
    dots = torch.empty((n_rows, n_chunks), device=y.device, dtype=torch.float32)
    grid = (n_rows, n_chunks)
    warps = max(1, min(8, chunk // 512))
    _partial_dots_kernel[grid](y, dy, dots, n_cols, strides[0], strides[1], n_chunks,
                               CHUNK=chunk, num_warps=warps)  # fmt: skip
    _split_dx_kernel[grid](y, dy, dx, dots, n_cols, *strides, n_chunks, CHUNK=chunk,
                           CHUNKS_POW2=triton.next_power_of_2(n_chunks), num_warps=warps)  # fmt: skip
    return dx
