"""The deferred cooperative softmax with its poll a whole step ahead of its use (two-step lag).

Run in session 10 (`experiments/softmax_lagged_v1.json`): every configuration correct and
slower than the library's bf16 winner in the same run (65K 3.91-3.92 against 3.95, 131K
3.36-3.93 against 4.00, 262K 2.0-3.35 against 3.79). Refuted: hidden, the poll's wait moved
elsewhere (docs/notes/triton.md, thirteenth design).

Why (session 10, `experiments/softmax_ncu/bf16_131k_pairs_u2_source_sass.csv.xz`): in the
bf16 131K winner (c1024 l2a1, pairs in words, two steps per loop iteration), 44 % of all
warp-stall samples sit on five `SHF.R.U64 ..., 0x1f` instructions: the turn-bit test of the
polled partials, the first use of the volatile poll. The chunk's own loads (prefetched a step
ahead) account for about 2 %. So a step waits on the poll's L2 round trip, issued at the
step's start (EARLY_POLL) and needed once the row's exps are taken. bf16 makes twice the
steps per byte of fp32, so the wait weighs twice as much; halving the polled bytes (NARROW)
did not help because the round trip, not its bytes, is what is waited on.

This kernel finishes each row two steps after publishing its partials instead of one:

    step i:  poll turn i (row i-1, published by the peers a step ago; used next step)
             -> row i's exps and partials, publish turn i + 1
             -> finish row i - 2 from the words polled in step i - 1 (re-polling only if a
                peer was late)

so the poll has a whole step to arrive. The price: one more row of held exps (HELD_PAIRS
keeps both held rows as bf16 pairs in words, 16 registers each at c1024, rounding each exp
to bf16 once before the final multiply) and the polled words carried across a step.
Turn slots: a program at step i has seen every peer publish turn i - 1, so peers are at step
i - 2 or later and may still read turns i - 3 and i - 2 while it writes i + 1: eight slots per
group, and the packed word's one-bit tag flips every eight turns (_tag_turn maps turn t to
the library's every-four tag: ((t + 1) // 2 + 3) // 4 = (t + 7) // 8).

    PYTHONPATH=src python3 benchmarks/experiments/softmax_lagged.py --out $OUT

Each configuration is checked against the float64 reference (kernelab's check, 3 fresh
inputs) before it is timed cold beside the library's bf16 winners with a fixed config.
"""

from __future__ import annotations

import argparse
import functools
from pathlib import Path

import torch
import triton
import triton.language as tl

from kernelab.ops import softmax as lib
from kernelab.runtime.tuner import (
    compiled_occupancy,
    interpreting,
    resident_programs,
    sm_count,
)

SLOTS = tl.constexpr(8)
MAX_SPINS = 1 << 22


@triton.jit
def _tag_turn(turn):
    """The turn handed to the library's packed-word helpers so that their one-bit tag flips
    every SLOTS = 8 turns instead of every 4 (see the module doc)."""
    return (turn + 1) // 2


@triton.jit
def _paired(values):
    """fp32 values (memory order) rounded to bf16, two per 32-bit word (cvt.rn.bf16x2.f32)."""
    low, high = tl.split(tl.reshape(values, [values.shape[0] // 2, 2]))
    return tl.inline_asm_elementwise(
        "cvt.rn.bf16x2.f32 $0, $1, $2;", "=r,r,r", [high, low], dtype=tl.uint32, is_pure=True,
        pack=1,
    )  # fmt: skip


@triton.jit
def _held(e, HELD_PAIRS: tl.constexpr):
    if HELD_PAIRS:
        return _paired(e)
    else:
        return e


@triton.jit
def _values(held, HELD_PAIRS: tl.constexpr):
    if HELD_PAIRS:
        return lib._unpaired(held)
    else:
        return held


# n_rows and n_groups are not specialized on: the plan's one-row probe compiles the very
# binary the launch runs
@triton.jit(do_not_specialize=["n_rows", "n_groups"])
def _lagged_kernel(
    x_ptr, out_ptr, stats_ptr, n_rows, n_cols, x_row_stride, out_row_stride, n_chunks, n_groups,
    CHUNK: tl.constexpr, BLOCK_CHUNKS: tl.constexpr, MAX_SPINS: tl.constexpr,
    L2_AHEAD: tl.constexpr, PAIRS: tl.constexpr, HELD_PAIRS: tl.constexpr,
    UNROLL: tl.constexpr, PTX: tl.constexpr,
):  # fmt: skip
    # PTX: inline PTX allowed (the ftz exps, the pairs' max); off under the interpreter
    group = tl.program_id(0) // n_chunks
    chunk = tl.program_id(0) % n_chunks
    cols = chunk * CHUNK + tl.arange(0, CHUNK)
    mask = cols < n_cols  # rows of whole chunks (the launcher checks): never false
    upcoming = lib._load_step(
        x_ptr, group, n_rows, n_cols, x_row_stride, cols, chunk, CHUNK, True, PAIRS
    )
    zero_e = tl.zeros([CHUNK], dtype=tl.float32)
    held1 = _held(zero_e, HELD_PAIRS)  # row i - 1's exps
    held2 = _held(zero_e, HELD_PAIRS)  # row i - 2's exps
    c1 = tl.max(zero_e, axis=0)
    c2 = tl.max(zero_e, axis=0)
    polled = tl.zeros([BLOCK_CHUNKS], dtype=tl.int64)  # turn i - 1's words, polled last step
    iteration = 0
    healthy = True
    for row in tl.range(group, n_rows, n_groups, loop_unroll_factor=UNROLL):
        if L2_AHEAD > 0:
            ahead = row + (1 + L2_AHEAD) * n_groups
            lib._prefetch_to_l2(x_ptr, ahead, n_rows, n_cols, x_row_stride, chunk * CHUNK, CHUNK)
        # turn i (row i - 1), in slot (i - 1) % 8; used in the next step
        fresh, unused = lib._poll(
            stats_ptr + (group * SLOTS + (iteration + SLOTS - 1) % SLOTS) * n_chunks,
            n_chunks, _tag_turn(iteration), BLOCK_CHUNKS, True,
        )  # fmt: skip
        if PAIRS:
            x = lib._unpaired(upcoming)
            top = lib._max_of_words(upcoming, PTX)
        else:
            x = upcoming.to(tl.float32)
            top = lib._chunk_max(x)
        upcoming = lib._load_step(
            x_ptr, row + n_groups, n_rows, n_cols, x_row_stride, cols, chunk, CHUNK, True, PAIRS
        )
        e, c, s = lib._exps_and_sum(x, top, PTX)
        lib._publish(
            stats_ptr + (group * SLOTS + iteration % SLOTS) * n_chunks, chunk,
            _tag_turn(iteration + 1), c, s, True,
        )  # fmt: skip
        if iteration >= 2:
            # row i - 2 (turn i - 1, slot (i - 2) % 8), from the words polled a step ago
            spins, met = lib._finish_deferred(
                stats_ptr + (group * SLOTS + (iteration + SLOTS - 2) % SLOTS) * n_chunks,
                polled, polled, n_chunks, _tag_turn(iteration - 1), _values(held2, HELD_PAIRS),
                c2, out_ptr, row - 2 * n_groups, out_row_stride, cols, mask, BLOCK_CHUNKS,
                MAX_SPINS, healthy, PTX, True, True,
            )  # fmt: skip
            healthy = healthy & met
        held2 = held1
        c2 = c1
        held1 = _held(e, HELD_PAIRS)
        c1 = c
        polled = fresh
        iteration += 1
    if iteration >= 2:
        # row n - 2 (turn n - 1), from the last step's poll
        spins, met = lib._finish_deferred(
            stats_ptr + (group * SLOTS + (iteration + SLOTS - 2) % SLOTS) * n_chunks,
            polled, polled, n_chunks, _tag_turn(iteration - 1), _values(held2, HELD_PAIRS), c2,
            out_ptr, group + (iteration - 2) * n_groups, out_row_stride, cols, mask,
            BLOCK_CHUNKS, MAX_SPINS, healthy, PTX, True, True,
        )  # fmt: skip
        healthy = healthy & met
    # row n - 1 (turn n), polled now
    last = stats_ptr + (group * SLOTS + (iteration + SLOTS - 1) % SLOTS) * n_chunks
    fresh, unused = lib._poll(last, n_chunks, _tag_turn(iteration), BLOCK_CHUNKS, True)
    lib._finish_deferred(
        last, fresh, fresh, n_chunks, _tag_turn(iteration), _values(held1, HELD_PAIRS), c1,
        out_ptr, group + (iteration - 1) * n_groups, out_row_stride, cols, mask, BLOCK_CHUNKS,
        MAX_SPINS, healthy, PTX, True, True,
    )  # fmt: skip


def _setup(x, config: dict):
    n_rows, n_cols = x.shape
    chunk = config["CHUNK"]
    if not x.is_contiguous() or n_cols % chunk or x.dtype != torch.bfloat16:
        raise ValueError("contiguous bf16 rows of whole chunks only")
    n_chunks = n_cols // chunk
    out = torch.empty_like(x)
    gpu = not interpreting()
    kwargs = dict(
        CHUNK=chunk, BLOCK_CHUNKS=max(2, triton.next_power_of_2(n_chunks)),
        MAX_SPINS=MAX_SPINS if gpu else 4, L2_AHEAD=config.get("L2_AHEAD", 1) if gpu else 0,
        PAIRS=config.get("PAIRS", True), HELD_PAIRS=config.get("HELD_PAIRS", False),
        UNROLL=config.get("UNROLL", 1), PTX=gpu, num_warps=1, num_stages=1,
    )  # fmt: skip
    if config.get("maxnreg") and gpu:
        kwargs["maxnreg"] = config["maxnreg"]
    max_groups = max(1, min(n_rows, sm_count(x.device) * 32 // n_chunks))
    stats = torch.zeros((max_groups, SLOTS.value, n_chunks), device=x.device, dtype=torch.int64)
    args = (x, out, stats, n_rows, n_cols, x.stride(0), out.stride(0), n_chunks)
    return out, args, kwargs, n_chunks


def launch(x, config: dict):
    out, args, kwargs, n_chunks = _setup(x, config)
    resident = resident_programs(_lagged_kernel, (*args, 2), kwargs)
    n_groups = min(x.shape[0], resident // n_chunks)
    if n_groups < 1:
        raise ValueError("not resident")
    _lagged_kernel[(n_groups * n_chunks,)](*args, n_groups, **kwargs)
    return out


def plan(x, config: dict) -> dict:
    _, args, kwargs, n_chunks = _setup(x, config)
    per_sm, info = compiled_occupancy(_lagged_kernel, x.device, (*args, 2), kwargs)
    return {"per_sm": per_sm, **info, "n_chunks": n_chunks}


# Registers, compiled here (Triton 3.6, sm_90) at 64 / 128 / 256 chunks per row: fp32 held
# exps 166 / 182 / -; bf16 held pairs 133 / 165 / 186; under a cap of 128 they spill 24 /
# 40 / 152 bytes, of 144 8 bytes at 128 chunks. The H200's own compile (softmax_lagged_v1):
# held pairs 130 / 163 / 170 registers, 12 / 12 / 8 programs per SM (the driver's count).
CONFIGS = (
    {"CHUNK": 1024},
    {"CHUNK": 1024, "HELD_PAIRS": True},
    {"CHUNK": 1024, "HELD_PAIRS": True, "maxnreg": 144},
    {"CHUNK": 1024, "HELD_PAIRS": True, "maxnreg": 128},
)


def name_of(config: dict) -> str:
    held = " held-pairs" if config.get("HELD_PAIRS") else ""
    cap = f" r{config['maxnreg']}" if config.get("maxnreg") else ""
    return f"lag2 c{config['CHUNK']}{held}{cap}"


def main(argv=None) -> int:
    from softmax_gluon_rows import run_experiment  # this folder's script

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("."))
    parser.add_argument("--cols", default="65536,131072,262144")
    args = parser.parse_args(argv)
    fast = {"path": "cooperative", "num_warps": 1, "L2_AHEAD": 1, "DEFER": True}
    fast.update(PACKED=True, EARLY_POLL=True)

    def entries_for(x) -> list:
        # the library's measured bf16 winners, fixed (no tuning), beside each lagged config
        reference = {**fast, "CHUNK": 1024, **lib.PAIRED_STEPS}
        if x.shape[1] // 1024 > lib.PAIRED_STEPS_MAX_CHUNKS:
            reference = {**fast, "CHUNK": 1024, "maxnreg": 128}
        entries = [("library winner", functools.partial(lib.softmax, config=reference), None)]
        for config in CONFIGS:
            if x.shape[1] % config["CHUNK"]:
                continue
            fn = functools.partial(launch, config=config)
            entries.append((name_of(config), fn, functools.partial(plan, x[:1], config)))
        return entries

    return run_experiment(args.out, "bf16", args.cols, entries_for, "softmax_lagged.json")


if __name__ == "__main__":
    raise SystemExit(main())
