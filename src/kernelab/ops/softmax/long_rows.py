"""The long-row tuner: rows longer than the single pass holds (cols > SINGLE_PASS_MAX_COLS)
go to one tuner, keyed by the padded row length and dtype, that ranks every path's
configurations (each naming its kernel in "path"). The measured winner for a row length goes
first (winners.json), so the untuned default is the one that won on the H200.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
import triton

from kernelab.ops.softmax import cooperative, l2, rows, two_pass
from kernelab.ops.softmax import flat as softmax_flat
from kernelab.ops.softmax import held as softmax_held
from kernelab.ops.softmax import shared as softmax_shared
from kernelab.ops.softmax import shared_split as softmax_shared_split
from kernelab.runtime.tuner import compiled_occupancy, interpreting, tuned

# Rows of up to this many (padded) values can also run the single-pass row tile, one row per
# program at 32 warps x 32 values per thread (the anchor's one-row kernel: 4.14 TB/s fp32 at
# 32,768 columns, 3.11 bf16).
SINGLE_PASS_LONG_MAX_COLS = 32768
TUNED: dict[tuple, dict] = {}


def single_pass_long_candidate() -> dict:
    """One row per program in registers, 32 warps: for rows up to SINGLE_PASS_LONG_MAX_COLS."""
    return {"path": "single-pass", "ROWS": 1, "num_warps": 32, "num_stages": 1, "PERSISTENT": False}


def _winners(table: str) -> dict:
    """{(itemsize, padded columns): identity of the winning config} from winners.json."""
    return {(w["itemsize"], w["cols"]): identity(w["config"]) for w in WINNERS[table]}


def measured_winner(itemsize: int, block_n: int, table: str = "long_rows"):
    """The identity of the measured winner at this row length (rows past the longest measured
    take the longest's winner), or None."""
    winners = _winners(table)
    if (itemsize, block_n) in winners:
        return winners[(itemsize, block_n)]
    longest = max(cols for size, cols in _winners("long_rows") if size == itemsize)
    if block_n > longest:
        return winners.get((itemsize, longest))
    return None


def identity(config: dict) -> tuple:
    """What winners.json names a long-row candidate by: path, CHUNK, DEFER, L2_AHEAD,
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


WINNERS = json.loads((Path(__file__).parent / "winners.json").read_text())
MEASURED_WINNERS = _winners("long_rows")


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
        for c in cooperative.candidates(dtype)
        if cooperative.offered(c, n_cols, itemsize)
    ]
    if block_n <= SINGLE_PASS_LONG_MAX_COLS:
        candidates.append(single_pass_long_candidate())
    if block_n * itemsize <= l2.L2_ROWS_MAX_BYTES:
        candidates += l2.row_candidates(dtype)
    candidates += [c for c in l2.split_candidates(dtype) if n_cols > c["SLICE"]]
    candidates += softmax_flat.candidates_for(n_cols, dtype)
    winner = measured_winner(itemsize, block_n)
    first = [c for c in candidates if winner and identity(c) == winner][:1]
    if winner and not first:
        # a winner that reads pairs is offered on whole chunks only
        plain = measured_winner(itemsize, block_n, "partial_chunks")
        first = [c for c in candidates if plain and identity(c) == plain][:1]
    return first + [c for c in candidates if c not in first]


def path_default(path: str, dtype) -> dict:
    """The first configuration of one long-row path (what a forced path runs untuned)."""
    if path == "cooperative":
        return {"path": path, **cooperative.candidates(dtype)[0]}
    if path == "two-pass":
        chunk = (
            two_pass.INTERPRETER_CHUNK
            if interpreting()
            else cooperative.candidates(dtype)[0]["CHUNK"]
        )
        return {"path": path, "CHUNK": chunk}
    if path == "l2-rows":
        return l2.row_candidates(dtype)[0]
    if path == "l2-split":
        return l2.split_candidates(dtype)[0]
    if path == "single-pass":
        return single_pass_long_candidate()
    if path == "held":
        return dict(softmax_held.CONFIGS[0])
    if path == "flat":
        itemsize = torch.empty((), dtype=dtype).element_size()
        return dict(softmax_flat.CANDIDATES[4 if itemsize == 4 else 2][0])
    raise ValueError(f"unknown long-row path {path!r}")


def launch_one(x2d, out, config: dict) -> bool:
    """Launch one long-row configuration; False when it cannot run here (not resident)."""
    path = config["path"]
    if path == "single-pass":
        rows.launch(x2d, out, config)
    elif path == "cooperative":
        return cooperative.launch(x2d, out, config)
    elif path in l2.L2_LIVE_SLICES:
        return l2.launch(x2d, out, config)
    elif path == "two-pass":
        two_pass.launch(x2d, out, config["CHUNK"])
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
        return {"path": path, **cooperative.occupancy(x2d, config)}
    if path == "held" and config in softmax_held.candidates_for(x2d):
        return {"path": path, **softmax_held.plan(x2d, config)}
    if path == "flat":
        return {"path": path, **softmax_flat.plan(x2d, config)}
    if path not in l2.L2_LIVE_SLICES:
        return {"path": path}
    out = torch.empty_like(x2d)
    kwargs, args, n_slices = l2.setup(x2d, out, config)
    per_sm, info = compiled_occupancy(l2._softmax_l2_kernel, x2d.device, (*args, 2), kwargs)
    _, plan = l2.groups(x2d, config, kwargs, args, n_slices)
    return {"path": path, **info, "per_sm": per_sm, **plan}


def tuner_key(x2d) -> tuple:
    block_n = triton.next_power_of_2(x2d.shape[1])
    return ("softmax.long_rows", block_n, x2d.dtype, x2d.device.index, rows.shared_offers(x2d))


# Where a Gluon kernel's config (shared_split.py, held.py) is the measured winner (the
# "gluon" table of winners.json): it goes first among the long-row candidates, the untuned
# default. The configs are compared whole (they are the Gluon modules' CONFIGS).
GLUON_WINNERS = {(w["itemsize"], w["cols"]): w["config"] for w in WINNERS["gluon"]}


def gluon_winner_first(candidates: list[dict], itemsize: int, n_cols: int) -> list[dict]:
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
    return gluon_winner_first(candidates, x2d.element_size(), x2d.shape[1])


def launch(x2d, out, config: dict | None) -> None:
    """Run the given long-row configuration, else the tuned one; the two-pass kernel takes
    over whenever the chosen one cannot be resident."""
    if config is None:

        def run(c: dict) -> None:
            if not launch_one(x2d, out, c):
                two_pass.launch(x2d, out, path_default("two-pass", x2d.dtype)["CHUNK"])

        candidates = long_row_candidates_for(x2d)
        config = tuned(TUNED, tuner_key(x2d), run, candidates, nbytes=rows.nbytes(x2d))
    if not launch_one(x2d, out, config):
        chunk = config.get("CHUNK") or path_default("two-pass", x2d.dtype)["CHUNK"]
        two_pass.launch(x2d, out, chunk)
