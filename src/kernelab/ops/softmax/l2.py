"""Two passes over each row, the second from L2: one HBM read, one HBM write.

"l2-rows": one program per row at a time (a persistent grid); the first pass reads the row from
HBM keeping it in L2 (evict_last) and computes an online (max, sum), the second re-reads it
from L2 and writes with streaming stores. No program ever waits for another; the grid is
capped so the rows in flight fit in L2_FRACTION of the L2.
"l2-split": the same two passes on slices of SLICE columns, a row shared by a group of programs
that exchange tagged partials, pipelined one row deep.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernelab.ops.softmax.exchange import (
    INTERPRETER_MAX_SPINS,
    MAX_SPINS,
    _gather_tagged,
    _publish_tagged,
)
from kernelab.ops.softmax.primitives import LOG2E, _exp2
from kernelab.runtime.tuner import (
    interpreting,
    l2_cache_bytes,
    resident_programs,
    sm_count,
)


@triton.jit
def _stream_stats(
    x_row,
    start,
    stop,
    BLOCK: tl.constexpr,
    PREFETCH: tl.constexpr,
    FTZ: tl.constexpr,
):
    """(max, sum of exp(x - max)) of x_row[start:stop], read BLOCK values at a time.

    The first of the two passes: the only HBM read of these values. evict_last keeps the
    lines in L2 for _stream_normalize; the running (max, sum) is rescaled at each block (one
    block reduction per BLOCK values, two scalar exps), so only one block sits in registers.
    PREFETCH loads the next block (in the input dtype) before reducing this one, so two
    blocks per program are in flight instead of one, for more registers.
    """
    run_max = tl.full((), -float("inf"), tl.float32)
    run_sum = tl.full((), 0.0, tl.float32)
    if PREFETCH:
        cols = start + tl.arange(0, BLOCK)
        # read BLOCK * itemsize from HBM, kept in L2 for the second pass
        upcoming = tl.load(
            x_row + cols, mask=cols < stop, other=-float("inf"), eviction_policy="evict_last"
        )
    for first in tl.range(start, stop, BLOCK):
        if PREFETCH:
            x = upcoming.to(tl.float32)
            cols = first + BLOCK + tl.arange(0, BLOCK)  # past stop: masked, nothing read
            upcoming = tl.load(
                x_row + cols, mask=cols < stop, other=-float("inf"), eviction_policy="evict_last"
            )
        else:
            cols = first + tl.arange(0, BLOCK)
            x = tl.load(
                x_row + cols, mask=cols < stop, other=-float("inf"), eviction_policy="evict_last"
            ).to(tl.float32)
        # (-inf, 0) until a finite value shows up: exp(-inf - 0) = 0, never -inf - -inf
        # in log2 units, like _chunk_exp_stats: the sum is of 2^(x * log2(e) - shift) for the
        # very rounded shift that is carried and published
        new_max = tl.maximum(run_max, tl.max(x, axis=0) * LOG2E)
        shift = tl.where(new_max == -float("inf"), 0.0, new_max)
        block_sum = tl.sum(_exp2(x * LOG2E - shift, FTZ), axis=0)
        run_sum = run_sum * _exp2(run_max - shift, FTZ) + block_sum
        run_max = new_max
    return run_max, run_sum


@triton.jit
def _stream_normalize(
    x_row,
    out_row,
    start,
    stop,
    row_max,
    row_sum,
    met,
    BLOCK: tl.constexpr,
    PREFETCH: tl.constexpr,
    FTZ: tl.constexpr,
):
    """out_row[start:stop] = exp(x - row_max) / row_sum: the second pass, whose reads hit the
    L2 lines _stream_stats kept (NaN everywhere if the wait for the row's partials gave up).
    PREFETCH loads the next block from L2 before exponentiating this one."""
    scale = 1.0 / row_sum
    if PREFETCH:
        cols = start + tl.arange(0, BLOCK)
        # read BLOCK * itemsize, from L2 if the row is still there; its last use
        upcoming = tl.load(x_row + cols, mask=cols < stop, other=0.0, eviction_policy="evict_first")
    for first in tl.range(start, stop, BLOCK):
        cols = first + tl.arange(0, BLOCK)
        mask = cols < stop
        if PREFETCH:
            x = upcoming
            ahead = cols + BLOCK
            upcoming = tl.load(
                x_row + ahead, mask=ahead < stop, other=0.0, eviction_policy="evict_first"
            )
        else:
            x = tl.load(x_row + cols, mask=mask, other=0.0, eviction_policy="evict_first")
        # all -inf row: exp(-inf - -inf) = NaN, the documented output (row_max is in log2
        # units, as _stream_stats returns it)
        y = _exp2(x.to(tl.float32) * LOG2E - row_max, FTZ) * scale
        y = tl.where(met, y, float("nan"))
        # write BLOCK * itemsize, streaming (.cs): never read again by this kernel
        tl.store(out_row + cols, y.to(out_row.dtype.element_ty), mask=mask, cache_modifier=".cs")


@triton.jit(do_not_specialize=["n_groups"])
def _softmax_l2_kernel(
    x_ptr,
    out_ptr,
    words_ptr,
    n_rows,
    n_cols,
    x_row_stride,
    out_row_stride,
    slice_cols,
    n_slices,
    n_groups,
    BLOCK: tl.constexpr,
    BLOCK_SLICES: tl.constexpr,
    SPLIT: tl.constexpr,
    PREFETCH: tl.constexpr,
    FTZ: tl.constexpr,
    MAX_SPINS: tl.constexpr,
):
    """Two passes over each row, the second from L2: one HBM read, one HBM write.

    SPLIT=False ("l2-rows"): a persistent grid, one program per row at a time, the row read
    once from HBM (stats) and once from L2 (normalize); no program ever waits for another.
    SPLIT=True ("l2-split"): programs g*n_slices .. g*n_slices + n_slices-1 form group g and
    share rows g, g + n_groups, ...; program `part` owns columns [part * slice_cols, +
    slice_cols). The exchange is pipelined one row deep: publish this row's partials, then
    normalize the previous row, whose peers published a whole pass ago, so the wait is
    nearly always already over. The loop runs one extra turn (row >= n_rows: nothing read)
    to normalize the last row.
    """
    group = tl.program_id(0) // n_slices
    part = tl.program_id(0) % n_slices
    start = part * slice_cols
    if SPLIT:
        turn = 0
        for row in tl.range(group, n_rows + n_groups, n_groups):
            # pass 1 of this row (an empty column range on the extra turn)
            stop = tl.minimum(start + slice_cols, tl.where(row < n_rows, n_cols, 0))
            x_row = x_ptr + tl.cast(row, tl.int64) * x_row_stride
            part_max, part_sum = _stream_stats(x_row, start, stop, BLOCK, PREFETCH, FTZ)
            turn += 1
            # Partials of turn t live in slot t % 4, 16 bytes per slice per row. Four slots,
            # because a program publishing turn t has seen every peer's turn t - 2, so peers
            # may still read turns t - 3 .. t - 1 but never t - 4, the word it overwrites.
            slots = words_ptr + group * 4 * n_slices * 2
            _publish_tagged(slots + (turn % 4) * n_slices * 2, part, turn, part_max, part_sum)
            # pass 2 of the previous row; turn 0 is the zeroed workspace (tag 0: no wait) and
            # its row (-n_groups .. -1) has an empty column range
            previous = row - n_groups
            row_max, row_sum, met, _ = _gather_tagged(
                slots + ((turn - 1) % 4) * n_slices * 2, n_slices, turn - 1, BLOCK_SLICES, MAX_SPINS,
                True,
            )  # fmt: skip
            stop = tl.minimum(start + slice_cols, tl.where(previous >= 0, n_cols, 0))
            _stream_normalize(
                x_ptr + tl.cast(previous, tl.int64) * x_row_stride,
                out_ptr + tl.cast(previous, tl.int64) * out_row_stride,
                start,
                stop,
                row_max,
                row_sum,
                met,
                BLOCK,
                PREFETCH,
                FTZ,
            )
    else:
        for row in tl.range(group, n_rows, n_groups):
            x_row = x_ptr + tl.cast(row, tl.int64) * x_row_stride
            row_max, row_sum = _stream_stats(x_row, 0, n_cols, BLOCK, PREFETCH, FTZ)
            out_row = out_ptr + tl.cast(row, tl.int64) * out_row_stride
            _stream_normalize(
                x_row, out_row, 0, n_cols, row_max, row_sum, True, BLOCK, PREFETCH, FTZ
            )


# l2-rows holds whole rows in L2 between its passes: only rows up to this many bytes.
L2_ROWS_MAX_BYTES = 256 << 10
# The L2 paths keep each program's row (l2-rows) or its last two slices (l2-split) in L2
# between the two passes; the grid is capped so those live bytes stay under this fraction of
# the L2, the rest taking the streaming loads, the output's write-back and any lines the two
# L2 partitions both hold.
L2_FRACTION = 0.5
L2_LIVE_SLICES = {"l2-rows": 1, "l2-split": 2}


def row_candidates(dtype) -> list[dict]:
    """The one-row-per-program L2 kernel: 32 KiB of input per loop step, 16 values per thread
    at 16 warps, at most 2 programs per SM. (The 16 KiB, 8-warp, 4-per-SM one never won.)"""
    itemsize = torch.empty((), dtype=dtype).element_size()
    return [
        {"path": "l2-rows", "BLOCK": (32 << 10) // itemsize, "num_warps": 16, "PER_SM": 2},
    ]


def split_candidates(dtype) -> list[dict]:
    """The split-row L2 kernel: 32 KiB of input per program's slice, read 16 KiB per loop step
    (16 values per thread at 8 warps), at most 4 programs per SM; live L2: 2 slices x programs
    (64 KiB per program). The 64 KiB slices and the 4-warp steps never won on the H200."""
    itemsize = torch.empty((), dtype=dtype).element_size()
    kib = 1024 // itemsize  # values per KiB
    return [
        {"path": "l2-split", "SLICE": 32 * kib, "BLOCK": 16 * kib, "num_warps": 8, "PER_SM": 4},
    ]


def setup(x2d, out, config: dict) -> tuple[dict, tuple, int]:
    """(launch kwargs, launch arguments but n_groups, slices per row) of the L2 kernel."""
    n_rows, n_cols = x2d.shape
    split = config["path"] == "l2-split"
    slice_cols = config["SLICE"] if split else n_cols
    n_slices = triton.cdiv(n_cols, slice_cols)
    kwargs = {
        "BLOCK": config["BLOCK"],
        "BLOCK_SLICES": max(16, triton.next_power_of_2(n_slices)),
        "SPLIT": split,
        "PREFETCH": config.get("PREFETCH", False),
        "FTZ": not interpreting(),
        "MAX_SPINS": INTERPRETER_MAX_SPINS if interpreting() else MAX_SPINS,
        "num_warps": 1 if interpreting() else config["num_warps"],
        # no software pipelining: no load is ever hoisted above the wait for the partials
        "num_stages": 1,
    }
    # workspace: 2 tagged words x 4 turn slots x slices per group, zeroed (tag 0 is turn 0);
    # l2-rows exchanges nothing, so it gets one unused word (no memset kernel per call)
    if split:
        max_groups = max(1, min(n_rows, sm_count(x2d.device) * 32 // n_slices))
        words = torch.zeros((max_groups, 4, n_slices, 2), device=x2d.device, dtype=torch.int64)
    else:
        words = torch.empty(1, device=x2d.device, dtype=torch.int64)
    args = (x2d, out, words, n_rows, n_cols, x2d.stride(0), out.stride(0), slice_cols, n_slices)
    return kwargs, args, n_slices


def groups(x2d, config: dict, kwargs: dict, args: tuple, n_slices: int) -> tuple[int, dict]:
    """(groups to launch, how they were sized). 0 groups: the slices of one row cannot all be
    resident at once, so the split kernel must not run (its wait could never end).

    Programs: at most what the GPU holds at once (so every split group's peers are resident
    together: the same residency argument as the cooperative kernel), at most PER_SM per SM,
    and at most what keeps the live slices under L2_FRACTION of the L2 (never below one group).
    """
    device = x2d.device
    n_rows = x2d.shape[0]
    resident = resident_programs(_softmax_l2_kernel, (*args, 2), kwargs)
    slice_bytes = args[7] * x2d.element_size()
    live = L2_LIVE_SLICES[config["path"]] * slice_bytes
    by_l2 = max(n_slices, int(L2_FRACTION * l2_cache_bytes(device)) // live)
    programs = min(resident, config["PER_SM"] * sm_count(device), by_l2)
    n_groups = min(n_rows, programs // n_slices) if resident >= n_slices else 0
    plan = {
        "resident": resident,
        "slices_per_row": n_slices,
        "groups": n_groups,
        "programs": n_groups * n_slices,
        "l2_live_bytes": n_groups * n_slices * live,
    }
    return n_groups, plan


def launch(x2d, out, config: dict) -> bool:
    """Run the two-pass L2 kernel; False when a row's slices cannot all be resident."""
    kwargs, args, n_slices = setup(x2d, out, config)
    n_groups, _ = groups(x2d, config, kwargs, args, n_slices)
    if n_groups < 1:
        return False
    _softmax_l2_kernel[(n_groups * n_slices,)](*args, n_groups, **kwargs)
    return True
