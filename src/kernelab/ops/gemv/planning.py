"""The GEMV's launch for one shape: tiles, kernel form, warps, stages and the K split.

plan() takes the launch from the tile table (tiles.json through tiles.py) per itemsize, batch
bucket and, where one was measured, exact weight shape; GPU_TILES, derived from register and
occupancy arithmetic, where the table has no entry; and splits K so the column blocks fill
the GPU (split_k). The quantized GEMVs and the fused gate/up GEMV plan with it too.
"""

from __future__ import annotations

import functools

import torch
import triton

from kernelab.ops.gemv import tiles

# m -> (BLOCK_M, BLOCK_N, BLOCK_K, use tl.dot): at most 8192 products per program in the
# broadcast form (64 fp32 values a thread at 4 warps); tensor cores from 16 rows on. The
# table's "derived, not measured" entries hold these; the quantized GEMVs and the fused
# gate/up GEMV plan from them above m = 1 (their m = 1 launches have tables of their own).
GPU_TILES = {1: (1, 64, 128, False), 2: (2, 64, 64, False), 4: (4, 32, 64, False),
             8: (8, 32, 32, False), 16: (16, 64, 128, True), 32: (32, 64, 128, True),
             64: (64, 64, 64, True)}  # fmt: skip
PROGRAMS_PER_SM = 4  # enough W bytes in flight per SM to cover DRAM latency
MIN_K_STEPS_PER_SPLIT = 4  # a split shorter than this spends its time on the prologue
MAX_SPLIT = 32  # bounds the reduction kernel's unrolled loop and the fp32 workspace
INTERPRETER_TILE = (16, 16)  # BLOCK_N, BLOCK_K: several column blocks and splits at tiny shapes


@functools.cache
def sm_count(device_index: int) -> int:
    return torch.cuda.get_device_properties(device_index).multi_processor_count


def heuristic_launch(m: int) -> dict:
    """GPU_TILES' launch for a batch of m: 4 warps, the dot form's K loop pipelined in 3
    stages (Triton's default), the broadcast forms' not, K split by the fill rule."""
    bucket = min(b for b in GPU_TILES if b >= m)
    block_m, block_n, block_k, use_dot = GPU_TILES[bucket]
    return {"BLOCK_M": block_m, "BLOCK_N": block_n, "BLOCK_K": block_k, "USE_DOT": use_dot,
            "LATE_SUM": False, "num_warps": 4, "num_stages": 3 if use_dot else 1,
            "split": "heuristic"}  # fmt: skip


def split_k(m: int, n: int, k: int, block_m: int, block_n: int, block_k: int, sms: int | None,
            *, wanted: int | None = None, programs_per_sm: int = PROGRAMS_PER_SM,
            interpreter: bool = False) -> tuple[int, int]:  # fmt: skip
    """(split, k_per_split): `wanted` slices of K (None: enough programs for programs_per_sm
    a SM, or three slices a column block on the interpreter), at least MIN_K_STEPS_PER_SPLIT
    steps each on a GPU and at most MAX_SPLIT; k_per_split a multiple of block_k."""
    programs = triton.cdiv(n, block_n) * triton.cdiv(m, block_m)
    if wanted is None:
        target = programs_per_sm * sms if sms else 3 * programs
        wanted = target // programs
    max_split = max(1, k // (block_k * (1 if interpreter else MIN_K_STEPS_PER_SPLIT)))
    split = max(1, min(wanted, max_split, MAX_SPLIT))
    k_per_split = triton.cdiv(triton.cdiv(k, split), block_k) * block_k
    return triton.cdiv(k, k_per_split), k_per_split


def plan(m: int, n: int, k: int, sms: int | None, *, interpreter: bool = False,
         k_scale: int = 1, itemsize: int | None = None, table: dict | None = None) -> dict:  # fmt: skip
    """The launch parameters for one shape on a GPU of `sms` SMs (None: the interpreter, which
    splits K in three where it can so the tests see the split path): tiles, kernel form
    (tl.dot, LATE_SUM), warps, pipeline stages, K split.

    itemsize: bytes of an element of x and W; the launch then comes from the tile table
    (`table`, default tiles.json; tiles.lookup), GPU_TILES where it has no entry. None: GPU_TILES.
    On the interpreter the entry's form is kept and its tiles shrink to INTERPRETER_TILE.
    k_scale widens BLOCK_K for weights narrower than 2 bytes (4 for int4: the same bytes of W
    per step as bf16)."""
    entry = None
    if itemsize is not None:
        entry = tiles.lookup(table if table is not None else tiles.load_table(), itemsize, m, n, k)
    launch = dict(entry["launch"]) if entry else heuristic_launch(m)
    block_m, block_n, block_k = launch["BLOCK_M"], launch["BLOCK_N"], launch["BLOCK_K"] * k_scale
    if interpreter:
        block_n, block_k = INTERPRETER_TILE
        block_m = min(block_m, 16)
    measured = launch["split"] if launch["split"] != "heuristic" and not interpreter else None
    split, k_per_split = split_k(m, n, k, block_m, block_n, block_k, sms, wanted=measured,
                                 programs_per_sm=launch.get("programs_per_sm", PROGRAMS_PER_SM),
                                 interpreter=interpreter)  # fmt: skip
    return {"BLOCK_M": block_m, "BLOCK_N": block_n, "BLOCK_K": block_k,
            "USE_DOT": launch["USE_DOT"], "LATE_SUM": launch["LATE_SUM"],
            "X_AS_TILE": launch.get("X_AS_TILE", False),
            "num_warps": launch["num_warps"], "num_stages": launch["num_stages"],
            "split": split, "k_per_split": k_per_split}  # fmt: skip
