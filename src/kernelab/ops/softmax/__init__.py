"""Fused softmax over the last dimension of a 2-D tensor, for any row length.

softmax(x)[r, c] = exp(x[r, c] - max_r) / sum_c' exp(x[r, c'] - max_r), computed in fp32
whatever the input dtype (fp32, bf16, fp16); the output has the input's dtype and shape.
The ideal traffic is one read and one write (2 x rows x cols x itemsize bytes); every path is
judged by how close it stays to that at HBM bandwidth. Read the folder in this order:

    teaching.py      the tutorial kernel: one row per program, the whole row in registers
    rows.py          rows that fit in registers (cols <= SINGLE_PASS_MAX_COLS): tuned row tiles
    long_rows.py     the long-row tuner, ranking the split-row paths below per row length
    cooperative.py   a row split over programs that exchange partials (exchange.py, chunks.py)
    flat.py          the deferred cooperative kernel over every resident program, no row groups
    l2.py            two passes per row, the second from L2
    two_pass.py      two launches (stats, normalize): the interpreter's path and the fallback
    shared.py shared_split.py held.py   Gluon kernels that hold rows in shared memory (Hopper)

docs/ops/softmax.md gives each path's reason and its measured figure with its record.
Numerics: the max is subtracted before exp, so huge inputs (1e4) are safe; a row of only -inf
gives NaN (exp(-inf - -inf)), as torch.softmax does; -inf entries get probability 0.
"""

from __future__ import annotations

import torch
import triton

from kernelab.ops.softmax import long_rows, rows
from kernelab.ops.softmax.cooperative import occupancy as cooperative_occupancy
from kernelab.ops.softmax.long_rows import (
    long_row_candidates,
    long_row_candidates_for,
    long_row_plan,
)
from kernelab.ops.softmax.rows import row_candidates_for, single_pass_candidates_for
from kernelab.runtime.launch_plans import planned
from kernelab.runtime.tuner import interpreting, row_tile_candidates

__all__ = [  # what benchmarks, the lab and tests read besides softmax()
    "SINGLE_PASS_MAX_COLS", "choose_path", "config_for", "cooperative_occupancy",
    "long_row_candidates", "long_row_candidates_for", "long_row_plan",
    "row_candidates_for", "row_tile_candidates", "single_pass_candidates_for", "softmax",
]  # fmt: skip

SUPPORTED_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
# Rows up to this many values take the register row tile (rows.py); longer ones the long-row
# tuner (long_rows.py).
SINGLE_PASS_MAX_COLS = 16384


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
        config = rows.TUNED.get(rows.tuner_key(x2d))
        if config is None and not interpreting() and x2d.device.type == "cuda":
            config = single_pass_candidates_for(x2d)[0]
        tile = config or row_tile_candidates(block_n)[0]
        return {"path": path, **tile, "tuner": "softmax.rows"}
    if path == "two-pass":
        return {**long_rows.path_default("two-pass", x.dtype), "tuner": None}
    config = long_rows.TUNED.get(long_rows.tuner_key(x2d))
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
    # planned (runtime.launch_plans.planned): the tuned choice keyed by the tensors alone, a
    # forced one by its options as well
    _dispatch(x2d, out, single_pass_max_cols, chunk_cols, long_rows, config)
    return out


@planned("triton.softmax", tensors=2, untuned=(None, None, None, None))
def _dispatch(x2d, out, single_pass_max_cols, chunk_cols, long_row_path, config) -> None:
    """Launch the path softmax() chose for x2d into out (the options as softmax() takes them)."""
    path = choose_path(x2d.shape[1], single_pass_max_cols=single_pass_max_cols)
    forced = long_row_path or (config or {}).get("path")
    if forced is None and config is not None and path != "single-pass":
        forced = "cooperative"  # the configs of cooperative_candidates carry no path
    if forced is None and path == "single-pass":
        rows.launch(x2d, out, config)
        return
    if forced is not None:
        config = {**(config or long_rows.path_default(forced, x2d.dtype)), "path": forced}
    elif path == "two-pass":
        config = long_rows.path_default("two-pass", x2d.dtype)
    if chunk_cols is not None:
        config = {**(config or long_rows.path_default("cooperative", x2d.dtype))}
        config["CHUNK"] = triton.next_power_of_2(chunk_cols)
    long_rows.launch(x2d, out, config)


PLANS = _dispatch.plans  # the launch plans (tests read and reset them)
