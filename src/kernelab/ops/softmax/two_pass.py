"""The two-launch split row: chunk statistics first, then the normalization; two reads and one
write. What the CPU interpreter runs by default (it runs programs one after another, so peers
never meet), and the fallback when a split kernel's programs cannot all be resident.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernelab.ops.softmax.primitives import _chunk_stats, _combine_stats
from kernelab.runtime.launch_plans import keep
from kernelab.runtime.tuner import interpreting

INTERPRETER_CHUNK = 32


@triton.jit
def _softmax_chunk_stats_kernel(
    x_ptr, stats_ptr, n_cols, x_row_stride, n_chunks, CHUNK: tl.constexpr
):
    row = tl.program_id(0).to(tl.int64)
    chunk = tl.program_id(1)
    cols = chunk * CHUNK + tl.arange(0, CHUNK)
    # read CHUNK * itemsize
    x = tl.load(x_ptr + row * x_row_stride + cols, mask=cols < n_cols, other=-float("inf")).to(
        tl.float32
    )
    chunk_max, chunk_sum = _chunk_stats(x)
    slot = stats_ptr + (row * n_chunks + chunk) * 2  # write 8 bytes
    tl.store(slot, chunk_max)
    tl.store(slot + 1, chunk_sum)


@triton.jit
def _softmax_chunk_normalize_kernel(
    x_ptr,
    out_ptr,
    stats_ptr,
    n_cols,
    x_row_stride,
    out_row_stride,
    n_chunks,
    CHUNK: tl.constexpr,
    BLOCK_CHUNKS: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    chunk = tl.program_id(1)
    peers = tl.arange(0, BLOCK_CHUNKS)
    peer_slots = stats_ptr + (row * n_chunks + peers) * 2  # read 8 * n_chunks bytes
    maxes = tl.load(peer_slots, mask=peers < n_chunks, other=-float("inf"))
    sums = tl.load(peer_slots + 1, mask=peers < n_chunks, other=0.0)
    row_max, row_sum = _combine_stats(maxes, sums)
    cols = chunk * CHUNK + tl.arange(0, CHUNK)
    mask = cols < n_cols
    # the second read of the row: CHUNK * itemsize, from L2 only if it is still there
    x = tl.load(x_ptr + row * x_row_stride + cols, mask=mask, other=-float("inf")).to(tl.float32)
    y = tl.exp(x - row_max) * (1.0 / row_sum)
    tl.store(out_ptr + row * out_row_stride + cols, y.to(out_ptr.dtype.element_ty), mask=mask)


def launch(x2d, out, chunk: int) -> None:
    n_rows, n_cols = x2d.shape
    n_chunks = triton.cdiv(n_cols, chunk)
    # workspace: (max, sum) per chunk, 8 bytes x rows x chunks, tiny next to the row itself
    stats = torch.empty((n_rows, n_chunks, 2), device=x2d.device, dtype=torch.float32)
    warps = 1 if interpreting() else 4
    keep(stats)  # written whole by the first kernel before the second reads it
    _softmax_chunk_stats_kernel[(n_rows, n_chunks)](
        x2d,
        stats,
        n_cols,
        x2d.stride(0),
        n_chunks,
        CHUNK=chunk,
        num_warps=warps,
    )
    _softmax_chunk_normalize_kernel[(n_rows, n_chunks)](
        x2d,
        out,
        stats,
        n_cols,
        x2d.stride(0),
        out.stride(0),
        n_chunks,
        CHUNK=chunk,
        BLOCK_CHUNKS=triton.next_power_of_2(n_chunks),
        num_warps=warps,
    )
