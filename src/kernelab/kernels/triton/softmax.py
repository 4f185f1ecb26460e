"""Fused softmax over the last dimension of a 2-D tensor, for any row length.

softmax(x)[r, c] = exp(x[r, c] - max_r) / sum_c' exp(x[r, c'] - max_r), computed in fp32
whatever the input dtype (fp32, bf16, fp16); the output has the input's dtype and shape.
The ideal traffic is one read and one write of the tensor (2 * rows * cols * itemsize
bytes); every path below is judged by how close it stays to that at HBM bandwidth.

Three paths, chosen by row length:

1. Rows that fit in registers (cols <= SINGLE_PASS_MAX_COLS): one pass. A persistent grid
   (programs = SMs x programs per SM, read from the compiled kernel's registers and shared
   memory) walks over tiles of ROWS x BLOCK_N; short rows are packed several per tile so that
   each program still moves tens of KiB per step. Read once, write once.
2. Long rows on a GPU: a cooperative split-row kernel. Each row is cut into chunks of CHUNK
   columns, one per program; the programs of a row each keep their chunk in registers,
   publish the chunk's (max, sum of exp) to a tiny workspace, wait at a per-row-group
   counter for their peers, combine the partials and write. Still one read and one write,
   with all of a row's chunks in flight on different SMs, so even one long row streams at
   full bandwidth. It needs every program resident at once, so its grid is never larger than
   what the occupancy of the compiled kernel allows (and a bounded wait turns a deadlock
   into NaN output rather than a hang).
3. Long rows anywhere else (the CPU interpreter, which runs programs one after another, or
   more chunks per row than can be resident): the same chunk statistics in two launches,
   stats then normalize; two reads and one write.

Numerics: the max is subtracted before exp, so huge inputs (1e4) are safe. A row whose
entries are all -inf has no defined softmax: this module returns NaN for every entry of such
a row (exp(-inf - -inf) = NaN), exactly as torch.softmax does. A row with some -inf entries
gives them probability 0.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernelab.kernels.triton._runtime import (
    fastest,
    interpreting,
    persistent_grid,
    resident_programs,
)

SINGLE_PASS_MAX_COLS = 16384
# One tile holds about this many elements (fp32 in registers: 32 KiB per program per step).
ROW_TILE_ELEMENTS = 8192
# Bytes of a row each cooperative program holds: 16 KiB keeps ~32-64 fp32 per thread at 4
# warps, so 4+ programs fit per SM and a program waiting at the barrier overlaps the loads
# of the others.
CHUNK_BYTES = 16384
COOP_WARPS = 4
# A poll of the arrival counter is one L2 round trip (~1 us), so ~2^22 polls is seconds:
# long enough for any real wait, short enough that a broken residency assumption ends.
MAX_SPINS = 1 << 22
INTERPRETER_CHUNK = 32


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
):
    cols = tl.arange(0, BLOCK_N)
    col_mask = cols < n_cols
    n_tiles = tl.cdiv(n_rows, ROWS)
    for tile in tl.range(tl.program_id(0), n_tiles, tl.num_programs(0)):
        rows = (tile * ROWS + tl.arange(0, ROWS)).to(tl.int64)
        mask = (rows < n_rows)[:, None] & col_mask[None, :]
        # read ROWS * cols * itemsize; padding is -inf so it adds exp(-inf) = 0 to the sum
        x = tl.load(
            x_ptr + rows[:, None] * x_row_stride + cols[None, :], mask=mask, other=-float("inf")
        ).to(tl.float32)
        row_max = tl.max(x, axis=1)
        numerator = tl.exp(x - row_max[:, None])
        denominator = tl.sum(numerator, axis=1)
        y = numerator * (1.0 / denominator)[:, None]
        # write ROWS * cols * itemsize; ~4 FLOPs and one exp per element
        tl.store(
            out_ptr + rows[:, None] * out_row_stride + cols[None, :],
            y.to(out_ptr.dtype.element_ty),
            mask=mask,
        )


@triton.jit
def _chunk_stats(x):
    """(max, sum of exp(x - max)) of one fp32 chunk; (-inf, 0) for a chunk of only -inf."""
    chunk_max = tl.max(x, axis=0)
    shift = tl.where(chunk_max == -float("inf"), 0.0, chunk_max)
    return chunk_max, tl.sum(tl.exp(x - shift), axis=0)


@triton.jit
def _combine_stats(maxes, sums):
    """The row's max and sum of exp from its chunks' partials (padding: -inf, 0)."""
    row_max = tl.max(maxes, axis=0)
    # all -inf row: exp(-inf - -inf) = NaN here, and NaN is the documented output
    return row_max, tl.sum(sums * tl.exp(maxes - row_max), axis=0)


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


@triton.jit
def _softmax_coop_kernel(
    x_ptr,
    out_ptr,
    stats_ptr,
    arrivals_ptr,
    n_rows,
    n_cols,
    x_row_stride,
    out_row_stride,
    n_chunks,
    n_groups,
    CHUNK: tl.constexpr,
    BLOCK_CHUNKS: tl.constexpr,
    MAX_SPINS: tl.constexpr,
):
    # Programs g*n_chunks .. g*n_chunks + n_chunks-1 form group g; together they own one row
    # at a time (rows g, g + n_groups, ...), program `chunk` holding columns of its chunk.
    group = tl.program_id(0) // n_chunks
    chunk = tl.program_id(0) % n_chunks
    cols = chunk * CHUNK + tl.arange(0, CHUNK)
    mask = cols < n_cols
    peers = tl.arange(0, BLOCK_CHUNKS)
    iteration = 0
    for row in tl.range(group, n_rows, n_groups):
        row64 = row.to(tl.int64)
        # the only read of the row: CHUNK * itemsize per program, kept in registers
        x = tl.load(x_ptr + row64 * x_row_stride + cols, mask=mask, other=-float("inf")).to(
            tl.float32
        )
        chunk_max, chunk_sum = _chunk_stats(x)
        # Partials are double-buffered by iteration parity: a program can only be one row
        # ahead of its slowest peer, because it passed the barrier that peer also arrives at.
        buffer = stats_ptr + ((group * 2 + iteration % 2) * n_chunks) * 2
        tl.store(buffer + chunk * 2, chunk_max)
        tl.store(buffer + chunk * 2 + 1, chunk_sum)
        tl.debug_barrier()  # every thread's stores happen before the release below
        tl.atomic_add(arrivals_ptr + group, 1, sem="release", scope="gpu")
        target = (iteration + 1) * n_chunks
        arrived = tl.atomic_add(arrivals_ptr + group, 0, sem="acquire", scope="gpu")
        spins = 0
        while (arrived < target) & (spins < MAX_SPINS):
            arrived = tl.atomic_add(arrivals_ptr + group, 0, sem="acquire", scope="gpu")
            spins += 1
        # .cg: read the peers' partials from L2, never from a stale L1 line of 2 rows ago
        maxes = tl.load(
            buffer + peers * 2, mask=peers < n_chunks, other=-float("inf"), cache_modifier=".cg"
        )
        sums = tl.load(
            buffer + peers * 2 + 1, mask=peers < n_chunks, other=0.0, cache_modifier=".cg"
        )
        row_max, row_sum = _combine_stats(maxes, sums)
        y = tl.exp(x - row_max) * (1.0 / row_sum)
        y = tl.where(arrived < target, float("nan"), y)  # a wait that gave up poisons the row
        # the only write: CHUNK * itemsize per program
        tl.store(out_ptr + row64 * out_row_stride + cols, y.to(out_ptr.dtype.element_ty), mask=mask)
        iteration += 1


def _rows_candidates(block_n: int) -> list[dict]:
    """Launch configurations to try for the single-pass kernel at this padded row length."""
    rows = max(1, ROW_TILE_ELEMENTS // block_n)
    elements = rows * block_n
    # ~16-32 fp32 values per thread: enough 16-byte loads in flight, no spills
    base_warps = max(1, min(16, elements // (32 * 32)))
    candidates = []
    for warps in sorted({base_warps, min(32, base_warps * 2)}):
        for stages in (1, 2):
            candidates.append({"ROWS": rows, "num_warps": warps, "num_stages": stages})
    return candidates


_tuned_rows: dict[tuple, dict] = {}


def _launch_rows(x2d, out, block_n: int) -> None:
    n_rows, n_cols = x2d.shape
    if interpreting():
        config = {"ROWS": max(1, min(4, 64 // block_n)), "num_warps": 1, "num_stages": 1}
    else:
        key = (n_cols, x2d.dtype, x2d.device.index)
        if key not in _tuned_rows:
            candidates = _rows_candidates(block_n)
            _tuned_rows[key] = fastest(lambda c: _run_rows(x2d, out, block_n, c), candidates)
        config = _tuned_rows[key]
    _run_rows(x2d, out, block_n, config)


def _run_rows(x2d, out, block_n: int, config: dict) -> None:
    n_rows, n_cols = x2d.shape
    args = (x2d, out, n_rows, n_cols, x2d.stride(0), out.stride(0))
    kwargs = {"BLOCK_N": block_n, **config}
    grid = persistent_grid(_softmax_rows_kernel, args, kwargs, triton.cdiv(n_rows, config["ROWS"]))
    _softmax_rows_kernel[grid](*args, **kwargs)


def _chunk_cols(dtype, chunk_cols: int | None) -> int:
    if chunk_cols is not None:
        return triton.next_power_of_2(chunk_cols)
    if interpreting():
        return INTERPRETER_CHUNK
    return CHUNK_BYTES // torch.empty((), dtype=dtype).element_size()


def _launch_two_pass(x2d, out, chunk: int) -> None:
    n_rows, n_cols = x2d.shape
    n_chunks = triton.cdiv(n_cols, chunk)
    # workspace: (max, sum) per chunk, 8 bytes x rows x chunks, tiny next to the row itself
    stats = torch.empty((n_rows, n_chunks, 2), device=x2d.device, dtype=torch.float32)
    warps = 1 if interpreting() else 4
    _softmax_chunk_stats_kernel[(n_rows, n_chunks)](
        x2d, stats, n_cols, x2d.stride(0), n_chunks, CHUNK=chunk, num_warps=warps
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


def _launch_cooperative(x2d, out, chunk: int) -> bool:
    """Run the one-pass split-row kernel; False when its programs cannot all be resident."""
    n_rows, n_cols = x2d.shape
    n_chunks = triton.cdiv(n_cols, chunk)
    block_chunks = triton.next_power_of_2(n_chunks)
    # num_stages=1: no software pipelining, so no load is ever hoisted above the barrier
    kwargs = {
        "CHUNK": chunk,
        "BLOCK_CHUNKS": block_chunks,
        "MAX_SPINS": MAX_SPINS,
        "num_warps": COOP_WARPS,
        "num_stages": 1,
    }
    # Size the grid with a probe compile; n_groups only changes the integer specialization, so the
    # binary (and its occupancy) is the one the real launch uses.
    probe_stats = torch.empty((1, 2, n_chunks, 2), device=x2d.device, dtype=torch.float32)
    probe_arrivals = torch.zeros(1, device=x2d.device, dtype=torch.int32)
    probe_args = (
        x2d,
        out,
        probe_stats,
        probe_arrivals,
        n_rows,
        n_cols,
        x2d.stride(0),
        out.stride(0),
        n_chunks,
        2,
    )
    resident = resident_programs(_softmax_coop_kernel, probe_args, kwargs)
    n_groups = min(n_rows, resident // n_chunks)
    if n_groups < 1:
        return False
    stats = torch.empty((n_groups, 2, n_chunks, 2), device=x2d.device, dtype=torch.float32)
    arrivals = torch.zeros(n_groups, device=x2d.device, dtype=torch.int32)
    args = (
        x2d,
        out,
        stats,
        arrivals,
        n_rows,
        n_cols,
        x2d.stride(0),
        out.stride(0),
        n_chunks,
        n_groups,
    )
    _softmax_coop_kernel[(n_groups * n_chunks,)](*args, **kwargs)
    return True


def choose_path(n_cols: int, *, single_pass_max_cols: int | None = None) -> str:
    """ "single-pass", "cooperative" or "two-pass": which kernel softmax() will run."""
    limit = SINGLE_PASS_MAX_COLS if single_pass_max_cols is None else single_pass_max_cols
    if n_cols <= limit:
        return "single-pass"
    return "two-pass" if interpreting() else "cooperative"


def softmax(
    x,
    *,
    single_pass_max_cols: int | None = None,
    chunk_cols: int | None = None,
    long_rows: str | None = None,
):
    """Softmax over the last dimension of x (2-D, any row stride); a new tensor, x untouched.

    single_pass_max_cols, chunk_cols and long_rows ("cooperative" | "two-pass") override the
    path choice; tests use them to drive the long-row paths at small sizes.
    """
    if x.dim() != 2:
        raise ValueError(f"softmax expects a 2-D tensor [rows, cols], got shape {tuple(x.shape)}")
    if x.dtype not in (torch.float32, torch.bfloat16, torch.float16):
        raise ValueError(f"softmax supports fp32, bf16 and fp16, not {x.dtype}")
    x2d = x if x.stride(1) == 1 else x.contiguous()
    n_rows, n_cols = x2d.shape
    out = torch.empty((n_rows, n_cols), device=x.device, dtype=x.dtype)
    if n_rows == 0 or n_cols == 0:
        return out
    path = choose_path(n_cols, single_pass_max_cols=single_pass_max_cols)
    if path == "single-pass":
        _launch_rows(x2d, out, triton.next_power_of_2(n_cols))
        return out
    chunk = _chunk_cols(x.dtype, chunk_cols)
    path = long_rows or path
    if path == "cooperative" and not interpreting() and _launch_cooperative(x2d, out, chunk):
        return out
    _launch_two_pass(x2d, out, chunk)
    return out
