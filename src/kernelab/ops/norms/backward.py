"""RMSNorm backward: dx and dweight from x, weight and the gradient dy, stacked [rows + 1, cols].

    rstd = 1 / sqrt(mean(x^2) + eps)      xhat = x * rstd
    dx   = rstd * (w*dy - xhat * mean(w*dy * xhat))        per row
    dw   = sum over rows of dy * xhat                      per column

dx needs two row statistics (mean square, mean of w*dy*xhat) and then one elementwise pass;
dw is a column sum over every row. The least traffic is one read of x and dy, one write of
dx (3 * rows * cols * itemsize) and cols for the weight and for dw.

    rows up to SINGLE_PASS_MAX_COLS   a grid of about two programs per SM; each walks its
                                      tiles of ROWS rows, the rows in registers: both
                                      statistics and dx from one read, and dy * xhat added
                                      into an fp32 dw accumulator that stays in registers
                                      across the tiles
    longer rows                       a statistics kernel (rstd and mean(w*dy*xhat) per row,
                                      8 bytes) then a (row group, chunk) grid that writes dx
                                      and the chunk's dw partials: x and dy are read twice

dweight: each program writes its fp32 partial row once (programs * cols * 4 bytes, about 2 x
SMs rows, small beside rows * cols once rows are in the thousands) and a second kernel sums
the partials down the columns in a fixed order. Atomics would skip that kernel but add in an
order that changes from run to run, so dw would not be reproducible; partials are.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernelab.runtime.tuner import sm_count

SUPPORTED_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
SINGLE_PASS_MAX_COLS = 8192  # 16K columns spill on sm_90 at any warp count (see rows_warps)
TILE_ELEMENTS = 4096  # elements per tile in the single pass
CHUNK = 2048  # columns per program in the long-row path
PROGRAMS_PER_SM = 2
DW_BLOCK = 256  # columns per program of the final dw sum


@triton.jit
def _rows_kernel(x_ptr, w_ptr, dy_ptr, out_ptr, partial_ptr, n_rows, n_cols, x_stride,
                 dy_stride, eps, BLOCK_N: tl.constexpr, ROWS: tl.constexpr):  # fmt: skip
    cols = tl.arange(0, BLOCK_N)
    col_mask = cols < n_cols
    dw = tl.zeros((BLOCK_N,), dtype=tl.float32)
    for tile in range(tl.program_id(0), tl.cdiv(n_rows, ROWS), tl.num_programs(0)):
        rows = (tile * ROWS + tl.arange(0, ROWS)).to(tl.int64)
        mask = (rows < n_rows)[:, None] & col_mask[None, :]
        # read x and dy once: 2 * ROWS * cols * itemsize (masked lanes read 0, add nothing)
        x = tl.load(x_ptr + rows[:, None] * x_stride + cols[None, :], mask=mask, other=0.0,
                    eviction_policy="evict_first").to(tl.float32)  # fmt: skip
        dy = tl.load(dy_ptr + rows[:, None] * dy_stride + cols[None, :], mask=mask, other=0.0,
                     eviction_policy="evict_first").to(tl.float32)  # fmt: skip
        # the weight per tile, cols * itemsize from L2 (evict_last; HBM once): held across
        # the loop it would cost BLOCK_N / threads registers more, and 16K columns spill
        w = tl.load(w_ptr + cols, mask=col_mask, other=0.0, eviction_policy="evict_last")
        rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=1) / n_cols + eps)
        xhat = x * rstd[:, None]
        wdy = w.to(tl.float32)[None, :] * dy
        mean_wdy_xhat = tl.sum(wdy * xhat, axis=1) / n_cols
        dx = (wdy - xhat * mean_wdy_xhat[:, None]) * rstd[:, None]
        # write dx: ROWS * cols * itemsize (dx rows are out's first n_rows rows, stride cols)
        tl.store(out_ptr + rows[:, None] * n_cols + cols[None, :],
                 dx.to(out_ptr.dtype.element_ty), mask=mask)  # fmt: skip
        dw += tl.sum(dy * xhat, axis=0)
    # this program's dw partial: cols * 4 bytes, once
    tl.store(partial_ptr + tl.program_id(0) * n_cols + cols, dw, mask=col_mask)


@triton.jit
def _stats_kernel(x_ptr, w_ptr, dy_ptr, stats_ptr, n_cols, x_stride, dy_stride, eps,
                  CHUNK: tl.constexpr):  # fmt: skip
    row = tl.program_id(0).to(tl.int64)
    squares = tl.zeros((CHUNK,), dtype=tl.float32)
    products = tl.zeros((CHUNK,), dtype=tl.float32)
    for start in range(0, n_cols, CHUNK):
        cols = start + tl.arange(0, CHUNK)
        mask = cols < n_cols
        x = tl.load(x_ptr + row * x_stride + cols, mask=mask, other=0.0).to(tl.float32)
        dy = tl.load(dy_ptr + row * dy_stride + cols, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        squares += x * x
        products += w * dy * x
    rstd = 1.0 / tl.sqrt(tl.sum(squares, axis=0) / n_cols + eps)
    # mean(w*dy*xhat) = rstd * mean(w*dy*x): 8 bytes per row
    tl.store(stats_ptr + row * 2, rstd)
    tl.store(stats_ptr + row * 2 + 1, rstd * tl.sum(products, axis=0) / n_cols)


@triton.jit
def _chunk_kernel(x_ptr, w_ptr, dy_ptr, out_ptr, partial_ptr, stats_ptr, n_rows, n_cols,
                  x_stride, dy_stride, CHUNK: tl.constexpr):  # fmt: skip
    cols = tl.program_id(1) * CHUNK + tl.arange(0, CHUNK)
    mask = cols < n_cols
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    dw = tl.zeros((CHUNK,), dtype=tl.float32)
    # int64 row offsets: rows * stride passes 2^31 elements in large inputs
    for row in range(tl.program_id(0).to(tl.int64), n_rows, tl.num_programs(0)):
        rstd = tl.load(stats_ptr + row * 2)
        mean_wdy_xhat = tl.load(stats_ptr + row * 2 + 1)
        # the second read of x and dy, a chunk of the row
        x = tl.load(x_ptr + row * x_stride + cols, mask=mask, other=0.0).to(tl.float32)
        dy = tl.load(dy_ptr + row * dy_stride + cols, mask=mask, other=0.0).to(tl.float32)
        xhat = x * rstd
        dx = (w * dy - xhat * mean_wdy_xhat) * rstd
        tl.store(out_ptr + row * n_cols + cols, dx.to(out_ptr.dtype.element_ty), mask=mask)
        dw += dy * xhat
    tl.store(partial_ptr + tl.program_id(0) * n_cols + cols, dw, mask=mask)


@triton.jit
def _sum_partials_kernel(partial_ptr, out_ptr, n_parts, n_cols, BLOCK: tl.constexpr):
    cols = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < n_cols
    total = tl.zeros((BLOCK,), dtype=tl.float32)
    for part in range(0, n_parts):  # a fixed order: the same dw on every run
        total += tl.load(partial_ptr + part * n_cols + cols, mask=mask, other=0.0)
    tl.store(out_ptr + cols, total.to(out_ptr.dtype.element_ty), mask=mask)


def rows_warps(rows: int, block_n: int) -> int:
    """One warp per 512 elements of a tile: x, dy and the dw accumulator at 16 fp32 values
    per thread each, about 100 registers (ptxas sm_90). 16K columns spill whether 16 warps
    (128 registers a thread at most) or 32 (64) share them: they take the long-row path."""
    return max(1, min(16, rows * block_n // 512))


def rmsnorm_backward(x, weight, dy, eps: float = 1e-6, *, single_pass_max_cols=None,
                     programs: int | None = None):  # fmt: skip
    """stack(dx, dweight) [rows + 1, cols] of rmsnorm(x, weight, eps) for the gradient dy.

    programs: how many programs share the rows (the dw partials); default two per SM."""
    if x.dim() != 2 or dy.shape != x.shape or weight.shape != (x.shape[1],):
        raise ValueError(f"rmsnorm_backward needs x and dy [rows, cols] and weight[cols], got "
                         f"{tuple(x.shape)}, {tuple(dy.shape)} and {tuple(weight.shape)}")  # fmt: skip
    if x.dtype not in SUPPORTED_DTYPES or {dy.dtype, weight.dtype} != {x.dtype}:
        raise ValueError(f"rmsnorm_backward supports fp32, bf16 and fp16 (all inputs alike), "
                         f"not {x.dtype}, {weight.dtype} and {dy.dtype}")  # fmt: skip
    x = x if x.stride(1) == 1 else x.contiguous()
    dy = dy if dy.stride(1) == 1 else dy.contiguous()
    weight = weight.contiguous()
    n_rows, n_cols = x.shape
    out = torch.empty((n_rows + 1, n_cols), device=x.device, dtype=x.dtype)
    if n_rows == 0 or n_cols == 0:
        return out.zero_()
    limit = SINGLE_PASS_MAX_COLS if single_pass_max_cols is None else single_pass_max_cols
    wanted = programs or PROGRAMS_PER_SM * sm_count(x.device)
    if n_cols <= limit:
        block_n = triton.next_power_of_2(n_cols)
        rows = max(1, min(TILE_ELEMENTS // block_n, triton.next_power_of_2(n_rows)))
        n_programs = max(1, min(wanted, triton.cdiv(n_rows, rows)))
        partial = torch.empty((n_programs, n_cols), device=x.device, dtype=torch.float32)
        _rows_kernel[(n_programs,)](
            x, weight, dy, out, partial, n_rows, n_cols, x.stride(0), dy.stride(0), eps,
            BLOCK_N=block_n, ROWS=rows, num_warps=rows_warps(rows, block_n),
        )  # fmt: skip
    else:
        chunk = min(CHUNK, triton.next_power_of_2(limit))
        n_chunks = triton.cdiv(n_cols, chunk)
        # enough row groups that groups x chunks fill the GPU, no more than there are rows
        n_programs = max(1, min(n_rows, triton.cdiv(wanted, n_chunks)))
        stats = torch.empty((n_rows, 2), device=x.device, dtype=torch.float32)
        partial = torch.empty((n_programs, n_cols), device=x.device, dtype=torch.float32)
        warps = max(1, min(8, chunk // 256))
        _stats_kernel[(n_rows,)](x, weight, dy, stats, n_cols, x.stride(0), dy.stride(0), eps,
                                 CHUNK=chunk, num_warps=warps)  # fmt: skip
        _chunk_kernel[(n_programs, n_chunks)](
            x, weight, dy, out, partial, stats, n_rows, n_cols, x.stride(0), dy.stride(0),
            CHUNK=chunk, num_warps=warps,
        )  # fmt: skip
    # dw = the partials summed down: programs * cols * 4 bytes read, cols written
    _sum_partials_kernel[(triton.cdiv(n_cols, DW_BLOCK),)](
        partial, out[n_rows], n_programs, n_cols, BLOCK=DW_BLOCK, num_warps=4
    )
    return out
