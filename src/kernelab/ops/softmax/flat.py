"""Softmax of very long rows over every resident program: the deferred cooperative kernel with
its row groups dissolved into one flat sequence of chunks (path "flat").

The deferred cooperative kernel (cooperative._softmax_coop_deferred_kernel) gives each row to a
group of n_chunks programs, and the grid holds as many whole groups as fit: at bf16 262K
(128 chunks of 2,048 values a row, 12 one-warp programs per SM) that is 12 groups, 1,536 of
the 1,584 programs the H200 holds; the 48 left over could not make a 13th group. Capping the
groups measured how much the programs in flight matter there: 11 groups (8 % fewer programs)
ran at 98.0 % of 12, and at 65K 45 of 49 groups at 98.4 %
(softmax_paired_configs_v6_groups). The rows also end unevenly: 8,192 rows over 49 groups take 168 rounds, the last
with 9 of the 49 groups busy.

Here the grid is every resident program (P of them), and the chunks of the whole input are
one sequence of units u = row * n_chunks + chunk: program p takes units p, p + P, p + 2P, ...
So every program is busy until the last round, and a row's chunks may be split between two
consecutive rounds. Each unit's partials go into a word of their own (one packed 64-bit word
per unit, n_rows * n_chunks of them: 8 bytes per CHUNK values), so no slot is ever reused
within a call and no turn arithmetic is needed:

    step k (unit u = p + k * P, row u // n_chunks, chunk u % n_chunks):
      poll the words of unit u - P's row (early) -> unit u's chunk, loaded a step ago ->
      load unit u + P's chunk -> its max and sum of exps -> publish word u -> once unit
      u - P's row is complete: write unit u - P (its exps taken again, or held)

No program waits before it has published, and a row's units lie in at most two consecutive
rounds (n_chunks <= P), so every wait ends: the words a step waits for are published by
programs in that step or the one before it, none of which waits first.

The words are kept between calls (turn_words.exchange_words). Every call writes every unit's
word once, all with one tag bit: the packed word's bit (exchange._packed) for turn 1 or turn
5, which differ in it. The bit comes from an epoch word after the unit words, which the last
program to end (counted by an atomic after the words) advances; every program read the epoch
before it counted itself. A zeroed workspace (epoch 0, tag 1) never matches its zeroed words
(tag 0), so a fresh workspace is right too, as is the one a CUDA graph captures with its
zero fill (test_gpu_softmax_flat_kernel_replays_in_a_cuda_graph, on the H200).

Bytes per program per unit: CHUNK x itemsize read from HBM (the L2 prefetch asks for the
same lines two rounds early) and written once; 8 bytes published, n_chunks x 8 polled (L2).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernelab.ops.softmax.chunks import (
    _chunk_max,
    _exps_and_sum,
    _load_step,
    _max_of_words,
    _unpaired,
)
from kernelab.ops.softmax.cooperative import _finish_deferred
from kernelab.ops.softmax.exchange import (
    INTERPRETER_MAX_SPINS,
    MAX_CHUNKS_BLOCK,
    MAX_SPINS,
    _poll,
    _publish,
)
from kernelab.ops.softmax.primitives import _prefetch_to_l2
from kernelab.runtime import turn_words
from kernelab.runtime.tuner import compiled_occupancy, interpreting, resident_programs

# The tuner's candidates, measured in alternating pairs against the tuned library on the H200
# (softmax_paired_configs_v7_flat, one run; % of the library, which ran the grouped
# kernel's winners): bf16 c2048 one warp holding its input pairs, the output evict_first:
# 65K 101.5 %, 131K 100.7 %, 262K 100.8 % (without evict_first 101.0 / 100.4 / 100.6; with
# half of each chunk prefetched 100.2 / 99.0 / 97.9, not offered). fp32: c2048 two warps
# 102.9 / 101.1 / 98.8 % at 65K / 131K / 262K; c1024 one warp 102.0 / 100.8 / 97.0.
FLAT = {"path": "flat", "L2_AHEAD": 1}
CANDIDATES = {
    2: [
        {**FLAT, "CHUNK": 2048, "num_warps": 1, "PAIRS": True, "RECOMPUTE": True},
        {**FLAT, "CHUNK": 2048, "num_warps": 1, "PAIRS": True, "RECOMPUTE": True,
         "STREAM_STORE": True},
    ],
    4: [
        {**FLAT, "CHUNK": 2048, "num_warps": 2},
        {**FLAT, "CHUNK": 1024, "num_warps": 1},
    ],
}  # fmt: skip
# Offered on rows that pad to this many values or more (measured at 65K-262K), of at most this
# many chunks: the polled words per row grow with them (softmax.DEFERRED_MAX_CHUNKS), and a
# program that reads pairs compiles to 168 registers at 128 chunks (untimed past it).
SMALLEST_COLS = 65536
MOST_CHUNKS = {2: 128, 4: 256}


def candidates_for(n_cols: int, dtype) -> list[dict]:
    """The flat configs the long-row tuner ranks for rows of n_cols values of dtype: bf16 on
    rows of whole 2,048-value chunks (they read pairs: elsewhere they would hold fp32 exps in
    too many registers), fp32 on any row; none for fp16 or short rows."""
    itemsize = torch.empty((), dtype=dtype).element_size()
    if dtype not in (torch.bfloat16, torch.float32):
        return []
    if triton.next_power_of_2(n_cols) < SMALLEST_COLS:
        return []
    offered = []
    for config in CANDIDATES[itemsize]:
        n_chunks = triton.cdiv(n_cols, config["CHUNK"])
        whole = n_cols % config["CHUNK"] == 0
        if n_chunks <= MOST_CHUNKS[itemsize] and (whole or not config.get("PAIRS")):
            offered.append(dict(config))
    return offered


@triton.jit
def _turn_of_epoch(epoch):
    """The turn whose packed tag bit this call's words carry: epoch even -> turn 1 (bit 1),
    odd -> turn 5 (bit 0); exchange._turn_bit flips every four turns."""
    return 1 + 4 * (epoch % 2)


@triton.jit
def _chunk_of(unit, n_chunks, CHUNK: tl.constexpr):
    """The row, chunk and column offsets of one unit."""
    chunk = unit % n_chunks
    return unit // n_chunks, chunk, chunk * CHUNK + tl.arange(0, CHUNK)


@triton.jit(do_not_specialize=["n_programs"])
def _softmax_flat_kernel(
    x_ptr,
    out_ptr,
    words_ptr,
    n_rows,
    n_cols,
    x_row_stride,
    out_row_stride,
    n_chunks,
    n_programs,
    CHUNK: tl.constexpr,
    BLOCK_CHUNKS: tl.constexpr,
    FTZ: tl.constexpr,
    MAX_SPINS: tl.constexpr,
    L2_AHEAD: tl.constexpr = 0,
    L2_PART: tl.constexpr = 1,
    EVEN: tl.constexpr = False,
    PAIRS: tl.constexpr = False,
    RECOMPUTE: tl.constexpr = False,
    STREAM_STORE: tl.constexpr = False,
    PTX: tl.constexpr = True,
):
    pid = tl.program_id(0)
    n_units = n_rows * n_chunks
    epoch_ptr = words_ptr + n_units  # then the count of programs that ended
    epoch = tl.load(epoch_ptr, volatile=True)
    turn = _turn_of_epoch(epoch)
    row, chunk, cols = _chunk_of(pid, n_chunks, CHUNK)
    upcoming = _load_step(x_ptr, row, n_rows, n_cols, x_row_stride, cols, chunk, CHUNK, EVEN, PAIRS)
    if RECOMPUTE:
        held_e = tl.zeros([CHUNK // 2], dtype=tl.uint32)
    else:
        held_e = tl.zeros([CHUNK], dtype=tl.float32)
    held_max = tl.max(held_e.to(tl.float32), axis=0)
    held_row = row
    held_chunk = chunk
    healthy = True  # every wait so far ended with all peers' partials
    for unit in tl.range(pid, n_units, n_programs):
        row = unit // n_chunks
        chunk = unit % n_chunks
        if L2_AHEAD > 0:
            # L2_AHEAD rounds past the unit in registers: into L2, no registers held
            ahead = unit + (1 + L2_AHEAD) * n_programs
            _prefetch_to_l2(
                x_ptr, ahead // n_chunks, n_rows, n_cols, x_row_stride,
                (ahead % n_chunks) * CHUNK, CHUNK // L2_PART,
            )  # fmt: skip
        # the held unit's row words, polled before this unit's exps are taken (at the first
        # step the held unit is this one, whose word is not yet published: unused)
        previous = words_ptr + held_row * n_chunks
        first, second = _poll(previous, n_chunks, turn, BLOCK_CHUNKS, True)
        # the only read of the unit: CHUNK * itemsize, kept in registers
        if PAIRS:
            pairs = upcoming
        else:
            x = upcoming.to(tl.float32)
        next_row, next_chunk, next_cols = _chunk_of(unit + n_programs, n_chunks, CHUNK)
        upcoming = _load_step(
            x_ptr, next_row, n_rows, n_cols, x_row_stride, next_cols, next_chunk, CHUNK, EVEN,
            PAIRS,
        )  # fmt: skip
        if PAIRS:
            x = _unpaired(pairs)
            top = _max_of_words(pairs, PTX)
        else:
            top = _chunk_max(x)
        e, chunk_max, chunk_sum = _exps_and_sum(x, top, FTZ)
        _publish(words_ptr + row * n_chunks, chunk, turn, chunk_max, chunk_sum, True)
        if unit != pid:
            held_cols = held_chunk * CHUNK + tl.arange(0, CHUNK)
            spins, met = _finish_deferred(
                previous, first, second, n_chunks, turn, held_e, held_max, out_ptr, held_row,
                out_row_stride, held_cols, held_cols < n_cols, BLOCK_CHUNKS, MAX_SPINS,
                healthy, FTZ, True, EVEN, STREAM_STORE, RECOMPUTE,
            )  # fmt: skip
            healthy = healthy & met
        if RECOMPUTE:
            held_e = pairs
        else:
            held_e = e
        held_max = chunk_max
        held_row = row
        held_chunk = chunk
    # the last unit of this program (every program has one: n_programs <= n_units)
    last = words_ptr + held_row * n_chunks
    first, second = _poll(last, n_chunks, turn, BLOCK_CHUNKS, True)
    held_cols = held_chunk * CHUNK + tl.arange(0, CHUNK)
    _finish_deferred(
        last, first, second, n_chunks, turn, held_e, held_max, out_ptr, held_row,
        out_row_stride, held_cols, held_cols < n_cols, BLOCK_CHUNKS, MAX_SPINS, healthy, FTZ,
        True, EVEN, STREAM_STORE, RECOMPUTE,
    )  # fmt: skip
    # The last program to get here advances the epoch for the next call: each program read it
    # before this atomic (acq_rel orders that load first), and the next launch sees the store.
    ended = tl.atomic_add(epoch_ptr + 1, 1, sem="acq_rel", scope="gpu")
    if ended == n_programs - 1:
        tl.store(epoch_ptr + 1, 0)
        tl.store(epoch_ptr, epoch + 1)


def _setup(x2d, out, config: dict) -> tuple[dict, tuple, int]:
    """(launch kwargs, launch arguments but n_programs, units) of the flat kernel."""
    n_rows, n_cols = x2d.shape
    chunk = config["CHUNK"]
    n_chunks = triton.cdiv(n_cols, chunk)
    even = n_cols % chunk == 0
    pairs = (
        config.get("PAIRS", False)
        and even
        and x2d.dtype == torch.bfloat16
        and x2d.stride(0) % 2 == 0
        and x2d.data_ptr() % 4 == 0
    )
    kwargs = {
        "CHUNK": chunk,
        # one warp polls exactly this row length's words (cooperative.setup)
        "BLOCK_CHUNKS": max(2, triton.next_power_of_2(n_chunks)),
        "FTZ": not interpreting(),
        "MAX_SPINS": INTERPRETER_MAX_SPINS if interpreting() else MAX_SPINS,
        "num_warps": 1 if interpreting() else config["num_warps"],
        "num_stages": 1,
        # the L2 prefetch is inline PTX: the interpreter runs without it
        "L2_AHEAD": 0 if interpreting() else config.get("L2_AHEAD", 0),
        "L2_PART": config.get("L2_PART", 1),
        "EVEN": even,
        "PAIRS": pairs,
        "RECOMPUTE": config.get("RECOMPUTE", False) and pairs,
        "STREAM_STORE": config.get("STREAM_STORE", False),
        "PTX": not interpreting(),
    }
    if kwargs["num_warps"] > 1:
        kwargs["BLOCK_CHUNKS"] = max(MAX_CHUNKS_BLOCK, kwargs["BLOCK_CHUNKS"])
    n_units = n_rows * n_chunks
    # one word per unit, then the epoch and the count of ended programs
    words, _, _ = turn_words.exchange_words(x2d.device, "softmax.flat", (n_units + 2,), 0)
    args = (x2d, out, words, n_rows, n_cols, x2d.stride(0), out.stride(0), n_chunks)
    return kwargs, args, n_units


def _programs(x2d, kwargs: dict, args: tuple, n_units: int) -> int:
    """Every resident program, at most one per unit; 0 when fewer than a row's chunks fit (a
    row's units would then span more than two rounds, and the wait argument fails)."""
    n_chunks = args[-1]
    programs = min(n_units, resident_programs(_softmax_flat_kernel, (*args, 2), kwargs))
    return programs if programs >= n_chunks else 0


def launch(x2d, out, config: dict) -> bool:
    """Run the flat kernel; False when a row's programs cannot all be resident."""
    kwargs, args, n_units = _setup(x2d, out, config)
    programs = _programs(x2d, kwargs, args, n_units)
    if programs < 1:
        return False
    _softmax_flat_kernel[(programs,)](*args, programs, **kwargs)
    return True


def plan(x2d, config: dict) -> dict:
    """Registers, spills, programs per SM and the grid of the flat kernel compiled for x2d."""
    out = torch.empty_like(x2d)
    kwargs, args, n_units = _setup(x2d, out, config)
    per_sm, info = compiled_occupancy(_softmax_flat_kernel, x2d.device, (*args, 2), kwargs)
    programs = _programs(x2d, kwargs, args, n_units)
    return {**info, "per_sm": per_sm, "chunks_per_row": args[-1], "programs": programs}
