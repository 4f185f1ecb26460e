"""Fused softmax over the last dimension of a 2-D tensor, for any row length.

softmax(x)[r, c] = exp(x[r, c] - max_r) / sum_c' exp(x[r, c'] - max_r), computed in fp32
whatever the input dtype (fp32, bf16, fp16); the output has the input's dtype and shape.
The ideal traffic is one read and one write of the tensor (2 * rows * cols * itemsize
bytes); every path below is judged by how close it stays to that at HBM bandwidth.

Rows that fit in registers (cols <= SINGLE_PASS_MAX_COLS) take the row-tile single pass;
longer rows go to one tuner (key: padded row length, dtype) that ranks every configuration of
long_row_candidates, each naming its kernel in "path":

1. "single-pass": one pass over tiles of ROWS x BLOCK_N in registers. Autotuned per (padded
   row length, dtype) over _runtime.row_tile_candidates: first what Inductor generates for a
   persistent reduction (rows of <= 1,024 values packed 1024 / BLOCK_N to a program of one
   warp, whose reductions are warp shuffles with no shared memory; longer rows one per
   program), then 8-32 values per thread and a persistent grid. Read once, write once. For
   long rows up to 32K values, one row per program at 32 warps is a long-row candidate too.
2. "cooperative": a split-row kernel. Each row is cut into chunks of CHUNK columns, one per
   program; the programs of a row each keep their chunk in registers, publish the chunk's
   (max, sum of exp), wait until all their peers have, combine the partials and write. One
   read and one write, with all of a row's chunks in flight on different SMs. PREFETCH
   (1 or 2) issues the loads of the next row's chunk (or the next two) before waiting. DEFER
   takes the wait off the critical path: a program publishes row r's partials, then finishes
   its previous row, whose peers published a step ago (the exps of two rows in registers).
   L2_AHEAD asks the L2 for the chunk of a row further on (prefetch: no registers held).
   For bf16 the row to finish can wait as the words it was read as instead of as exps,
   which are then taken again (RECOMPUTE): half the registers per byte.
   The partials carry their turn number in the same 64-bit word and are exchanged without any fence (an arrival counter
   with release/acquire was slower everywhere on the H200 and raced in bf16: removed).
3. "l2-rows": one program per row at a time (a persistent grid), two passes: the first reads
   the row from HBM keeping it in L2 (evict_last) and computes an online (max, sum), the
   second re-reads it from L2 and writes with streaming stores. One HBM read, one HBM
   write, no program ever waits for another; the grid is capped so the rows in flight fit
   in L2_FRACTION of the L2.
4. "l2-split": the same two passes on slices of SLICE columns, a row shared by a group of
   programs that exchange tagged partials, pipelined one row deep: publish this row's
   partials, then normalize the previous row, whose peers published a pass ago. Two slices
   per program live in L2.
5. "two-pass": the chunk statistics in two launches, stats then normalize; two reads and one
   write. What the CPU interpreter runs by default (it runs programs one after another, so
   peers never meet), and the fallback when a split kernel's programs cannot all be
   resident.
6. "shared-row" (softmax_shared.py, Gluon): one program per row of up to 64 KiB, the row
   brought by TMA into shared memory instead of registers, three passes over it there.
   Offered to both tuners where a Hopper GPU's TMA can address the rows (contiguous, whole
   2,048-value steps, 16-byte aligned); the long-row tuner's default where it fits.
7. "shared-split" (softmax_shared_split.py, Gluon): longer rows in chunks of 32-64 KiB, one
   per program, each in shared memory; partials exchanged through global memory, programs
   ordered by a ticket so that no residency has to be assumed.
8. "held" (softmax_held.py, Gluon): the deferred cooperative kernel with the row it finishes
   held as input values in shared memory, not as exps in registers, so bf16 chunks of
   4,096-8,192 values fit two to four warps; offered on 2-byte rows of 262K values and up.
9. "flat" (softmax_flat.py): the deferred cooperative kernel without row groups: every
   resident program takes every P-th chunk of the whole input, so no program slot is left
   over when the groups do not divide the grid (48 of 1,584 at bf16 262K) and the last
   round is never a partial one. Each chunk's partials get a word of their own.

Every kernel takes LEAN (the default; False runs the session-1 arithmetic, kept so that a
benchmark can measure the difference): exp as one FFMA and one ex2.approx.ftz per value
instead of an FADD, an FMUL by log2(e) and an ex2 with denormal fix-ups; the cooperative
kernel keeps exp(x - chunk max) in registers instead of exponentiating every value twice
(except under RECOMPUTE, where two exps per value cost less than the registers).
The L2 kernels take PREFETCH: load the next block before reducing the current one.

The split kernels (cooperative, l2-split) need every program of a row resident at once: their
grid never exceeds what the occupancy of the compiled kernel allows (the smaller of our
formula and the driver's), and a bounded wait turns a broken assumption into NaN output
rather than a hang.

Numerics: the max is subtracted before exp, so huge inputs (1e4) are safe. A row whose
entries are all -inf has no defined softmax: this module returns NaN for every entry of such
a row (exp(-inf - -inf) = NaN), exactly as torch.softmax does. A row with some -inf entries
gives them probability 0.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernelab.ops.softmax import flat as softmax_flat
from kernelab.ops.softmax import held as softmax_held
from kernelab.ops.softmax import shared as softmax_shared
from kernelab.ops.softmax import shared_split as softmax_shared_split
from kernelab.runtime import turn_words
from kernelab.runtime.launch_plans import LaunchPlans, frozen, keep, launch
from kernelab.runtime.tuner import (
    compiled_occupancy,
    interpreter_row_tile,
    interpreting,
    l2_cache_bytes,
    launch_row_tiles,
    resident_programs,
    row_tile_candidates,
    shared_bytes_per_program,
    sm_count,
    tuned,
)

PLANS = LaunchPlans("triton.softmax")
# the dtypes it takes; a module constant, not a tuple built on every call
SUPPORTED_DTYPES = (torch.float32, torch.bfloat16, torch.float16)

SINGLE_PASS_MAX_COLS = 16384
# The partials of a row are read as one block of this many slots (masked past n_chunks), so
# one binary serves every row length up to MAX_CHUNKS_BLOCK * CHUNK columns.
MAX_CHUNKS_BLOCK = 256
# A poll of the arrival counter is one L2 round trip (~1 us), so ~2^22 polls is seconds:
# long enough for any real wait, short enough that a broken residency assumption ends.
MAX_SPINS = 1 << 22
# The interpreter runs programs one after another, so a peer that has not arrived never
# will: give up at once (the row's chunks before the last come out NaN).
INTERPRETER_MAX_SPINS = 4
INTERPRETER_CHUNK = 32
LOG2E = tl.constexpr(1.4426950408889634)
MINUS_INF_BITS = tl.constexpr(-8388608)  # float32 -inf as a signed int32 (0xFF800000)
TURN_PERIOD = tl.constexpr(turn_words.TURN_PERIOD)  # slot and tag bit repeat every 8 turns


@triton.jit
def _exp2(x, FTZ: tl.constexpr):
    """2^x. FTZ: one MUFU.EX2 (ex2.approx.ftz); without it Triton's ex2.approx.f32 costs an
    FSETP and two predicated FMULs more per value to keep denormal results, which a softmax
    (results <= 1, summed to >= 1) never needs. The interpreter runs the plain exp2."""
    if FTZ:
        return tl.inline_asm_elementwise(
            "ex2.approx.ftz.f32 $0, $1;", "=r,r", [x], dtype=tl.float32, is_pure=True, pack=1
        )
    else:
        return tl.exp2(x)


@triton.jit
def _exp_shifted(x, shift, LEAN: tl.constexpr, FTZ: tl.constexpr):
    """exp(x - shift). LEAN: 2^(x * log2(e) - shift * log2(e)), one FFMA and one MUFU.EX2 per
    value (within one row tile, the rounding of shift * log2(e) is one common factor, which
    the normalization divides out; split rows carry the rounded value instead, see
    _chunk_exp_stats); otherwise tl.exp(x - shift): FADD, FMUL by log2(e), then the ex2."""
    if LEAN:
        return _exp2(x * LOG2E - shift * LOG2E, FTZ)
    else:
        return tl.exp(x - shift)


@triton.jit
def _prefetch_to_l2(x_ptr, row, n_rows, n_cols, x_row_stride, first_col, SPAN: tl.constexpr):
    """Ask the L2 for the 128-byte lines of row's columns [first_col, first_col + SPAN) and go
    on: prefetch.global.L2 has no result, so those bytes are in flight from HBM without a
    register waiting for them; the later load of the same columns finds them in L2.
    evict_last keeps them there until that load (whose evict_first then lets them go).
    Nothing past the last row or column is asked for. GPU only (inline PTX)."""
    VALUES_PER_LINE: tl.constexpr = 1024 // x_ptr.dtype.element_ty.primitive_bitwidth
    lines = first_col + tl.arange(0, SPAN // VALUES_PER_LINE) * VALUES_PER_LINE
    inside = (lines < tl.where(row < n_rows, n_cols, 0)).to(tl.int32)
    tl.inline_asm_elementwise(
        "{ .reg .pred p; setp.ne.b32 p, $2, 0; @p prefetch.global.L2::evict_last [$1]; "
        "mov.b32 $0, 0; }",
        "=r,l,r",
        [x_ptr + tl.cast(row, tl.int64) * x_row_stride + lines, inside],
        dtype=tl.int32,
        is_pure=False,
        pack=1,
    )


@triton.jit
def _softmax_tile(
    x_ptr,
    out_ptr,
    tile,
    n_rows,
    n_cols,
    x_row_stride,
    out_row_stride,
    BLOCK_N: tl.constexpr,
    ROWS: tl.constexpr,
    LEAN: tl.constexpr,
    FTZ: tl.constexpr,
    TREE: tl.constexpr,
):
    cols = tl.arange(0, BLOCK_N)
    rows = (tile * ROWS + tl.arange(0, ROWS)).to(tl.int64)
    mask = (rows < n_rows)[:, None] & (cols < n_cols)[None, :]
    # read ROWS * cols * itemsize, used once: evict_first keeps it from displacing anything;
    # padding is -inf so it adds exp(-inf) = 0 to the sum
    x = tl.load(
        x_ptr + rows[:, None] * x_row_stride + cols[None, :],
        mask=mask,
        other=-float("inf"),
        eviction_policy="evict_first",
    ).to(tl.float32)
    if TREE:
        # one row per tile: its max and sum folded in half three times first
        # (_halving_reduce), not one dependent chain of FMNMX / FADD per thread
        tl.static_assert(ROWS == 1, "TREE reduces whole tiles: one row per tile only")
        row_max = _halving_reduce(tl.reshape(x, [BLOCK_N]), True)
        numerator = _exp_shifted(x, row_max, LEAN, FTZ)
        denominator = _halving_reduce(tl.reshape(numerator, [BLOCK_N]), False)
        y = numerator * (1.0 / denominator)
    else:
        row_max = tl.max(x, axis=1)
        numerator = _exp_shifted(x, row_max[:, None], LEAN, FTZ)
        denominator = tl.sum(numerator, axis=1)
        y = numerator * (1.0 / denominator)[:, None]
    # write ROWS * cols * itemsize; one exp, ~4 FLOPs per element (~6 SASS instructions lean
    # in bf16 with the conversions, ~12 with tl.exp: section 2 of docs/notes/triton.md)
    tl.store(
        out_ptr + rows[:, None] * out_row_stride + cols[None, :],
        y.to(out_ptr.dtype.element_ty),
        mask=mask,
    )


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
    PERSISTENT: tl.constexpr,
    LEAN: tl.constexpr = True,
    FTZ: tl.constexpr = False,
    PIPELINE: tl.constexpr = 1,
    TREE: tl.constexpr = False,
):
    # persistent: programs stride over the tiles; otherwise one tile per program
    if PERSISTENT:
        first, last, step = tl.program_id(0), tl.cdiv(n_rows, ROWS), tl.num_programs(0)
    else:
        first, last, step = tl.program_id(0), tl.program_id(0) + 1, 1
    # PIPELINE > 1: the software pipeliner copies the next PIPELINE - 1 tiles into shared
    # memory (cp.async) while this one is reduced, ROWS x BLOCK_N x itemsize bytes per stage in
    # flight without registers. Only num_stages on the loop itself turns it on (Triton 3.6 and
    # 3.9: the kernel-wide num_stages alone left this loop unpipelined); PIPELINE = 1 compiles
    # to the same SASS as a loop without it.
    for tile in tl.range(first, last, step, num_stages=PIPELINE):
        _softmax_tile(
            x_ptr,
            out_ptr,
            tile,
            n_rows,
            n_cols,
            x_row_stride,
            out_row_stride,
            BLOCK_N,
            ROWS,
            LEAN,
            FTZ,
            TREE,
        )


@triton.jit
def _chunk_stats(x):
    """(max, sum of exp(x - max)) of one fp32 chunk; (-inf, 0) for a chunk of only -inf."""
    chunk_max = tl.max(x, axis=0)
    shift = tl.where(chunk_max == -float("inf"), 0.0, chunk_max)
    return chunk_max, tl.sum(tl.exp(x - shift), axis=0)


@triton.jit
def _chunk_max(x, TREE: tl.constexpr = False):
    """The max of a chunk (TREE: folded in half three times first, _halving_reduce)."""
    if TREE:
        return _halving_reduce(x, True)
    else:
        return tl.max(x, axis=0)


@triton.jit
def _exps_and_sum(x, chunk_max, FTZ: tl.constexpr, TREE: tl.constexpr = False):
    """(e, c, sum of e) of one chunk whose max is chunk_max, with c = max * log2(e) rounded
    once to fp32 and e = 2^(x * log2(e) - c) in fp32 (one FFMA and one ex2 per value).
    The exps stay in registers: once the row's (C, S) are known the output is
    e * (2^(c - C) / S) (_chunk_scale), one FMUL per value. The max travels in log2 units
    because every exp of the chunk was taken against that rounded c: a row combined from
    exact maxima instead (exp(max - M)) is off by the rounding of c (up to half an ulp: 5e-4
    at logits of 1e4, a factor of up to 1 +- 3.4e-4 on every probability of the chunk).
    (0, -inf, 0) for a chunk of only -inf."""
    c = chunk_max * LOG2E
    e = _exps_against(x, c, FTZ)
    if TREE:
        return e, c, _halving_reduce(e, False)
    else:
        return e, c, tl.sum(e, axis=0)


@triton.jit
def _chunk_exp_stats(x, FTZ: tl.constexpr, TREE: tl.constexpr = False):
    """(e, c, sum of e) of one fp32 chunk (_exps_and_sum of its max)."""
    return _exps_and_sum(x, _chunk_max(x, TREE), FTZ, TREE)


@triton.jit
def _exps_against(x, c, FTZ: tl.constexpr):
    """2^(x * log2(e) - c) in fp32 for a chunk x (any dtype) whose max is c / log2(e); all 0
    for a chunk of only -inf (c = -inf). One FFMA and one ex2 per value."""
    return _exp2(x.to(tl.float32) * LOG2E - tl.where(c == -float("inf"), 0.0, c), FTZ)


@triton.jit
def _fold_in_half(x, MAX: tl.constexpr):
    """The elementwise max (MAX) or sum of a 1-D tensor's two halves, paired in any order
    (can_reorder: in registers, each thread combining values it already holds)."""
    n: tl.constexpr = x.shape[0]
    halves = tl.reshape(x, [2, n // 2], can_reorder=True)
    if MAX:
        return tl.max(halves, axis=0)
    return tl.sum(halves, axis=0)


@triton.jit
def _halving_reduce(x, MAX: tl.constexpr):
    """tl.max (MAX) or tl.sum of a 1-D tensor, first folded in half three times, so the values
    a thread holds are not reduced as one dependent chain (64 FMNMX or FADD in a row for 64
    values per thread; 16 after the folds). A sum adds in another order than tl.sum: its
    rounding differs by a few ulp."""
    x = _fold_in_half(_fold_in_half(_fold_in_half(x, MAX), MAX), MAX)
    if MAX:
        return tl.max(x, axis=0)
    return tl.sum(x, axis=0)


@triton.jit
def _chunk_scale(c, row_c, row_sum, FTZ: tl.constexpr):
    """What a chunk's exps (_chunk_exp_stats) are multiplied by: 2^(c - C) / S, with C and S
    combined in base 2 (_combine_stats). 0 for a chunk of only -inf (its exps are 0, and
    2^(0 - C) could overflow to inf when C is very negative); NaN for a row of only -inf,
    whose S is NaN (the documented output)."""
    return tl.where(c == -float("inf"), 0.0, _exp2(c - row_c, FTZ)) / row_sum


@triton.jit
def _combine_stats(maxes, sums, BASE2: tl.constexpr = False):
    """The row's max and sum of exp from its chunks' partials (padding: -inf, 0). BASE2: the
    maxima are in log2 units (max * log2(e), as the lean kernels publish them) and the sums
    are of 2^(x * log2(e) - max)."""
    row_max = tl.max(maxes, axis=0)
    # all -inf row: exp(-inf - -inf) = NaN here, and NaN is the documented output
    if BASE2:
        return row_max, tl.sum(sums * tl.exp2(maxes - row_max), axis=0)
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
def _load_chunk(x_ptr, row, n_rows, n_cols, x_row_stride, cols, EVEN: tl.constexpr = False):
    """One program's chunk of `row` in the input dtype; nothing is read past the last row.
    EVEN (every chunk is whole: n_cols % CHUNK == 0): no mask and no -inf fill, one select
    and a compare fewer per value; a row past the last reads the last row again instead
    (its values are never used: once per program at the end, CHUNK * itemsize)."""
    if EVEN:
        last = tl.minimum(row, n_rows - 1)
        # read CHUNK * itemsize, used once
        return tl.load(
            x_ptr + tl.cast(last, tl.int64) * x_row_stride + cols, eviction_policy="evict_first"
        )
    cols_in_row = tl.where(row < n_rows, n_cols, 0)
    # read CHUNK * itemsize, used once
    return tl.load(
        x_ptr + tl.cast(row, tl.int64) * x_row_stride + cols,
        mask=cols < cols_in_row,
        other=-float("inf"),
        eviction_policy="evict_first",
    )


@triton.jit
def _load_pairs(x_ptr, row, n_rows, x_row_stride, chunk, CHUNK: tl.constexpr):
    """One program's whole chunk of a bf16 `row` as CHUNK / 2 32-bit words, two values each
    (the layout bf16 pairs have in memory), widened later by _unpaired without the PRMT per
    value that Triton's own bf16 conversion spends (the kernel's total registers stayed
    within 2 of the plain loads', compiled for sm_90). A row past the last reads the last one
    again, as _load_chunk's EVEN does. Rows of whole chunks and an even row stride."""
    words = x_ptr.to(tl.pointer_type(tl.uint32))
    last = tl.minimum(row, n_rows - 1)
    cols = chunk * (CHUNK // 2) + tl.arange(0, CHUNK // 2)
    # read CHUNK * 2 bytes, used once
    return tl.load(
        words + tl.cast(last, tl.int64) * (x_row_stride // 2) + cols, eviction_policy="evict_first"
    )


@triton.jit
def _unpaired(words):
    """The fp32 values of words of bf16 pairs (_load_pairs), in memory order. A bf16 is the
    high half of its fp32, so each value is one integer op: the low one shifted up (IMAD.U32
    by 0x10000), the high one masked (LOP3). Triton's own conversion first moves each half
    into a register of its own (a PRMT), then shifts: two ops per value."""
    low = (words << 16).to(tl.float32, bitcast=True)
    high = (words & 0xFFFF0000).to(tl.float32, bitcast=True)
    return tl.reshape(tl.join(low, high), [2 * words.shape[0]])


@triton.jit
def _max_of_pairs(a, b):
    """Elementwise max of two words of bf16 pairs: one HMNMX2 for two values. Like FMNMX, a
    NaN loses to a number (the max of a chunk with a NaN is still its largest number; the
    NaN then reaches the output through its exp)."""
    return tl.inline_asm_elementwise(
        "max.bf16x2 $0, $1, $2;", "=r,r,r", [a, b], dtype=tl.uint32, is_pure=True, pack=1
    )


@triton.jit
def _max_of_words(words, PTX: tl.constexpr):
    """The max of a chunk of bf16 pairs (_load_pairs), exact (a max does not round). PTX: taken
    on the pairs, about half the max instructions (ptxas makes the words' tree of HMNMX2 seven
    3-input VHMNMX per 16 words); the interpreter, which runs no inline PTX, takes it of the
    fp32 values."""
    if PTX:
        top = tl.reduce(words, 0, _max_of_pairs)
        low = (top << 16).to(tl.float32, bitcast=True)
        high = (top & 0xFFFF0000).to(tl.float32, bitcast=True)
        return tl.maximum(low, high)
    else:
        return tl.max(_unpaired(words), axis=0)


@triton.jit
def _load_step(
    x_ptr, row, n_rows, n_cols, x_row_stride, cols, chunk, CHUNK: tl.constexpr,
    EVEN: tl.constexpr, PAIRS: tl.constexpr,
):  # fmt: skip
    """The deferred kernel's chunk of `row` as it travels between steps: bf16 pairs in words
    (PAIRS, _load_pairs) or values in the input dtype (_load_chunk)."""
    if PAIRS:
        return _load_pairs(x_ptr, row, n_rows, x_row_stride, chunk, CHUNK)
    else:
        return _load_chunk(x_ptr, row, n_rows, n_cols, x_row_stride, cols, EVEN)


@triton.jit
def _tagged(turn, value):
    """One 64-bit word: the turn in the high half, the fp32 bits of value in the low half."""
    bits = value.to(tl.int32, bitcast=True).to(tl.int64) & 0xFFFFFFFF
    return (tl.cast(turn, tl.int64) << 32) | bits


@triton.jit
def _untagged(word):
    return (word & 0xFFFFFFFF).to(tl.int32).to(tl.float32, bitcast=True)


@triton.jit
def _late_peers(max_words, sum_words, turn):
    """How many peers have not yet published this turn's partials."""
    stale = ((max_words >> 32) != turn) | ((sum_words >> 32) != turn)
    return tl.sum(stale.to(tl.int32), axis=0)


@triton.jit
def _publish_tagged(buffer, chunk, turn, chunk_max, chunk_sum):
    """Publish this chunk's partials for `turn`: two tagged words, each its own flag.

    Each partial travels with its turn number in one 64-bit word (NCCL's "LL" idea), written
    by a relaxed atomic exchange, so a reader sees the old word or the whole new one. No
    counter, no fence: nothing waits for this program's earlier stores or loads to drain.
    """
    tl.atomic_xchg(buffer + chunk * 2, _tagged(turn, chunk_max), sem="relaxed", scope="gpu")
    tl.atomic_xchg(buffer + chunk * 2 + 1, _tagged(turn, chunk_sum), sem="relaxed", scope="gpu")


@triton.jit
def _gather_tagged(buffer, n_chunks, turn, BLOCK_CHUNKS, MAX_SPINS, BASE2: tl.constexpr):
    """Poll the n_chunks peers' words (volatile loads from L2) until every tag equals `turn`,
    then combine (BASE2: maxima in log2 units): (row max, row sum of exp, whether all arrived
    within the spin budget, how many polls after the first it took: 0 when every peer had
    already published)."""
    max_words, sum_words = _poll(buffer, n_chunks, turn, BLOCK_CHUNKS, False)
    return _settle(
        buffer, max_words, sum_words, n_chunks, turn, BLOCK_CHUNKS, MAX_SPINS, False, BASE2
    )


@triton.jit
def _exchange_tagged(
    buffer,
    chunk,
    n_chunks,
    turn,
    chunk_max,
    chunk_sum,
    BLOCK_CHUNKS,
    MAX_SPINS,
    BASE2: tl.constexpr,
):
    """Publish this chunk's partials, wait until all n_chunks peers have, combine them (the
    tagged protocol: _publish_tagged then _gather_tagged): (row max, row sum of exp, whether
    every peer arrived before the spin budget ran out)."""
    _publish_tagged(buffer, chunk, turn, chunk_max, chunk_sum)
    row_max, row_sum, met, _ = _gather_tagged(
        buffer, n_chunks, turn, BLOCK_CHUNKS, MAX_SPINS, BASE2
    )
    return row_max, row_sum, met


@triton.jit
def _turn_bit(turn):
    """The packed word's whole tag: one bit that flips every four turns (1 for turns 1-4, 0
    for 5-8, ...). In the deferred kernel a slot holds turn t or t - 4 when it is read for t
    (its four-slot argument), and those always differ in this bit; the zeroed workspace reads
    as turns -3..0 (bit 0), which no turn from 1 to 4 matches."""
    return ((turn + 3) // 4) % 2


@triton.jit
def _packed(turn, chunk_max, chunk_sum):
    """One 64-bit word for one chunk's partials: max bits in the high half, sum bits in the
    low half with the sign bit replaced by the turn bit (a sum of exps is never negative, and
    a NaN stays NaN whatever its sign). Half the words of the tagged pair, one atomic."""
    max_bits = chunk_max.to(tl.int32, bitcast=True).to(tl.int64) << 32
    sum_bits = chunk_sum.to(tl.int32, bitcast=True).to(tl.int64) & 0x7FFFFFFF
    return max_bits | (tl.cast(_turn_bit(turn), tl.int64) << 31) | sum_bits


@triton.jit
def _publish(buffer, chunk, turn, chunk_max, chunk_sum, PACKED: tl.constexpr):
    """Publish one chunk's partials for `turn`: one packed word, or the two tagged words."""
    if PACKED:
        tl.atomic_xchg(
            buffer + chunk, _packed(turn, chunk_max, chunk_sum), sem="relaxed", scope="gpu"
        )
    else:
        _publish_tagged(buffer, chunk, turn, chunk_max, chunk_sum)


@triton.jit
def _poll(buffer, n_chunks, turn, BLOCK_CHUNKS, PACKED: tl.constexpr):
    """One volatile read of the n_chunks peers' words for `turn`: (first words, second words);
    packed, both are the one word per chunk. Absent peers read as published (-inf, 0)."""
    peers = tl.arange(0, BLOCK_CHUNKS)
    present = peers < n_chunks
    if PACKED:
        # -inf's fp32 bits (0xFF800000) in the high half, sum 0, this turn's bit
        absent = (tl.cast(MINUS_INF_BITS, tl.int64) << 32) | (
            tl.cast(_turn_bit(turn), tl.int64) << 31
        )
        words = tl.load(buffer + peers, mask=present, other=absent, volatile=True)
        return words, words
    else:
        absent = (tl.cast(turn, tl.int64) << 32) | 0
        max_words = tl.load(buffer + peers * 2, mask=present, other=absent, volatile=True)
        sum_words = tl.load(buffer + peers * 2 + 1, mask=present, other=absent, volatile=True)
        return max_words, sum_words


@triton.jit
def _late(first, second, turn, PACKED: tl.constexpr):
    """How many peers' words in a poll are not yet this turn's."""
    if PACKED:
        stale = ((first >> 31) & 1) != _turn_bit(turn)
        return tl.sum(stale.to(tl.int32), axis=0)
    else:
        return _late_peers(first, second, turn)


@triton.jit
def _settle(
    buffer,
    first,
    second,
    n_chunks,
    turn,
    BLOCK_CHUNKS,
    MAX_SPINS,
    PACKED: tl.constexpr,
    BASE2: tl.constexpr,
):
    """From one poll's words, poll again until every peer's word is this turn's, then combine
    (BASE2: maxima in log2 units): (row max, row sum of exp, whether all arrived within the
    spin budget, the polls beyond the one given)."""
    late = _late(first, second, turn, PACKED)
    spins = 0
    while (late > 0) & (spins < MAX_SPINS):
        first, second = _poll(buffer, n_chunks, turn, BLOCK_CHUNKS, PACKED)
        late = _late(first, second, turn, PACKED)
        spins += 1
    if PACKED:
        maxes = (first >> 32).to(tl.int32).to(tl.float32, bitcast=True)
        sums = (first & 0x7FFFFFFF).to(tl.int32).to(tl.float32, bitcast=True)
    else:
        maxes = _untagged(first)
        sums = _untagged(second)
    present = tl.arange(0, BLOCK_CHUNKS) < n_chunks
    maxes = tl.where(present, maxes, -float("inf"))
    sums = tl.where(present, sums, 0.0)
    row_max, row_sum = _combine_stats(maxes, sums, BASE2)
    return row_max, row_sum, late == 0, spins


@triton.jit(do_not_specialize=["n_groups"])
def _softmax_coop_kernel(
    x_ptr,
    out_ptr,
    stats_ptr,
    n_rows,
    n_cols,
    x_row_stride,
    out_row_stride,
    n_chunks,
    n_groups,
    CHUNK: tl.constexpr,
    BLOCK_CHUNKS: tl.constexpr,
    PREFETCH: tl.constexpr,
    LEAN: tl.constexpr,
    FTZ: tl.constexpr,
    MAX_SPINS: tl.constexpr,
    L2_AHEAD: tl.constexpr = 0,
):
    # Programs g*n_chunks .. g*n_chunks + n_chunks-1 form group g; together they own one row
    # at a time (rows g, g + n_groups, ...), program `chunk` holding columns of its chunk.
    group = tl.program_id(0) // n_chunks
    chunk = tl.program_id(0) % n_chunks
    cols = chunk * CHUNK + tl.arange(0, CHUNK)
    mask = cols < n_cols
    # PREFETCH (0, 1 or 2): how many later rows' chunks are in flight, in the input dtype
    # (half the registers for bf16), while this program waits for its peers below. Two give a
    # slow peer a whole row of slack before this program's loads stop.
    if PREFETCH >= 1:
        upcoming = _load_chunk(x_ptr, group, n_rows, n_cols, x_row_stride, cols)
    if PREFETCH >= 2:
        after_next = _load_chunk(x_ptr, group + n_groups, n_rows, n_cols, x_row_stride, cols)
    iteration = 0
    for row in tl.range(group, n_rows, n_groups):
        if L2_AHEAD > 0:
            # L2_AHEAD rows past the last one in registers: into L2, no registers held
            ahead = row + (PREFETCH + L2_AHEAD) * n_groups
            _prefetch_to_l2(x_ptr, ahead, n_rows, n_cols, x_row_stride, chunk * CHUNK, CHUNK)
        # the only read of the row: CHUNK * itemsize per program, kept in registers
        if PREFETCH >= 2:
            x = upcoming.to(tl.float32)
            upcoming = after_next
            after_next = _load_chunk(x_ptr, row + 2 * n_groups, n_rows, n_cols, x_row_stride, cols)
        elif PREFETCH >= 1:
            x = upcoming.to(tl.float32)
            upcoming = _load_chunk(x_ptr, row + n_groups, n_rows, n_cols, x_row_stride, cols)
        else:
            x = _load_chunk(x_ptr, row, n_rows, n_cols, x_row_stride, cols).to(tl.float32)
        if LEAN:
            e, chunk_max, chunk_sum = _chunk_exp_stats(x, FTZ)
        else:
            chunk_max, chunk_sum = _chunk_stats(x)
        # Partials are double-buffered by iteration parity: a program can only be one row
        # ahead of its slowest peer, because it passed the barrier that peer also arrives at.
        # 16 bytes per chunk per row: nothing next to the row's CHUNK * itemsize.
        buffer = stats_ptr + ((group * 2 + iteration % 2) * n_chunks) * 2
        # (LEAN: maxima in log2 units, see _chunk_exp_stats)
        row_max, row_sum, met = _exchange_tagged(
            buffer, chunk, n_chunks, iteration + 1, chunk_max, chunk_sum, BLOCK_CHUNKS, MAX_SPINS,
            LEAN,
        )  # fmt: skip
        if LEAN:
            # one scalar exp per program, then one FMUL per value (all -inf row: S is NaN)
            y = e * _chunk_scale(chunk_max, row_max, row_sum, FTZ)
        else:
            y = tl.exp(x - row_max) * (1.0 / row_sum)  # a second exp of every value
        y = tl.where(met, y, float("nan"))  # a wait that gave up poisons the row
        # the only write: CHUNK * itemsize per program
        tl.store(
            out_ptr + tl.cast(row, tl.int64) * out_row_stride + cols,
            y.to(out_ptr.dtype.element_ty),
            mask=mask,
        )
        iteration += 1


@triton.jit
def _finish_deferred(
    buffer,
    first,
    second,
    n_chunks,
    turn,
    e,
    chunk_max,
    out_ptr,
    row,
    out_row_stride,
    cols,
    mask,
    BLOCK_CHUNKS,
    MAX_SPINS,
    healthy,
    FTZ: tl.constexpr,
    PACKED: tl.constexpr,
    EVEN: tl.constexpr,
    STREAM_STORE: tl.constexpr = False,
    RECOMPUTE: tl.constexpr = False,
    LOG_SCALE: tl.constexpr = False,
):
    """From a first poll of the partials of `turn` (published by the peers during the
    previous row's step, so normally already there), poll until all are, then write
    e * (exp(chunk max - M) / S), or NaN unless this wait and every earlier one (`healthy`)
    succeeded. RECOMPUTE: e is the chunk's input as words of bf16 pairs, and the output is
    2^(x * log2(e) - C) / S, its exps taken again against the row's C. Returns (the polls
    beyond the first, 0 when no peer was late; whether this wait succeeded)."""
    # the deferred kernel is always lean: its maxima are in log2 units
    row_max, row_sum, met, spins = _settle(
        buffer, first, second, n_chunks, turn, BLOCK_CHUNKS, MAX_SPINS, PACKED, True
    )
    # A wait that gave up poisons this row and every later one: once a peer has failed to
    # publish in time, the slots' turn arithmetic no longer holds (a packed word's one-bit
    # tag would read a never-written slot as turn 5's). The NaN rides on the scalar scale,
    # so poisoning costs no select per value.
    if RECOMPUTE:
        # Against C itself, so the exps cannot be taken before the poll has settled (and
        # held in registers through it). A chunk of only -inf gives 2^-inf = 0; a row of
        # only -inf gives -inf - -inf = NaN, its documented output, as its S does anyway.
        if LOG_SCALE:
            # 1 / S folded into the exponent: 2^(x log2(e) - (C + log2 S)), no FMUL per value.
            # The shift's rounding is up to 2^-25 of |C + log2 S| (5e-4 at logits of 1e4: a
            # factor of 1 +- 3.4e-4, under a bf16 output's own half ulp of 2^-9)
            shift = tl.where(met & healthy, row_max + tl.log2(row_sum), float("nan"))
            y = _exp2(_unpaired(e) * LOG2E - shift, FTZ).to(out_ptr.dtype.element_ty)
        else:
            scale = tl.where(met & healthy, 1.0 / row_sum, float("nan"))
            y = _exp2(_unpaired(e) * LOG2E - row_max, FTZ) * scale
            y = y.to(out_ptr.dtype.element_ty)
    else:
        scale = tl.where(
            met & healthy, _chunk_scale(chunk_max, row_max, row_sum, FTZ), float("nan")
        )
        y = (e.to(tl.float32) * scale).to(out_ptr.dtype.element_ty)
    # the only write: CHUNK * itemsize per program; STREAM_STORE marks it evict_first, so the
    # output's lines leave L2 before the input's prefetched ones (L2_AHEAD)
    target = out_ptr + tl.cast(row, tl.int64) * out_row_stride + cols
    policy: tl.constexpr = "evict_first" if STREAM_STORE else ""
    if EVEN:
        tl.store(target, y, eviction_policy=policy)
    else:
        tl.store(target, y, mask=mask, eviction_policy=policy)
    return spins, met


@triton.jit(do_not_specialize=["n_groups"])
def _softmax_coop_deferred_kernel(
    x_ptr,
    out_ptr,
    stats_ptr,
    n_rows,
    n_cols,
    x_row_stride,
    out_row_stride,
    n_chunks,
    n_groups,
    CHUNK: tl.constexpr,
    BLOCK_CHUNKS: tl.constexpr,
    PREFETCH: tl.constexpr,
    HOLD_INPUT: tl.constexpr,
    LATE_LOAD: tl.constexpr,
    FTZ: tl.constexpr,
    MAX_SPINS: tl.constexpr,
    L2_AHEAD: tl.constexpr = 0,
    PACKED: tl.constexpr = False,
    EARLY_POLL: tl.constexpr = False,
    EVEN: tl.constexpr = False,
    TREE: tl.constexpr = False,
    STREAM_STORE: tl.constexpr = False,
    PAIRS: tl.constexpr = False,
    UNROLL: tl.constexpr = 1,
    PTX: tl.constexpr = True,
    L2_PART: tl.constexpr = 1,
    wait_log_ptr=None,
    WAIT_LOG: tl.constexpr = False,
    bases_ptr=None,
    CONTINUE: tl.constexpr = False,
    RECOMPUTE: tl.constexpr = False,
    LOG_SCALE: tl.constexpr = False,
):
    # The cooperative kernel with its wait taken off the critical path: in the step of row r a
    # program publishes r's partials and then finishes row r - n_groups, whose partials its
    # peers published a whole step ago, instead of waiting for r's. Its exps stay in
    # registers one step longer (e of two rows, plus the next row's chunk in flight).
    # Same groups and chunks as _softmax_coop_kernel; the lean exp always; PREFETCH (1 or 2)
    # later rows' chunks in flight, in the input dtype. HOLD_INPUT keeps the held exps (values
    # in [0, 1]) in the input dtype: for bf16 half the registers, at the price of a second
    # rounding (the output is rounded to that dtype anyway: at most 1 ulp more).
    # PACKED: each chunk's partials in one 64-bit word with a one-bit tag (_packed), not two.
    # EARLY_POLL: the first poll for the row to finish is issued before this row's exps are
    # taken, so its L2 round trip overlaps that arithmetic instead of following it.
    # EVEN: every chunk is whole, so no masks (set by the launcher). TREE: the chunk's max and
    # sum fold it in half three times first (_halving_reduce), not one chain of FMNMX / FADD.
    # Two other steps were measured slower on the H200 and removed (session 7; their code is
    # in commit d9b8d9b): holding the input and making the exps twice (session 7's RECOMPUTE,
    # v17: the input held as bf16 values, and ptxas gave it no fewer registers; session 15's,
    # below, holds the loaded words and won) and writing the previous row before this row's exps
    # (FINISH_FIRST, v19: 407 instructions instead of 459 per bf16 c1024 step, yet up to 29 %
    # slower, because this row's partials went out later). This step's order is the point:
    # publish as early as possible, finish the deferred row last.
    # Two more were measured and removed in session 8 (code in commit cf4c7eb): holding no
    # exps and reading the chunk to finish again from L2 (REREAD, v21: bf16 c2048 207 -> 127
    # registers, the best variant 1-22 % below the winner at each shape) and a workspace
    # that the group's last program zeroes at the end instead of a memset per call
    # (SELF_CLEAN, softmax_workspace_v1: 97.4-100.8 % of the memset's speed in alternating
    # pairs, too wide to see the memset's cost; session 13 measured it in pairs against one
    # more fill: 1.75-2.25 us a call, softmax_memset_cost_v1, and turn_words removes it).
    # PAIRS (bf16, whole chunks): the chunk travels as 32-bit words of pairs (_load_pairs),
    # widened by shifts and its max taken on the pairs (_max_of_words; PTX: inline PTX
    # allowed, off under the interpreter). UNROLL=2: two steps per loop iteration, so the held
    # exps change registers without a move each. Together 494 -> 404 SASS per bf16 c1024 step
    # (session 10, v23-v26: +0.1 to +0.8 % at 65K-131K). Three more were measured there and
    # removed: exps held as bf16 pairs (c75b106: 20 programs per SM, no faster), one 32-bit
    # word per chunk's partials (NARROW, e762724) and a per-SM program cap (PER_SM, 61b6043).
    # L2_PART > 1 (session 11): the L2 prefetch asks for only the chunk's first 1 / L2_PART.
    # ncu on the H200 put the L2's busiest part at its fabric (between its two partitions: 93 %
    # busy here, 91.5 % for a plain copy), and the prefetch makes every line it asks for cross
    # it twice for about half the SMs (fetched by the prefetch, read by the load: 12.8 M fabric
    # sectors against 8.7 M without it, bf16 131K). Half the prefetch trades fabric for
    # latency: bf16 65K +0.9 %, fp32 131K +0.6 %; bf16 131K-262K and fp32 262K lost 2.6-6 %.
    # Two more were measured there and removed: re-polling only the stale words (REPOLL_STALE,
    # code in 4754890: 13 % fewer bytes from L2, the same time) and the chunk loads pipelined
    # through shared memory by Triton's software pipeliner (STAGES: a plain copy's fabric
    # sectors, yet 1-18 % slower; the pipeliner moves the early poll, so the measured version
    # carried it from the end of the previous step: docs/notes/triton.md, fourteenth design).
    # WAIT_LOG: each program writes (rows finished, finishes that had to poll again, polls
    # beyond the first) to wait_log_ptr[pid * 3 ...]: how often a peer was late (a diagnostic
    # for cooperative_wait_log; off, nothing is counted or written).
    # CONTINUE: the words were kept from the last call on them (turn_words); this group's
    # turns go on from bases_ptr[group], advanced at the end. Off, they start at 0.
    # RECOMPUTE (with PAIRS, session 15): the row to finish is held as the words of bf16 pairs
    # it was read as (CHUNK / 2 registers, not CHUNK of fp32 exps) and its exps are taken
    # again at the finish against the row's max (_finish_deferred), so the exps cannot be
    # hoisted above the poll and held through it. bf16 c2048 at one warp then fits 160
    # registers (184-209 holding exps), 12 programs per SM, 4 KiB of the row each: the
    # fp32 c1024 winner's shape at two exps per value. In alternating pairs against the
    # tuned library (softmax_paired_configs_v1): bf16 262K +3.6 %, 65K +1.0 % with L2_PART=2,
    # 131K a tie. LOG_SCALE folds 1 / S into the exponent (no FMUL per value): 0.3-0.8 %
    # slower (v3), an experiment's knob only. Half the exps by a cubic on the FMA pipe instead
    # of the MUFU (POLY, session 17, code in 55a8000; ncu at bf16 262K: XU pipe 52.7 % busy)
    # was slower too: 99.3-100.0 % with the finish's half (XU 40.1 %, ALU 30.9 -> 45.3 %),
    # 97.7-98.8 % with the sums' half as well (softmax_paired_configs_v5_poly). Removed.
    group = tl.program_id(0) // n_chunks
    turn0 = 0
    if CONTINUE:
        turn0 = tl.load(bases_ptr + group).to(tl.int32)
    chunk = tl.program_id(0) % n_chunks
    cols = chunk * CHUNK + tl.arange(0, CHUNK)
    mask = cols < n_cols
    # words per chunk per turn slot: 1 packed, else 2 (max, sum)
    WORDS: tl.constexpr = 1 if PACKED else 2
    upcoming = _load_step(
        x_ptr, group, n_rows, n_cols, x_row_stride, cols, chunk, CHUNK, EVEN, PAIRS
    )
    if PREFETCH >= 2:
        after_next = _load_step(
            x_ptr, group + n_groups, n_rows, n_cols, x_row_stride, cols, chunk, CHUNK, EVEN, PAIRS
        )
    if RECOMPUTE:
        held_e = tl.zeros([CHUNK // 2], dtype=tl.uint32)
    elif HOLD_INPUT:
        held_e = tl.zeros([CHUNK], dtype=x_ptr.dtype.element_ty)
    else:
        held_e = tl.zeros([CHUNK], dtype=tl.float32)
    held_max = tl.max(held_e.to(tl.float32), axis=0)
    iteration = 0
    healthy = True  # every wait so far ended with all peers' partials
    late_finishes = 0
    extra_polls = 0
    for row in tl.range(group, n_rows, n_groups, loop_unroll_factor=UNROLL):
        if L2_AHEAD > 0:
            # L2_AHEAD rows past the last one in registers: into L2, no registers held
            # L2_PART > 1: only the chunk's first 1 / L2_PART (see the comment above the loop)
            ahead = row + (PREFETCH + L2_AHEAD) * n_groups
            _prefetch_to_l2(
                x_ptr, ahead, n_rows, n_cols, x_row_stride, chunk * CHUNK, CHUNK // L2_PART
            )
        # Four turn slots: a program that publishes turn t has gathered t - 2, so every peer
        # has published t - 2 and is at worst still gathering t - 3: turns t - 3 .. t can all
        # be read at once, and four slots keep them apart. 16 bytes per chunk per row (8
        # packed). The previous row's turn is `turn` (turn0 + iteration), in slot
        # (turn - 1) % 4; this row's is turn + 1.
        turn = turn0 + iteration
        previous = stats_ptr + ((group * 4 + (turn + 3) % 4) * n_chunks) * WORDS
        if EARLY_POLL:
            # (at iteration 0 this reads a slot nobody finishes from: the words go unused)
            first, second = _poll(previous, n_chunks, turn, BLOCK_CHUNKS, PACKED)
        # the only read of the row: CHUNK * itemsize per program, kept in registers
        if PAIRS:
            pairs = upcoming
        else:
            x = upcoming.to(tl.float32)
        if PREFETCH >= 2:
            upcoming = after_next
            after_next = _load_step(
                x_ptr, row + 2 * n_groups, n_rows, n_cols, x_row_stride, cols, chunk, CHUNK,
                EVEN, PAIRS,
            )  # fmt: skip
        elif not LATE_LOAD:
            upcoming = _load_step(
                x_ptr, row + n_groups, n_rows, n_cols, x_row_stride, cols, chunk, CHUNK, EVEN,
                PAIRS,
            )  # fmt: skip
        if PAIRS:
            x = _unpaired(pairs)
            top = _max_of_words(pairs, PTX)
        else:
            top = _chunk_max(x, TREE)
        # chunk_max: c, the max in log2 units (_exps_and_sum)
        e, chunk_max, chunk_sum = _exps_and_sum(x, top, FTZ, TREE)
        if LATE_LOAD and PREFETCH < 2:
            # issued once x is spent (exps taken): a chunk of registers fewer at the peak
            upcoming = _load_step(
                x_ptr, row + n_groups, n_rows, n_cols, x_row_stride, cols, chunk, CHUNK, EVEN,
                PAIRS,
            )  # fmt: skip
        _publish(
            stats_ptr + ((group * 4 + turn % 4) * n_chunks) * WORDS,
            chunk, turn + 1, chunk_max, chunk_sum, PACKED,
        )  # fmt: skip
        if iteration > 0:
            if not EARLY_POLL:
                first, second = _poll(previous, n_chunks, turn, BLOCK_CHUNKS, PACKED)
            spins, met = _finish_deferred(
                previous, first, second, n_chunks, turn, held_e, held_max, out_ptr,
                row - n_groups, out_row_stride, cols, mask, BLOCK_CHUNKS, MAX_SPINS, healthy,
                FTZ, PACKED, EVEN, STREAM_STORE, RECOMPUTE, LOG_SCALE,
            )  # fmt: skip
            healthy = healthy & met
            if WAIT_LOG:
                late_finishes += tl.where(spins > 0, 1, 0)
                extra_polls += spins
        if RECOMPUTE:
            held_e = pairs
        elif HOLD_INPUT:
            held_e = e.to(x_ptr.dtype.element_ty)
        else:
            held_e = e
        held_max = chunk_max
        iteration += 1
    # the group's last row (every group has at least one: n_groups <= n_rows)
    last_row = group + (iteration - 1) * n_groups
    last_turn = turn0 + iteration
    last = stats_ptr + ((group * 4 + (last_turn - 1) % 4) * n_chunks) * WORDS
    first, second = _poll(last, n_chunks, last_turn, BLOCK_CHUNKS, PACKED)
    spins, _ = _finish_deferred(
        last, first, second, n_chunks, last_turn, held_e, held_max, out_ptr, last_row,
        out_row_stride, cols, mask, BLOCK_CHUNKS, MAX_SPINS, healthy, FTZ, PACKED, EVEN,
        STREAM_STORE, RECOMPUTE, LOG_SCALE,
    )  # fmt: skip
    if CONTINUE:
        if chunk == 0:
            # after the last finish, which needed every peer's words of this call, so every
            # peer has read the old base (turn_words has the argument)
            tl.store(bases_ptr + group, (last_turn % TURN_PERIOD).to(tl.int64))
    if WAIT_LOG:
        log = wait_log_ptr + tl.program_id(0) * 3
        tl.store(log, iteration)
        tl.store(log + 1, late_finishes + tl.where(spins > 0, 1, 0))
        tl.store(log + 2, extra_polls + spins)


@triton.jit
def _stream_stats(
    x_row,
    start,
    stop,
    BLOCK: tl.constexpr,
    PREFETCH: tl.constexpr,
    LEAN: tl.constexpr,
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
        if LEAN:
            # in log2 units, like _chunk_exp_stats: the sum is of 2^(x * log2(e) - shift) for
            # the very rounded shift that is carried and published
            new_max = tl.maximum(run_max, tl.max(x, axis=0) * LOG2E)
            shift = tl.where(new_max == -float("inf"), 0.0, new_max)
            block_sum = tl.sum(_exp2(x * LOG2E - shift, FTZ), axis=0)
            run_sum = run_sum * _exp2(run_max - shift, FTZ) + block_sum
        else:
            new_max = tl.maximum(run_max, tl.max(x, axis=0))
            shift = tl.where(new_max == -float("inf"), 0.0, new_max)
            block_sum = tl.sum(tl.exp(x - shift), axis=0)
            run_sum = run_sum * tl.exp(run_max - shift) + block_sum
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
    LEAN: tl.constexpr,
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
        # all -inf row: exp(-inf - -inf) = NaN, the documented output (LEAN: row_max is in
        # log2 units, as _stream_stats returns it)
        if LEAN:
            y = _exp2(x.to(tl.float32) * LOG2E - row_max, FTZ) * scale
        else:
            y = tl.exp(x.to(tl.float32) - row_max) * scale
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
    LEAN: tl.constexpr,
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
            part_max, part_sum = _stream_stats(x_row, start, stop, BLOCK, PREFETCH, LEAN, FTZ)
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
                LEAN,
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
                LEAN,
                FTZ,
            )
    else:
        for row in tl.range(group, n_rows, n_groups):
            x_row = x_ptr + tl.cast(row, tl.int64) * x_row_stride
            row_max, row_sum = _stream_stats(x_row, 0, n_cols, BLOCK, PREFETCH, LEAN, FTZ)
            out_row = out_ptr + tl.cast(row, tl.int64) * out_row_stride
            _stream_normalize(
                x_row, out_row, 0, n_cols, row_max, row_sum, True, BLOCK, PREFETCH, LEAN, FTZ
            )


# The bf16 deferred kernel's pairs-in-words loads and its loop unrolled by two (see
# _load_pairs and the UNROLL constexpr): offered as one candidate (cooperative_candidates).
PAIRED_STEPS = {"PAIRS": True, "UNROLL": 2}
# The row a bf16 deferred program finishes, held as its input pairs in words and its exps
# taken again at the finish (RECOMPUTE): offered as one candidate (cooperative_candidates).
HELD_INPUT_PAIRS = {"PAIRS": True, "RECOMPUTE": True}
# A config that reads pairs needs this many chunks per row or fewer (cooperative_candidates).
PAIRED_STEPS_MAX_CHUNKS = 128
# A config that prefetches only part of each chunk into L2 (L2_PART) is offered up to this
# many chunks per row, by itemsize: it won at 64 in bf16 (65K) and 128 in fp32 (131K); it
# lost at 128 and 256 in bf16 and in fp32's two-warp 2048-value chunks at 262K (session 11,
# softmax_long_rows_v30-v31).
HALF_PREFETCH_MAX_CHUNKS = {2: 64, 4: 128}


def cooperative_candidates(dtype) -> list[dict]:
    """Configurations of the cooperative kernel to try: 4096 values per program at 4 warps
    and 8192 at 8 (32 values per thread), each prefetching the next row's chunk, with the
    tagged exchange and the lean exp (LEAN, see _exp_shifted); then the deferred kernel's.

    Pruned after the H200 run of 2026-11-29 (softmax_long_rows_v1): these two won or came
    within 1 % of the winner at 65K-131K columns; 2048-value chunks, the no-prefetch chunk,
    the bf16 chunks held at fp32's bytes (8192 at 4 warps, 16384 at 8) never won, and the
    counter exchange was the slowest everywhere (1.5-2.5 TB/s) and raced in bf16 (removed).
    """
    waiting = [
        {"CHUNK": 4096, "num_warps": 4, "PREFETCH": True, "LEAN": True},
        {"CHUNK": 8192, "num_warps": 8, "PREFETCH": True, "LEAN": True},
    ]
    # DEFER (session 3, softmax_long_rows_v4-v7): one warp per program (no block barriers)
    # won at every long row, 4 warps (4096 values) only where one warp had to poll 256 chunks.
    # L2_AHEAD (session 5, v9-v11): one-warp programs also ask the L2 for the row after the one
    # in registers (prefetch, no registers held): +0.05-0.1 TB/s at 65K-131K fp32 and 32K-65K
    # bf16, a loss elsewhere, so it is a candidate of its own.
    # PACKED + EARLY_POLL (session 6, softmax_long_rows_v12-v14): one word per chunk's
    # partials and the poll issued before the exps. One-warp configs gained most where the
    # groups are long (fp32 65K: +0.02 TB/s; bf16 65K in 1024-value chunks: 3.79 -> 3.92):
    # 262K fp32 in 1024-value chunks (256 per row) from 2.5 to 4.01-4.06 TB/s, where the 4-warp c4096 of sessions 3-5 had held
    # 3.4-3.8; bf16 131K-262K in 2048-value chunks from 2.93-3.46 to 3.59-3.66. The plain
    # one-warp and the 4-warp deferred configs never beat them: gone from the tuner.
    fast_exchange = {"DEFER": True, "PACKED": True, "EARLY_POLL": True}
    deferred = [
        {"CHUNK": 1024, "num_warps": 1, **fast_exchange},
        {"CHUNK": 1024, "num_warps": 1, "L2_AHEAD": 1, **fast_exchange},
    ]
    # EVEN (session 6, v15): rows of whole chunks run without masks, which cut the bf16
    # c2048 kernel from 1,520 to 1,368 SASS instructions and 241 to 209 registers, and the
    # c1024 ones by 4-23 registers (Triton 3.6 for sm_90, compiled here): bf16 131K in 1024-value chunks went from 3.43-3.50 to
    # 3.97 TB/s (16 programs per SM instead of 12).
    if torch.empty((), dtype=dtype).element_size() == 4:
        # 2048 values at two warps with the L2 prefetch (session 9, softmax_long_rows_v22):
        # half the chunks per row of c1024, so half the words each program polls per row
        # (128 x 8 bytes at 262K columns, against 4 KiB of its own values). fp32 262K: 4.140
        # TB/s against 4.006 for c1024 l2a1 in the same run; 131K 4.042 (4.079), 65K 3.957
        # (4.031). 160 registers, no spill, 6 programs per SM. In bf16 it lost everywhere
        # (3.45-3.60 against 3.78-3.96): there the poll was not what held c1024 back.
        deferred.append({"CHUNK": 2048, "num_warps": 2, "L2_AHEAD": 1, **fast_exchange})
        # c1024 l2a1 with half of each chunk prefetched into L2 (L2_PART, session 11: fewer
        # lines cross the L2 fabric twice; fp32 131K 4.105 twice against 4.082 / 4.073 in the
        # same runs); up to HALF_PREFETCH_MAX_CHUNKS chunks per row
        deferred.append(
            {"CHUNK": 1024, "num_warps": 1, "L2_AHEAD": 1, **fast_exchange, "L2_PART": 2}
        )
    if torch.empty((), dtype=dtype).element_size() == 2:
        # 2048 values at one warp: the bf16 winner at 262K columns; in fp32 it needs 255
        # registers and spills (24-40 bytes on the H200, softmax_long_rows_v6/v7 plans). It
        # also runs with its masks (MASKED), which measured faster at 131K-262K (3.75 vs
        # 3.52 TB/s, v15, one run). Both fit 8 programs per SM; the SASS suggests why: without
        # masks ptxas issues the next row's loads halfway through the exps, not first.
        deferred.append({"CHUNK": 2048, "num_warps": 1, **fast_exchange})
        deferred.append({"CHUNK": 2048, "num_warps": 1, **fast_exchange, "MASKED": True})
        # 1024 values with the L2 prefetch capped at 128 registers (session 7, v18-v19): at
        # 256 chunks per row ptxas gives it 141 (12 programs per SM); capped, 127 with no
        # spill on the H200 and 16 per SM: 3.76-3.79 TB/s at 262K against 3.58-3.59 uncapped
        # and 3.73-3.74 for the masked c2048, in the same runs. Offered past 128 chunks only
        # (_offered): below, the uncapped kernel already fits in 128.
        deferred.append(
            {"CHUNK": 1024, "num_warps": 1, "L2_AHEAD": 1, **fast_exchange, "maxnreg": 128}
        )
        # 1024 values read as bf16 pairs in words, two steps per loop iteration (session 10,
        # softmax_long_rows_v23-v26): 14-18 % fewer instructions per step (494 -> 404 SASS
        # per bf16 step at 64 chunks, Triton 3.6 for sm_90), the same registers. Faster than
        # the same config without them in every paired run, by little: 65K +0.1 to +0.4 %,
        # 131K +0.4 to +0.8 % (four runs each). Rows of whole chunks only, up to 128 chunks
        # (_offered): at 256 ptxas needs 143 registers (12 programs per SM; 3.53 TB/s against
        # 3.78 for the capped c1024, v23). bf16 only: an fp16 is not the top half of its fp32.
        if dtype == torch.bfloat16:
            deferred.append(
                {"CHUNK": 1024, "num_warps": 1, "L2_AHEAD": 1, **fast_exchange, **PAIRED_STEPS}
            )
            # the same with half of each chunk prefetched into L2 (L2_PART, as fp32's above)
            deferred.append(
                {"CHUNK": 1024, "num_warps": 1, "L2_AHEAD": 1, **fast_exchange, **PAIRED_STEPS,
                 "L2_PART": 2}
            )  # fmt: skip
            # 2048 values holding the row to finish as its input pairs, its exps taken again
            # at the finish (HELD_INPUT_PAIRS, session 15): 160 registers, 12 programs per SM
            # (the c2048 above holds fp32 exps in 184-209), 4 KiB of the row a program as the
            # fp32 c1024 has, half the peers per byte of the bf16 c1024. Rows of whole chunks,
            # up to 128 a row; with and without half of each chunk prefetched (up to 64).
            # In alternating pairs against the tuned library (softmax_paired_configs_v1):
            # 262K 103.6 %, 131K 99.8 % (99.9 % with the half prefetch), 65K 100.2 % (101.0 %).
            # Its output stored evict_first (STREAM_STORE): 262K 100.48 % of the tuned library
            # (then the plain one) in pairs (softmax_paired_configs_v3; one run).
            held = {"CHUNK": 2048, "num_warps": 1, "L2_AHEAD": 1, **fast_exchange}
            deferred.append({**held, **HELD_INPUT_PAIRS})
            deferred.append({**held, **HELD_INPUT_PAIRS, "L2_PART": 2})
            deferred.append({**held, **HELD_INPUT_PAIRS, "STREAM_STORE": True})
    return waiting + deferred


# Rows of up to this many (padded) values can also run the single-pass row tile, one row per
# program at 32 warps x 32 values per thread (the anchor's one-row kernel: 4.14 TB/s fp32 at
# 32,768 columns, 3.11 bf16).
SINGLE_PASS_LONG_MAX_COLS = 32768
# l2-rows holds whole rows in L2 between its passes: only rows up to this many bytes.
L2_ROWS_MAX_BYTES = 256 << 10
# The L2 paths keep each program's row (l2-rows) or its last two slices (l2-split) in L2
# between the two passes; the grid is capped so those live bytes stay under this fraction of
# the L2, the rest taking the streaming loads, the output's write-back and any lines the two
# L2 partitions both hold.
L2_FRACTION = 0.5
L2_LIVE_SLICES = {"l2-rows": 1, "l2-split": 2}


def l2_row_candidates(dtype) -> list[dict]:
    """The one-row-per-program L2 kernel: 32 KiB of input per loop step, 16 values per thread
    at 16 warps, at most 2 programs per SM. (The 16 KiB, 8-warp, 4-per-SM one never won.)"""
    itemsize = torch.empty((), dtype=dtype).element_size()
    return [
        {"path": "l2-rows", "BLOCK": (32 << 10) // itemsize, "num_warps": 16, "PER_SM": 2},
    ]


def l2_split_candidates(dtype) -> list[dict]:
    """The split-row L2 kernel: 32 KiB of input per program's slice, read 16 KiB per loop step
    (16 values per thread at 8 warps), at most 4 programs per SM; live L2: 2 slices x programs
    (64 KiB per program). The 64 KiB slices and the 4-warp steps never won on the H200."""
    itemsize = torch.empty((), dtype=dtype).element_size()
    kib = 1024 // itemsize  # values per KiB
    return [
        {"path": "l2-split", "SLICE": 32 * kib, "BLOCK": 16 * kib, "num_warps": 8, "PER_SM": 4},
    ]


def single_pass_long_candidate() -> dict:
    """One row per program in registers, 32 warps: for rows up to SINGLE_PASS_LONG_MAX_COLS."""
    return {"path": "single-pass", "ROWS": 1, "num_warps": 32, "num_stages": 1, "PERSISTENT": False}


# Which long-row candidate was fastest per (itemsize, padded columns) on the H200 (cold,
# >= 1 GiB): (path, cooperative CHUNK or None, deferred?, L2_AHEAD). It goes first, so the
# untuned default is the measured winner; longer rows take the 262K winner.
MEASURED_WINNERS = {
    # TB/s beside: session 6 (2026-11-29, 23:25-00:00 UTC; benchmarks/results/h200/
    # experiments/softmax_long_rows_v12..v15.json and softmax_wait_log_v1.json; v14 after the
    # log2-unit fix, v15 after the unmasked whole chunks and the NaN folded into the scale).
    # Ranges span the runs that timed the config; "in v15": timed once, after the change
    # that made it the winner. "pk early": PACKED and EARLY_POLL.
    (4, 32768): ("single-pass", None, False, 0, False),  # 3.997-4.001 (c1024 pk early 3.89)
    # fp32 65K-131K until session 18: c1024 l2a1 pk early, 3.972-3.998 and 4.058-4.076 in
    # session 6. Then the flat kernel's c2048 at two warps (softmax_flat: every resident
    # program, no row groups), in alternating pairs against the tuned library: 102.9 % and
    # 101.1 % (softmax_paired_configs_v7_flat, one run).
    (4, 65536): ("flat", 2048, False, 1, False),
    (4, 131072): ("flat", 2048, False, 1, False),
    # 4.140 in v22 (session 9; c1024 l2a1 4.006 and c4096 w4 l2a1 4.114 in the same run;
    # c1024 l2a1 had 3.980-4.059 in v12-v15, and the split shared-memory kernel won the
    # session-8 sweep here at 3.98)
    (4, 262144): ("cooperative", 2048, True, 1, True),
    (2, 32768): ("cooperative", 1024, True, 1, True),  # 3.794-3.848 (c2048 l2a2 3.777-3.779)
    # bf16 65K-131K: the same c1024 l2a1 reading bf16 pairs in words, two steps per loop
    # iteration (PAIRED_STEPS; session 10, v23-v26: 65K 3.932-3.982 against 3.926-3.966 for
    # the plain c1024 l2a1 in the same runs, 131K 3.965-4.008 against 3.936-3.978). Before
    # them: the plain one, 65K 3.916-3.925 (c2048 l2a2 3.786-3.801), 131K 3.969 in v15.
    # bf16 65K, session 11 (softmax_long_rows_v30-v31): half of each chunk prefetched into
    # L2, 3.980-3.981 in four runs against 3.943-3.947 for the whole prefetch.
    # bf16 65K and 262K, session 15 (softmax_paired_configs_v1, alternating pairs against
    # the tuned library of session 14): c2048 holding the row to finish as its input pairs
    # (HELD_INPUT_PAIRS), 65K with half of each chunk prefetched 101.0 % (4.015 TB/s), 262K
    # with the whole prefetch 103.6 % (4.024 TB/s, where the held Gluon kernel had led); at
    # 262K its output stored evict_first then 100.5 % of it (v3). At 131K it tied
    # (99.8-99.9 %): the tuner chooses there.
    # Session 18: the same c2048 holding its input pairs with the output evict_first, in the
    # flat kernel (softmax_flat), against the tuned library in alternating pairs: 65K
    # 101.5 %, 131K 100.7 %, 262K 100.8 % (softmax_paired_configs_v7_flat, one run).
    (2, 65536): ("flat", 2048, False, 1, False, "pairs", "rc", "st"),
    (2, 131072): ("flat", 2048, False, 1, False, "pairs", "rc", "st"),
    (2, 262144): ("flat", 2048, False, 1, False, "pairs", "rc", "st"),
}
# Where the winner reads bf16 pairs (rows of whole chunks only), what goes first on rows of
# partial chunks that pad to the same length: the plain c1024 l2a1, and at 262K the same
# under a 128-register cap (session 7, v18-v19: 3.760-3.791 against 3.578-3.587 uncapped and
# 3.733-3.743 for the masked c2048; the 262K winner until session 12).
PARTIAL_CHUNK_WINNERS = {
    (2, 65536): ("cooperative", 1024, True, 1, True),
    (2, 131072): ("cooperative", 1024, True, 1, True),
    (2, 262144): ("cooperative", 1024, True, 1, True, "r128"),
}


# Deferred cooperative programs poll every peer's partials at each row: one-warp ones with
# the packed early poll held 4.0 TB/s at 256 chunks per row (262K fp32 columns in 1024-value
# chunks; the two-word exchange of session 5 had collapsed there to 2.5: 208 registers for
# the polled words, 9 programs per SM). Past 256 the polled words keep growing, untimed, so
# no deferred config (one warp or two) is offered there.
DEFERRED_MAX_CHUNKS = 256
# Spilled bytes a cooperative candidate may carry (ptxas on the H200, checked by a GPU test).
# The early poll holds up to 8 polled words per lane through the exps, and at 256 chunks
# ptxas spills a few bytes: 4 for the 262K fp32 winner (c1024 l2a1: 4.006 TB/s, where the
# same kernel without the L2 prefetch spills none and ran 3.939), 2 for bf16 c1024 at 262K
# and c2048 at 32K (softmax_long_rows_v14 plans). Tens of bytes (a register cap) lost.
MOST_SPILLED_BYTES = 8


def _measured_winner(itemsize: int, block_n: int, winners: dict = MEASURED_WINNERS):
    if (itemsize, block_n) in winners:
        return winners[(itemsize, block_n)]
    if block_n > max(cols for size, cols in MEASURED_WINNERS if size == itemsize):
        return winners.get((itemsize, 262144))
    return None


def _identity(config: dict) -> tuple:
    """What MEASURED_WINNERS names a long-row candidate by: path, CHUNK, DEFER, L2_AHEAD,
    whether it runs the packed early-poll exchange (PACKED and EARLY_POLL), then "masked" for
    a config that keeps its masks on whole chunks (MASKED), "r<N>" for a register cap,
    "pairs", "rc", "st" and "u<N>" (PAIRS, RECOMPUTE, STREAM_STORE, UNROLL) and "l2/<N>" for
    a partial L2 prefetch (L2_PART)."""
    identity = (
        config["path"],
        config.get("CHUNK"),
        config.get("DEFER", False),
        config.get("L2_AHEAD", 0),
        bool(config.get("PACKED") and config.get("EARLY_POLL")),
    )
    if config.get("MASKED"):
        identity += ("masked",)
    if config.get("maxnreg"):
        identity += (f"r{config['maxnreg']}",)
    if config.get("PAIRS"):
        identity += ("pairs",)
    if config.get("RECOMPUTE"):
        identity += ("rc",)
    if config.get("STREAM_STORE"):
        identity += ("st",)
    if config.get("UNROLL", 1) > 1:
        identity += (f"u{config['UNROLL']}",)
    if config.get("L2_PART", 1) > 1:
        identity += (f"l2/{config['L2_PART']}",)
    return identity


def _offered(config: dict, n_cols: int, itemsize: int) -> bool:
    """Whether a cooperative config is a candidate at this row length (see the limits above;
    a register cap only where its uncapped kernel needs more: past 128 chunks per row)."""
    n_chunks = triton.cdiv(n_cols, config["CHUNK"])
    if config.get("maxnreg") and n_chunks <= 128:
        return False
    if config.get("PAIRS") and (n_cols % config["CHUNK"] or n_chunks > PAIRED_STEPS_MAX_CHUNKS):
        return False  # elsewhere it would run the plain loads: a duplicate, or too many registers
    if config.get("L2_PART", 1) > 1 and n_chunks > HALF_PREFETCH_MAX_CHUNKS[itemsize]:
        return False
    return not config.get("DEFER") or n_chunks <= DEFERRED_MAX_CHUNKS


def long_row_candidates(n_cols: int, dtype) -> list[dict]:
    """Every configuration the long-row tuner ranks for rows of n_cols values, each with its
    "path": the measured winner for this row length and dtype first (MEASURED_WINNERS: the
    untuned default), then the cooperative ones, the register single pass (rows up to 32K
    values), the one-row L2 kernel (rows up to 256 KiB) and the split-row L2 kernel (rows of
    two slices or more)."""
    itemsize = torch.empty((), dtype=dtype).element_size()
    block_n = triton.next_power_of_2(n_cols)
    candidates = [
        {"path": "cooperative", **c}
        for c in cooperative_candidates(dtype)
        if _offered(c, n_cols, itemsize)
    ]
    if block_n <= SINGLE_PASS_LONG_MAX_COLS:
        candidates.append(single_pass_long_candidate())
    if block_n * itemsize <= L2_ROWS_MAX_BYTES:
        candidates += l2_row_candidates(dtype)
    candidates += [c for c in l2_split_candidates(dtype) if n_cols > c["SLICE"]]
    candidates += softmax_flat.candidates_for(n_cols, dtype)
    winner = _measured_winner(itemsize, block_n)
    first = [c for c in candidates if winner and _identity(c) == winner][:1]
    if winner and not first:
        # a winner that reads pairs is offered on whole chunks only
        plain = _measured_winner(itemsize, block_n, PARTIAL_CHUNK_WINNERS)
        first = [c for c in candidates if plain and _identity(c) == plain][:1]
    return first + [c for c in candidates if c not in first]


def long_row_variants(n_cols: int, dtype) -> list[dict]:
    """long_row_candidates and, next to each, the variants that test why it is fast or slow,
    for benchmarks and GPU tests (the tuner never sees them): LEAN=False (the session-1
    arithmetic: two exps per value in the cooperative kernel, tl.exp everywhere), and for the
    L2 kernels PREFETCH=True at half the loop step (two half blocks in flight, about the
    registers of one whole block). For 2-byte dtypes the register single pass also runs at 16
    warps, 64 values (128 bytes) per thread as fp32 has at 32 warps. The cooperative kernel
    also runs PREFETCH=2 (two later rows in flight while it waits), and at half the chunk with
    it (16 values per thread: about twice the programs per SM), and DEFER (it never waits for
    the row it has just published) at its chunk and at half of it; for 2-byte dtypes DEFER
    with the held exps in the input dtype (HOLD_INPUT); and DEFER at one warp per program."""
    variants = []
    for config in long_row_candidates(n_cols, dtype):
        variants.append(config)
        if config.get("DEFER") or config["path"] == "flat":
            continue  # the deferred kernels are always lean, and their variants are below
        variants.append({**config, "LEAN": False})
        if config["path"] == "cooperative":
            variants.append({**config, "PREFETCH": 2})
            variants.append({**config, "CHUNK": config["CHUNK"] // 2, "PREFETCH": 2})
            deferred = {k: v for k, v in config.items() if k not in ("PREFETCH", "LEAN")}
            variants.append({**deferred, "DEFER": True})
            variants.append({**deferred, "CHUNK": config["CHUNK"] // 2, "DEFER": True})
            variants.append(
                {**deferred, "CHUNK": config["CHUNK"] // 2, "DEFER": True, "PREFETCH": 2}
            )
            if torch.empty((), dtype=dtype).element_size() == 2:
                held = {**deferred, "DEFER": True, "HOLD_INPUT": True}
                variants += [held, {**held, "CHUNK": config["CHUNK"] // 2}]
        if config["path"] in L2_LIVE_SLICES:
            variants.append({**config, "BLOCK": config["BLOCK"] // 2, "PREFETCH": True})
        if config["path"] == "single-pass" and torch.empty((), dtype=dtype).element_size() == 2:
            variants.append({**config, "num_warps": 16})
    # one warp per program: every reduction and every poll is a warp shuffle, no barrier
    # (block barriers were the first stall reason of the 4-warp kernels under ncu)
    one_warp = {"path": "cooperative", "num_warps": 1, "DEFER": True}
    if n_cols > 2048:
        variants += [{**one_warp, "CHUNK": c} for c in (512, 1024, 2048)]
        variants += [{**one_warp, "CHUNK": c, "PREFETCH": 2} for c in (1024, 2048)]
        variants += [{**one_warp, "CHUNK": c, "num_warps": 2} for c in (2048, 4096)]
        if torch.empty((), dtype=dtype).element_size() == 2:
            variants.append({**one_warp, "CHUNK": 2048, "HOLD_INPUT": True})
    unique = {str(sorted(v.items())): v for v in reversed(variants)}  # the first one stays
    return [v for v in variants if unique[str(sorted(v.items()))] is v]


def _path_default(path: str, dtype) -> dict:
    """The first configuration of one long-row path (what a forced path runs untuned)."""
    if path == "cooperative":
        return {"path": path, **cooperative_candidates(dtype)[0]}
    if path == "two-pass":
        chunk = INTERPRETER_CHUNK if interpreting() else cooperative_candidates(dtype)[0]["CHUNK"]
        return {"path": path, "CHUNK": chunk}
    if path == "l2-rows":
        return l2_row_candidates(dtype)[0]
    if path == "l2-split":
        return l2_split_candidates(dtype)[0]
    if path == "single-pass":
        return single_pass_long_candidate()
    if path == "held":
        return dict(softmax_held.CONFIGS[0])
    if path == "flat":
        itemsize = torch.empty((), dtype=dtype).element_size()
        return dict(softmax_flat.CANDIDATES[4 if itemsize == 4 else 2][0])
    raise ValueError(f"unknown long-row path {path!r}")


_tuned_rows: dict[tuple, dict] = {}
_tuned_long_rows: dict[tuple, dict] = {}


def _nbytes(x2d) -> int:
    return x2d.numel() * x2d.element_size()


def _shared_offers(x2d) -> tuple:
    """Which shared-memory configurations fit this tensor (softmax_shared, _split, _held):
    part of the tuners' keys, so a winner tuned on rows one fits is never reused on rows it
    does not (the padded row length alone does not say: 18,432 and 32,768 columns share a
    key)."""
    offers = (
        softmax_shared.candidates_for(x2d)
        + softmax_shared_split.candidates_for(x2d)
        + softmax_held.candidates_for(x2d)
    )
    return tuple(tuple(sorted(c.items())) for c in offers)


def _rows_key(x2d) -> tuple:
    block_n = triton.next_power_of_2(x2d.shape[1])
    return ("softmax.rows", block_n, x2d.dtype, x2d.device.index, _shared_offers(x2d))


def _launch_rows(x2d, out, config: dict | None) -> None:
    n_rows, n_cols = x2d.shape
    block_n = triton.next_power_of_2(n_cols)
    args = (x2d, out, n_rows, n_cols, x2d.stride(0), out.stride(0))
    kwargs = {"BLOCK_N": block_n}

    def run(c: dict) -> None:
        if c.get("path") == "shared-row":
            softmax_shared.launch(x2d, out, c)
            return
        tile = {k: v for k, v in c.items() if k != "path"}
        lean = tile.get("LEAN", True)
        extra = {"LEAN": lean, "FTZ": lean and not interpreting()}
        launch_row_tiles(_softmax_rows_kernel, args, {**kwargs, **extra}, n_rows, tile)

    if config is None:
        if interpreting():
            config = interpreter_row_tile(block_n)
        else:
            candidates = single_pass_candidates_for(x2d)
            key = _rows_key(x2d)
            config = tuned(_tuned_rows, key, run, candidates, nbytes=_nbytes(x2d))
    run(config)


# Rows of this many values also get one row per program at 64 values per thread (1, 2 and 4
# warps): fewer warps to combine in each reduction, the way one warp per row serves the rows
# of <= 1,024 values at 98 % of copy, where 2K-8K rows stayed at 93-94 % (session 5).
WIDE_THREAD_COLS = (2048, 4096, 8192)
WIDE_THREAD_VALUES = 64


# Rows of at least this many bytes take the shared-memory row kernel first where it fits (the
# untuned default: small inputs, and KERNELAB_TRITON_AUTOTUNE=0). In the tuned sweeps of
# sessions 8 and 9 (triton_kernels_sweep_20261130-023048 and -033357) it won every such row
# length the row tuner serves: fp32 2K-16K at 4.09-4.14 TB/s, bf16 4K-16K at 4.09-4.22; the
# 4 KiB rows (bf16 2K) kept the register tile (4.15-4.16).
SHARED_ROW_FIRST_MIN_BYTES = 8 << 10


def single_pass_candidates_for(x2d) -> list[dict]:
    """What the row tuner ranks: the register row tiles (row_candidates_for) and, where it
    fits, the shared-memory row kernel, first for rows of SHARED_ROW_FIRST_MIN_BYTES or more."""
    shared_rows = softmax_shared.candidates_for(x2d)
    if shared_rows and x2d.shape[1] * x2d.element_size() >= SHARED_ROW_FIRST_MIN_BYTES:
        return shared_rows + row_candidates_for(x2d)
    return row_candidates_for(x2d) + shared_rows


def row_candidates_for(x2d) -> list[dict]:
    """The single pass's tuning candidates for this input: the pipelined ones stage tiles of
    the row itself (its itemsize per column) within the device's shared memory; rows of
    WIDE_THREAD_COLS also one row per program at WIDE_THREAD_VALUES values per thread."""
    block_n = triton.next_power_of_2(x2d.shape[1])
    candidates = row_tile_candidates(
        block_n,
        loaded_bytes_per_column=x2d.element_size(),
        shared_bytes=shared_bytes_per_program(x2d.device),
    )
    if block_n in WIDE_THREAD_COLS:
        warps = block_n // (32 * WIDE_THREAD_VALUES)
        candidates.append({"ROWS": 1, "num_warps": warps, "num_stages": 1, "PERSISTENT": False})
    return candidates


def _launch_two_pass(x2d, out, chunk: int) -> None:
    n_rows, n_cols = x2d.shape
    n_chunks = triton.cdiv(n_cols, chunk)
    # workspace: (max, sum) per chunk, 8 bytes x rows x chunks, tiny next to the row itself
    stats = torch.empty((n_rows, n_chunks, 2), device=x2d.device, dtype=torch.float32)
    warps = 1 if interpreting() else 4
    keep(stats)  # written whole by the first kernel before the second reads it
    launch(
        _softmax_chunk_stats_kernel,
        (n_rows, n_chunks),
        x2d,
        stats,
        n_cols,
        x2d.stride(0),
        n_chunks,
        CHUNK=chunk,
        num_warps=warps,
    )
    launch(
        _softmax_chunk_normalize_kernel,
        (n_rows, n_chunks),
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


def _cooperative_setup(x2d, out, config: dict) -> tuple[dict, tuple, int]:
    """(launch kwargs, launch arguments but n_groups, chunks per row) of the cooperative kernel.

    The workspace is sized for the most groups that could ever be resident (32 programs per
    SM), so the same tensors serve the occupancy probe and the launch: n_groups is not
    specialized on, and the probe compiles the very binary the launch runs.
    """
    n_rows, n_cols = x2d.shape
    chunk = config["CHUNK"]
    n_chunks = triton.cdiv(n_cols, chunk)
    deferred = config.get("DEFER", False)
    # num_stages=1: no software pipelining, so no load is ever hoisted above the barrier
    lean = config.get("LEAN", True) or deferred
    kwargs = {
        "CHUNK": chunk,
        "BLOCK_CHUNKS": max(MAX_CHUNKS_BLOCK, triton.next_power_of_2(n_chunks)),
        "FTZ": lean and not interpreting(),
        "MAX_SPINS": INTERPRETER_MAX_SPINS if interpreting() else MAX_SPINS,
        "num_warps": 1 if interpreting() else config["num_warps"],
        "num_stages": 1,
        # the L2 prefetch is inline PTX: the interpreter runs without it
        "L2_AHEAD": 0 if interpreting() else config.get("L2_AHEAD", 0),
    }
    if deferred:
        kwargs.update(
            PREFETCH=config.get("PREFETCH", 1),
            HOLD_INPUT=config.get("HOLD_INPUT", False),
            LATE_LOAD=config.get("LATE_LOAD", False),
            PACKED=config.get("PACKED", False),
            EARLY_POLL=config.get("EARLY_POLL", False),
            # whole chunks: no masks, unless the config asks for them (MASKED, see the bf16
            # c2048 candidate)
            EVEN=not config.get("MASKED", False) and n_cols % chunk == 0,
            # halving reductions (_halving_reduce): 4x shorter dependent chains, the same
            # speed on the H200 (within 0.5 %: softmax_long_rows_v16)
            TREE=config.get("TREE", False),
            # the output stored evict_first: -0.7 % to +1.2 % beside the same config on the
            # H200 (softmax_long_rows_v20), inside a run's spread; not a candidate
            STREAM_STORE=config.get("STREAM_STORE", False),
            # two steps per loop iteration: the held exps change registers without moves
            UNROLL=config.get("UNROLL", 1),
            PTX=not interpreting(),
            L2_PART=config.get("L2_PART", 1),
        )
        # bf16 pairs in words (_load_pairs): whole chunks only, and 4-byte aligned words
        kwargs["PAIRS"] = (
            config.get("PAIRS", False)
            and kwargs["EVEN"]
            and x2d.dtype == torch.bfloat16
            and x2d.stride(0) % 2 == 0
            and x2d.data_ptr() % 4 == 0
        )
        # the row to finish held as its input pairs, exps taken again (PAIRS only)
        kwargs["RECOMPUTE"] = config.get("RECOMPUTE", False) and kwargs["PAIRS"]
        # its 1 / S folded into the exponent (an experiment of session 15, not a candidate)
        kwargs["LOG_SCALE"] = config.get("LOG_SCALE", False) and kwargs["RECOMPUTE"]
        if config.get("maxnreg") and not interpreting():
            # a register cap (ptxas .maxnreg): more programs per SM, some values spilled to L1
            kwargs["maxnreg"] = config["maxnreg"]
        if kwargs["num_warps"] == 1:
            # One warp polls exactly this row length's partials (n_chunks words, one binary
            # per power of two of chunks), not MAX_CHUNKS_BLOCK: 256 slots would be 16 loads
            # per lane per poll. At 4 warps the exact size measured slower on the H200 (it
            # cost registers: session 3, 20:00 UTC), so they keep the fixed block.
            kwargs["BLOCK_CHUNKS"] = max(2, triton.next_power_of_2(n_chunks))
    else:
        kwargs.update(PREFETCH=config["PREFETCH"], LEAN=lean)
    max_groups = max(1, min(n_rows, sm_count(x2d.device) * 32 // n_chunks))
    # workspace: 2 tagged words (max, sum) x turn slots (2 parities, 4 when deferred) x chunks
    # per group, int64 words that start at tag 0, which no turn matches (PACKED: one word per
    # chunk, whose zeroed tag bit no turn from 1 to 4 matches)
    slots = 4 if deferred else 2
    words = 1 if deferred and config.get("PACKED") else 2
    shape = (max_groups, slots, n_chunks, words)
    if deferred:
        # kept between calls where turn_words.REUSE (the kernel continues the turns)
        stats, bases, continued = turn_words.exchange_words(
            x2d.device, "softmax.cooperative", shape, max_groups
        )
        if continued:
            kwargs.update(bases_ptr=bases, CONTINUE=True)
    else:
        stats = torch.zeros(shape, device=x2d.device, dtype=torch.int64)
    args = (x2d, out, stats, n_rows, n_cols, x2d.stride(0), out.stride(0), n_chunks)
    return kwargs, args, n_chunks


def cooperative_occupancy(x, config: dict) -> dict:
    """Registers, spills, shared bytes and programs per SM (formula and driver) of the
    cooperative kernel compiled for x and config; benchmarks record it, tests check it."""
    x2d = x if x.stride(1) == 1 else x.contiguous()
    out = torch.empty_like(x2d)
    kwargs, args, n_chunks = _cooperative_setup(x2d, out, config)
    probe = (*args, 2)
    per_sm, info = compiled_occupancy(_cooperative_kernel(config), x2d.device, probe, kwargs)
    return {**info, "per_sm": per_sm, "chunks_per_row": n_chunks}


def _run_cooperative(x2d, out, config: dict, wait_log=None) -> bool:
    """Run the one-pass split-row kernel; False when its programs cannot all be resident.
    wait_log: an int32 tensor of 3 words per program for the deferred kernel's WAIT_LOG."""
    kwargs, args, n_chunks = _cooperative_setup(x2d, out, config)
    if wait_log is not None:
        kwargs.update(wait_log_ptr=wait_log, WAIT_LOG=True)
    kernel = _cooperative_kernel(config)
    resident = resident_programs(kernel, (*args, 2), kwargs)
    # GROUPS (an experiment's knob, not a candidate): at most this many row groups, to see
    # how the rate falls with the programs in flight
    n_groups = min(x2d.shape[0], resident // n_chunks, config.get("GROUPS", x2d.shape[0]))
    if n_groups < 1:
        return False
    launch(kernel, (n_groups * n_chunks,), *args, n_groups, **kwargs)
    return True


def cooperative_wait_log(x, config: dict) -> dict:
    """Run the deferred cooperative kernel once on x, counting at each row it finishes
    whether its poll for the peers' partials found one still missing. A diagnostic for the
    experiments: if long groups wait for their slowest member, late finishes grow with the
    chunks per row. Returns the counts summed over programs and the per-program extremes."""
    if not config.get("DEFER"):
        raise ValueError("the wait log belongs to the deferred cooperative kernel (DEFER)")
    x2d = x if x.stride(1) == 1 else x.contiguous()
    out = torch.empty_like(x2d)
    most_programs = sm_count(x2d.device) * 32
    log = torch.full((most_programs, 3), -1, device=x2d.device, dtype=torch.int32)
    if not _run_cooperative(x2d, out, config, wait_log=log):
        return {"resident": False}
    ran = log[log[:, 0] >= 0].cpu()  # programs that wrote their counts
    finishes, late, polls = (int(v) for v in ran.sum(dim=0))
    return {
        "resident": True,
        "programs": int(ran.shape[0]),
        "chunks_per_row": triton.cdiv(x2d.shape[1], config["CHUNK"]),
        "finishes": finishes,
        "late_finishes": late,
        "late_fraction": late / finishes if finishes else 0.0,
        "extra_polls": polls,
        "polls_per_late_finish": polls / late if late else 0.0,
        "most_late_in_a_program": int(ran[:, 1].max()),
    }


def _cooperative_kernel(config: dict):
    """DEFER: finish each row one step later (_softmax_coop_deferred_kernel), else wait."""
    return _softmax_coop_deferred_kernel if config.get("DEFER") else _softmax_coop_kernel


def _l2_setup(x2d, out, config: dict) -> tuple[dict, tuple, int]:
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
        "LEAN": config.get("LEAN", True),
        "FTZ": config.get("LEAN", True) and not interpreting(),
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


def _l2_groups(x2d, config: dict, kwargs: dict, args: tuple, n_slices: int) -> tuple[int, dict]:
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


def _run_l2(x2d, out, config: dict) -> bool:
    """Run the two-pass L2 kernel; False when a row's slices cannot all be resident."""
    kwargs, args, n_slices = _l2_setup(x2d, out, config)
    n_groups, _ = _l2_groups(x2d, config, kwargs, args, n_slices)
    if n_groups < 1:
        return False
    launch(_softmax_l2_kernel, (n_groups * n_slices,), *args, n_groups, **kwargs)
    return True


def _run_long_rows(x2d, out, config: dict) -> bool:
    """Launch one long-row configuration; False when it cannot run here (not resident)."""
    path = config["path"]
    if path == "single-pass":
        _launch_rows(x2d, out, config)
    elif path == "cooperative":
        return _run_cooperative(x2d, out, config)
    elif path in L2_LIVE_SLICES:
        return _run_l2(x2d, out, config)
    elif path == "two-pass":
        _launch_two_pass(x2d, out, config["CHUNK"])
    elif path == "shared-row":
        if config not in softmax_shared.candidates_for(x2d):
            return False
        softmax_shared.launch(x2d, out, config)
    elif path == "shared-split":
        if config not in softmax_shared_split.candidates_for(x2d):
            return False
        softmax_shared_split.launch(x2d, out, config)
    elif path == "held":
        if config not in softmax_held.candidates_for(x2d):
            return False
        return softmax_held.launch(x2d, out, config)
    elif path == "flat":
        return softmax_flat.launch(x2d, out, config)
    else:
        raise ValueError(f"unknown long-row path {path!r}")
    return True


def long_row_plan(x, config: dict) -> dict:
    """How one long-row configuration launches on x: the path, the compiled kernel's registers,
    spills and programs per SM, and (L2 paths) the grid and the bytes it keeps live in L2.
    Benchmarks record it next to each timing."""
    x2d = x if x.stride(1) == 1 else x.contiguous()
    path = config["path"]
    if path == "cooperative":
        return {"path": path, **cooperative_occupancy(x2d, config)}
    if path == "held" and config in softmax_held.candidates_for(x2d):
        return {"path": path, **softmax_held.plan(x2d, config)}
    if path == "flat":
        return {"path": path, **softmax_flat.plan(x2d, config)}
    if path not in L2_LIVE_SLICES:
        return {"path": path}
    out = torch.empty_like(x2d)
    kwargs, args, n_slices = _l2_setup(x2d, out, config)
    per_sm, info = compiled_occupancy(_softmax_l2_kernel, x2d.device, (*args, 2), kwargs)
    _, plan = _l2_groups(x2d, config, kwargs, args, n_slices)
    return {"path": path, **info, "per_sm": per_sm, **plan}


def _long_rows_key(x2d) -> tuple:
    block_n = triton.next_power_of_2(x2d.shape[1])
    return ("softmax.long_rows", block_n, x2d.dtype, x2d.device.index, _shared_offers(x2d))


# Where a Gluon kernel's config (softmax_shared_split, softmax_held) is the measured winner,
# per (itemsize, padded columns): it goes first among the long-row candidates, the untuned
# default. fp32 32K and 65K: 64 KiB chunks of 16-line steps at 4 warps won both in the three
# tuned sweeps of sessions 8 and 9 (triton_kernels_sweep_20261130-023048, -033357, -034917:
# 4.05-4.09 TB/s, 100.8-102.4 % of the runner-up in the final rounds). bf16 262K was the
# held kernel's from session 12 (c4096 w2 3.851-3.866 TB/s against 3.762-3.798 for the
# tuned library beside it, softmax_gluon_held_v2..v4, v6; c8192 w4 3.899-3.911 in session
# 13, v11-v13) until session 15, when the cooperative c2048 holding its input pairs beat it
# by 3.6 % in alternating pairs (MEASURED_WINNERS); the held kernel stays a candidate.
# fp32 65K was the split kernel's until session 18, when the flat kernel's c2048 w2 beat it
# by 102.7-103.0 % in the tuner's final round of three tuned sweeps
# (triton_kernels_sweep_20261130-134619, -135914, -140053): MEASURED_WINNERS leads there.
GLUON_WINNERS = {
    (4, 32768): {"path": "shared-split", "CHUNK_BYTES": 64 << 10, "SUB": 16, "num_warps": 4},
}


def _gluon_winner_first(candidates: list[dict], itemsize: int, n_cols: int) -> list[dict]:
    """candidates with the GLUON_WINNERS config for this row length first, where offered."""
    winner = GLUON_WINNERS.get((itemsize, triton.next_power_of_2(n_cols)))
    first = [c for c in candidates if winner and c == winner][:1]
    return first + [c for c in candidates if c not in first]


def long_row_candidates_for(x2d) -> list[dict]:
    """What the long-row tuner ranks for this tensor: the shared-memory row kernel first where
    it fits (rows of up to 64 KiB: at 32K bf16 it measured 4.07-4.10 TB/s against 3.83 for
    the tuned long-row kernels in the same run, softmax_gluon_rows_v1), so it is the untuned
    default there; then long_row_candidates; then the split shared-memory kernel and the
    held-row kernel (rows of whole chunks), whose GLUON_WINNERS config goes first where it
    is the measured winner."""
    row = softmax_shared.candidates_for(x2d)
    split = softmax_shared_split.candidates_for(x2d) + softmax_held.candidates_for(x2d)
    candidates = row + long_row_candidates(x2d.shape[1], x2d.dtype) + split
    return _gluon_winner_first(candidates, x2d.element_size(), x2d.shape[1])


def _launch_long_rows(x2d, out, config: dict | None) -> None:
    """Run the given long-row configuration, else the tuned one; the two-pass kernel takes
    over whenever the chosen one cannot be resident."""
    if config is None:

        def run(c: dict) -> None:
            if not _run_long_rows(x2d, out, c):
                _launch_two_pass(x2d, out, _path_default("two-pass", x2d.dtype)["CHUNK"])

        candidates = long_row_candidates_for(x2d)
        config = tuned(_tuned_long_rows, _long_rows_key(x2d), run, candidates, nbytes=_nbytes(x2d))
    if not _run_long_rows(x2d, out, config):
        chunk = config.get("CHUNK") or _path_default("two-pass", x2d.dtype)["CHUNK"]
        _launch_two_pass(x2d, out, chunk)


def choose_path(n_cols: int, *, single_pass_max_cols: int | None = None) -> str:
    """ "single-pass", "long-rows" (the tuner picks among long_row_candidates) or, under the
    interpreter, "two-pass": which launcher softmax() uses for rows of n_cols."""
    limit = SINGLE_PASS_MAX_COLS if single_pass_max_cols is None else single_pass_max_cols
    if n_cols <= limit:
        return "single-pass"
    return "two-pass" if interpreting() else "long-rows"


def config_for(x, *, single_pass_max_cols: int | None = None) -> dict:
    """The kernel path, its configuration and the tuner that chose it ("tuner": the prefix of
    its key in _runtime.TUNING_LOG) for softmax(x): the tuned one, else the default."""
    n_cols = x.shape[-1]
    path = choose_path(n_cols, single_pass_max_cols=single_pass_max_cols)
    # the tensor softmax() launches on (it copies rows of a non-unit stride); for the keys only
    # its shape, dtype, strides and alignment matter, so an uncopied stand-in serves
    x2d = x if x.stride(1) == 1 else torch.empty(x.shape, dtype=x.dtype, device=x.device)
    if path == "single-pass":
        block_n = triton.next_power_of_2(n_cols)
        config = _tuned_rows.get(_rows_key(x2d))
        if config is None and not interpreting() and x2d.device.type == "cuda":
            config = single_pass_candidates_for(x2d)[0]
        return {
            "path": path,
            **(config or row_tile_candidates(block_n)[0]),
            "tuner": "softmax.rows",
        }
    if path == "two-pass":
        return {**_path_default("two-pass", x.dtype), "tuner": None}
    config = _tuned_long_rows.get(_long_rows_key(x2d))
    return {**(config or long_row_candidates_for(x2d)[0]), "tuner": "softmax.long_rows"}


def softmax(
    x,
    *,
    single_pass_max_cols: int | None = None,
    chunk_cols: int | None = None,
    long_rows: str | None = None,
    config: dict | None = None,
):
    """Softmax over the last dimension of x (2-D, any row stride); a new tensor, x untouched.

    single_pass_max_cols, chunk_cols and long_rows (a path: "cooperative", "two-pass",
    "l2-rows", "l2-split", "single-pass", "held") override the path choice; tests use them to
    drive the long-row paths at small sizes. config launches one candidate instead of the
    tuned one: a row-tile config (row_tile_candidates) for rows that take the single pass,
    else one of long_row_candidates (its "path" says which kernel; a config without one is
    cooperative).
    A forced "cooperative" or "l2-split" also runs under the interpreter, where it is only
    correct with one chunk (slice) per row: programs run one after another there, so peers
    never meet.
    """
    if x.dim() != 2:
        raise ValueError(f"softmax expects a 2-D tensor [rows, cols], got shape {tuple(x.shape)}")
    if x.dtype not in SUPPORTED_DTYPES:
        raise ValueError(f"softmax supports fp32, bf16 and fp16, not {x.dtype}")
    x2d = x if x.stride(1) == 1 else x.contiguous()
    n_rows, n_cols = x2d.shape
    # the same new contiguous tensor as torch.empty((n_rows, n_cols), device=, dtype=), for
    # two thirds of its Python cost (0.87 against 1.3 us on the CPU here)
    out = torch.empty_like(x2d, memory_format=torch.contiguous_format)
    if n_rows == 0 or n_cols == 0:
        return out
    options = (single_pass_max_cols, chunk_cols, long_rows, config)
    if options == (None, None, None, None):
        # the tuned choice: planned (launch_plans), keyed by the tensors alone
        PLANS.call(
            x.device, (x2d, out), lambda: _dispatch(x2d, out, None, None, None, None), fresh=1
        )
        return out
    # a forced choice is planned too, keyed by its options as well (as triton.matmul's since
    # session 28): through Triton's front door each call pays its launcher's Python again
    frozen_options = frozen(*options)
    if frozen_options is None:  # a config the key cannot hold: unplanned
        _dispatch(x2d, out, *options)
        return out
    PLANS.call(
        x.device, (x2d, out), lambda: _dispatch(x2d, out, *options), *frozen_options, fresh=1
    )
    return out


def _dispatch(x2d, out, single_pass_max_cols, chunk_cols, long_rows, config) -> None:
    """Launch the path softmax() chose for x2d into out (the options as softmax() takes them)."""
    path = choose_path(x2d.shape[1], single_pass_max_cols=single_pass_max_cols)
    forced = long_rows or (config or {}).get("path")
    if forced is None and config is not None and path != "single-pass":
        forced = "cooperative"  # the configs of cooperative_candidates carry no path
    if forced is None and path == "single-pass":
        _launch_rows(x2d, out, config)
        return
    if forced is not None:
        config = {**(config or _path_default(forced, x2d.dtype)), "path": forced}
    elif path == "two-pass":
        config = _path_default("two-pass", x2d.dtype)
    if chunk_cols is not None:
        config = {**(config or _path_default("cooperative", x2d.dtype))}
        config["CHUNK"] = triton.next_power_of_2(chunk_cols)
    _launch_long_rows(x2d, out, config)
