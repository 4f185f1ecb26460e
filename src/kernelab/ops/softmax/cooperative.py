"""The cooperative split row ("cooperative"): each row cut into chunks of CHUNK columns, one
per program; the programs of a row keep their chunk in registers, publish its (max, sum of
exp), wait until all their peers have, combine the partials and write. One read and one
write, with all of a row's chunks in flight on different SMs.

DEFER (the deferred kernel) takes the wait off the critical path: a program publishes row r's
partials, then finishes its previous row, whose peers published a step ago. The split kernels
need every program of a row resident at once: the grid never exceeds what the occupancy of
the compiled kernel allows, and a bounded wait turns a broken assumption into NaN output.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
import triton
import triton.language as tl

from kernelab.ops.softmax.chunks import (
    _chunk_exp_stats,
    _chunk_max,
    _exps_and_sum,
    _load_chunk,
    _load_step,
    _max_of_words,
    _unpaired,
)
from kernelab.ops.softmax.exchange import (
    INTERPRETER_MAX_SPINS,
    MAX_CHUNKS_BLOCK,
    MAX_SPINS,
    TURN_PERIOD,
    _exchange_tagged,
    _poll,
    _publish,
    _settle,
)
from kernelab.ops.softmax.primitives import (
    LOG2E,
    _chunk_scale,
    _exp2,
    _prefetch_to_l2,
)
from kernelab.runtime import turn_words
from kernelab.runtime.tuner import compiled_occupancy, interpreting, resident_programs, sm_count


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
        e, chunk_max, chunk_sum = _chunk_exp_stats(x, FTZ)
        # Partials are double-buffered by iteration parity: a program can only be one row
        # ahead of its slowest peer, because it passed the barrier that peer also arrives at.
        # 16 bytes per chunk per row: nothing next to the row's CHUNK * itemsize.
        buffer = stats_ptr + ((group * 2 + iteration % 2) * n_chunks) * 2
        # (maxima in log2 units, see _chunk_exp_stats)
        row_max, row_sum, met = _exchange_tagged(
            buffer, chunk, n_chunks, iteration + 1, chunk_max, chunk_sum, BLOCK_CHUNKS, MAX_SPINS,
            True,
        )  # fmt: skip
        # one scalar exp per program, then one FMUL per value (all -inf row: S is NaN)
        y = e * _chunk_scale(chunk_max, row_max, row_sum, FTZ)
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
):
    """From a first poll of the partials of `turn` (published by the peers during the
    previous row's step, so normally already there), poll until all are, then write
    e * (exp(chunk max - M) / S), or NaN unless this wait and every earlier one (`healthy`)
    succeeded. RECOMPUTE: e is the chunk's input as words of bf16 pairs, and the output is
    2^(x * log2(e) - C) / S, its exps taken again against the row's C. Returns (the polls
    beyond the first, 0 when no peer was late; whether this wait succeeded)."""
    # its maxima are in log2 units
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
    FTZ: tl.constexpr,
    MAX_SPINS: tl.constexpr,
    L2_AHEAD: tl.constexpr = 0,
    PACKED: tl.constexpr = False,
    EARLY_POLL: tl.constexpr = False,
    EVEN: tl.constexpr = False,
    STREAM_STORE: tl.constexpr = False,
    PAIRS: tl.constexpr = False,
    UNROLL: tl.constexpr = 1,
    PTX: tl.constexpr = True,
    L2_PART: tl.constexpr = 1,
    bases_ptr=None,
    CONTINUE: tl.constexpr = False,
    RECOMPUTE: tl.constexpr = False,
):
    # The cooperative kernel with its wait taken off the critical path: in the step of row r a
    # program publishes r's partials and then finishes row r - n_groups, whose partials its
    # peers published a whole step ago, instead of waiting for r's. Its exps stay in
    # registers one step longer (e of two rows, plus the next row's chunk in flight). The
    # order is the point: publish as early as possible, finish the deferred row last.
    # Same groups and chunks as _softmax_coop_kernel; PREFETCH (1 or 2)
    # later rows' chunks in flight, in the input dtype.
    # PACKED: each chunk's partials in one 64-bit word with a one-bit tag (_packed), not two.
    # EARLY_POLL: the first poll for the row to finish is issued before this row's exps are
    # taken, so its L2 round trip overlaps that arithmetic instead of following it.
    # EVEN: every chunk is whole, so no masks (set by the launcher).
    # PAIRS (bf16, whole chunks): the chunk travels as 32-bit words of pairs (_load_pairs),
    # widened by shifts and its max taken on the pairs (_max_of_words; PTX: inline PTX
    # allowed, off under the interpreter). UNROLL=2: two steps per loop iteration, so the held
    # exps change registers without a move each (494 -> 404 SASS per bf16 c1024 step).
    # L2_PART > 1: the L2 prefetch asks for only the chunk's first 1 / L2_PART. The L2's
    # busiest part is its fabric between the two partitions, and a prefetched line crosses it
    # twice for about half the SMs (fetched by the prefetch, read by the load); half the
    # prefetch trades fabric for latency, which pays only at the row lengths offered
    # (HALF_PREFETCH_MAX_CHUNKS).
    # CONTINUE: the words were kept from the last call on them (turn_words); this group's
    # turns go on from bases_ptr[group], advanced at the end. Off, they start at 0.
    # RECOMPUTE (with PAIRS): the row to finish is held as the words of bf16 pairs it was read
    # as (CHUNK / 2 registers, not CHUNK of fp32 exps) and its exps are taken again at the
    # finish against the row's max (_finish_deferred), so they cannot be hoisted above the
    # poll and held through it: bf16 c2048 at one warp fits 160 registers (184-209 holding
    # exps), 12 programs per SM with 4 KiB of the row each, at two exps per value.
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
    else:
        held_e = tl.zeros([CHUNK], dtype=tl.float32)
    held_max = tl.max(held_e.to(tl.float32), axis=0)
    iteration = 0
    healthy = True  # every wait so far ended with all peers' partials
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
        else:
            upcoming = _load_step(
                x_ptr, row + n_groups, n_rows, n_cols, x_row_stride, cols, chunk, CHUNK, EVEN,
                PAIRS,
            )  # fmt: skip
        if PAIRS:
            x = _unpaired(pairs)
            top = _max_of_words(pairs, PTX)
        else:
            top = _chunk_max(x)
        # chunk_max: c, the max in log2 units (_exps_and_sum)
        e, chunk_max, chunk_sum = _exps_and_sum(x, top, FTZ)
        _publish(
            stats_ptr + ((group * 4 + turn % 4) * n_chunks) * WORDS,
            chunk, turn + 1, chunk_max, chunk_sum, PACKED,
        )  # fmt: skip
        if iteration > 0:
            if not EARLY_POLL:
                first, second = _poll(previous, n_chunks, turn, BLOCK_CHUNKS, PACKED)
            _, met = _finish_deferred(
                previous, first, second, n_chunks, turn, held_e, held_max, out_ptr,
                row - n_groups, out_row_stride, cols, mask, BLOCK_CHUNKS, MAX_SPINS, healthy,
                FTZ, PACKED, EVEN, STREAM_STORE, RECOMPUTE,
            )  # fmt: skip
            healthy = healthy & met
        if RECOMPUTE:
            held_e = pairs
        else:
            held_e = e
        held_max = chunk_max
        iteration += 1
    # the group's last row (every group has at least one: n_groups <= n_rows)
    last_row = group + (iteration - 1) * n_groups
    last_turn = turn0 + iteration
    last = stats_ptr + ((group * 4 + (last_turn - 1) % 4) * n_chunks) * WORDS
    first, second = _poll(last, n_chunks, last_turn, BLOCK_CHUNKS, PACKED)
    _finish_deferred(
        last, first, second, n_chunks, last_turn, held_e, held_max, out_ptr, last_row,
        out_row_stride, cols, mask, BLOCK_CHUNKS, MAX_SPINS, healthy, FTZ, PACKED, EVEN,
        STREAM_STORE, RECOMPUTE,
    )  # fmt: skip
    if CONTINUE:
        if chunk == 0:
            # after the last finish, which needed every peer's words of this call, so every
            # peer has read the old base (turn_words has the argument)
            tl.store(bases_ptr + group, (last_turn % TURN_PERIOD).to(tl.int64))


# A config that reads pairs needs this many chunks per row or fewer (offered).
PAIRED_STEPS_MAX_CHUNKS = 128
# A config that prefetches only part of each chunk into L2 (L2_PART) is offered up to this
# many chunks per row, by itemsize: where it was measured to win (cooperative_candidates.json).
HALF_PREFETCH_MAX_CHUNKS = {2: 64, 4: 128}
# The candidates, in the order they are tried, each with what it measured and its record.
CANDIDATES = json.loads((Path(__file__).parent / "cooperative_candidates.json").read_text())


def candidates(dtype) -> list[dict]:
    """The cooperative configurations to try for `dtype`, in order: those of
    cooperative_candidates.json offered to its itemsize (and name, where an entry names
    dtypes). The waiting kernel's come first, then the deferred kernel's (DEFER)."""
    itemsize = torch.empty((), dtype=dtype).element_size()
    name = str(dtype).removeprefix("torch.")
    return [
        dict(entry["config"])
        for entry in CANDIDATES["candidates"]
        if itemsize in entry["itemsizes"] and name in entry.get("dtypes", [name])
    ]


# Deferred cooperative programs poll every peer's partials at each row: one-warp ones with
# the packed early poll held 4.0 TB/s at 256 chunks per row (262K fp32 columns in 1024-value
# chunks; the two-word exchange had collapsed there to 2.5: 208 registers for the polled
# words, 9 programs per SM). Past 256 the polled words keep growing, untimed, so no deferred
# config (one warp or two) is offered there.
DEFERRED_MAX_CHUNKS = 256
# Spilled bytes a cooperative candidate may carry (ptxas on the H200, checked by a GPU test).
# The early poll holds up to 8 polled words per lane through the exps, and at 256 chunks
# ptxas spills a few bytes: 4 for the 262K fp32 winner (c1024 l2a1: 4.006 TB/s, where the
# same kernel without the L2 prefetch spills none and ran 3.939), 2 for bf16 c1024 at 262K
# and c2048 at 32K. Tens of bytes (a register cap) lost. The ptxas reports: git show
# f7bfe57:benchmarks/results/h200/experiments/softmax_long_rows_v14.json
MOST_SPILLED_BYTES = 8


def offered(config: dict, n_cols: int, itemsize: int) -> bool:
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


def setup(x2d, out, config: dict) -> tuple[dict, tuple, int]:
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
    kwargs = {
        "CHUNK": chunk,
        "BLOCK_CHUNKS": max(MAX_CHUNKS_BLOCK, triton.next_power_of_2(n_chunks)),
        "FTZ": not interpreting(),
        "MAX_SPINS": INTERPRETER_MAX_SPINS if interpreting() else MAX_SPINS,
        "num_warps": 1 if interpreting() else config["num_warps"],
        "num_stages": 1,
        # the L2 prefetch is inline PTX: the interpreter runs without it
        "L2_AHEAD": 0 if interpreting() else config.get("L2_AHEAD", 0),
    }
    if deferred:
        kwargs.update(
            PREFETCH=config.get("PREFETCH", 1),
            PACKED=config.get("PACKED", False),
            EARLY_POLL=config.get("EARLY_POLL", False),
            # whole chunks: no masks, unless the config asks for them (MASKED, see the bf16
            # c2048 candidate)
            EVEN=not config.get("MASKED", False) and n_cols % chunk == 0,
            # the output stored evict_first (a bf16 candidate, cooperative_candidates.json)
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
        if config.get("maxnreg") and not interpreting():
            # a register cap (ptxas .maxnreg): more programs per SM, some values spilled to L1
            kwargs["maxnreg"] = config["maxnreg"]
        if kwargs["num_warps"] == 1:
            # One warp polls exactly this row length's partials (n_chunks words, one binary
            # per power of two of chunks), not MAX_CHUNKS_BLOCK: 256 slots would be 16 loads
            # per lane per poll. At 4 warps the exact size measured slower on the H200 (it
            # cost registers), so they keep the fixed block.
            kwargs["BLOCK_CHUNKS"] = max(2, triton.next_power_of_2(n_chunks))
    else:
        kwargs.update(PREFETCH=config["PREFETCH"])
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


def occupancy(x, config: dict) -> dict:
    """Registers, spills, shared bytes and programs per SM (formula and driver) of the
    cooperative kernel compiled for x and config; benchmarks record it, tests check it."""
    x2d = x if x.stride(1) == 1 else x.contiguous()
    out = torch.empty_like(x2d)
    kwargs, args, n_chunks = setup(x2d, out, config)
    probe = (*args, 2)
    per_sm, info = compiled_occupancy(kernel_for(config), x2d.device, probe, kwargs)
    return {**info, "per_sm": per_sm, "chunks_per_row": n_chunks}


def launch(x2d, out, config: dict) -> bool:
    """Run the one-pass split-row kernel; False when its programs cannot all be resident."""
    kwargs, args, n_chunks = setup(x2d, out, config)
    kernel = kernel_for(config)
    resident = resident_programs(kernel, (*args, 2), kwargs)
    n_groups = min(x2d.shape[0], resident // n_chunks)
    if n_groups < 1:
        return False
    kernel[(n_groups * n_chunks,)](*args, n_groups, **kwargs)
    return True


def kernel_for(config: dict):
    """DEFER: finish each row one step later (_softmax_coop_deferred_kernel), else wait."""
    return _softmax_coop_deferred_kernel if config.get("DEFER") else _softmax_coop_kernel
