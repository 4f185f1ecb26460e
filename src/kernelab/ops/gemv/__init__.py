"""Decode GEMV / skinny GEMM, y[m, n] = x[m, k] @ W[n, k]^T for m <= 64: the public entry.

teaching.py is the kernel to read first; split_k.py is the fast path (all rows of x per W
tile, K split when the column blocks cannot fill the GPU, an atomic-free second pass);
roofline_walk.py says where the op sits against the roofline as m grows. The launch (tiles,
kernel form, warps, pipeline stages, K split) comes from tiles.json per itemsize, batch bucket
and, where one was measured, exact weight shape (tiles.py). An entry is a measured winner only
where its status says "measured" and it names its record under benchmarks/results/
(benchmarks/gemv_tiles.py sweeps the candidates and proposes the entries); the others are
GPU_TILES below, starting points derived from register and occupancy arithmetic.

A call launches through kernelab.runtime.launch_plans: the plan, the table lookup, the K split
and Triton's argument binding run on the first calls of a signature (shapes, strides, dtypes,
alignment, stream; a pinned launch's dict too), later calls replay the compiled kernels.
"""

from __future__ import annotations

import functools

import torch
import triton

from kernelab.errors import KernelabError
from kernelab.ops.gemv import tiles
from kernelab.ops.gemv.split_k import gemv_split_kernel, sum_splits_kernel
from kernelab.runtime.launch_plans import keep, planned
from kernelab.runtime.tuner import interpreting

SUPPORTED_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
MAX_M = 64  # the decode batches this path is for; larger m is a GEMM (triton.matmul)

# m -> (BLOCK_M, BLOCK_N, BLOCK_K, use tl.dot): at most 8192 products per program in the
# broadcast form (64 fp32 values a thread at 4 warps); tensor cores from 16 rows on. The
# table's "derived, not measured" entries hold these; the quantized GEMVs and the fused
# gate/up GEMV, whose kernels the sweep does not time, plan from them directly.
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


def _validate(x, w) -> None:
    if x.dim() != 2 or w.dim() != 2 or x.shape[1] != w.shape[1]:
        raise KernelabError(f"gemv needs x[m, k] and w[n, k], got {tuple(x.shape)} and "
                            f"{tuple(w.shape)}")  # fmt: skip
    if x.dtype != w.dtype or x.dtype not in SUPPORTED_DTYPES:
        raise KernelabError(f"gemv needs x and w of one dtype among fp32, bf16, fp16, got "
                            f"{x.dtype} and {w.dtype}")  # fmt: skip
    if x.shape[0] > MAX_M:
        raise KernelabError(f"gemv is the decode path for m <= {MAX_M}, got m = {x.shape[0]}; "
                            "use triton.matmul")  # fmt: skip
    if x.device != w.device:
        raise KernelabError(f"gemv needs x and w on one device, got {x.device} and {w.device}")


def _check_form(launch: dict) -> None:
    """A pinned launch's kernel form, refused in one line before anything launches."""
    late, use_dot = launch.get("LATE_SUM", False), launch["USE_DOT"]
    if late and use_dot:
        raise KernelabError("gemv: LATE_SUM is a form of the broadcast product, not of tl.dot")
    if launch.get("X_AS_TILE", False) and not (late and launch["BLOCK_M"] == 1):
        raise KernelabError("gemv: X_AS_TILE is a form of LATE_SUM at BLOCK_M = 1")


def gemv(x, w, *, launch: dict | None = None):
    """x[m, k] @ w[n, k]^T -> y[m, n] in x's dtype, fp32 accumulation; any strides.

    launch: a plan() dict to use instead of the table's (the tests and the tile sweep pin
    every form).
    """
    _validate(x, w)
    (m, k), n = x.shape, w.shape[0]
    y = torch.empty((m, n), dtype=x.dtype, device=x.device)
    if m == 0 or n == 0:
        return y
    if k == 0:
        return y.zero_()  # an empty sum
    if launch is not None:
        _check_form(launch)
    # planned (launch_plans): the table's launch is keyed by the tensors alone, a pinned one
    # by its dict as well (frozen), so every form the sweep times replays its own plan
    _planned(x, w, y, launch)
    return y


@planned("triton.gemv", tensors=3, untuned=(None,))
def _planned(x, w, y, launch: dict | None) -> None:
    """The launches of one call: the table's plan (tiles.load_table(), tiles.lookup) or the
    pinned `launch`; the K split's second kernel sums the fp32 workspace into y."""
    (m, k), n = x.shape, w.shape[0]
    interp = interpreting()
    if launch is None:
        sms = None if interp or x.device.type != "cuda" else sm_count(x.device.index or 0)
        launch = plan(m, n, k, sms, interpreter=interp, itemsize=x.element_size())
    late, use_dot = launch.get("LATE_SUM", False), launch["USE_DOT"]
    stages = launch.get("num_stages", 3 if use_dot else 1)
    split = launch["split"]
    out = y
    if split > 1:
        # scratch: the first kernel writes every [split, m, n] entry before the second reads it
        out = torch.empty((split, m, n), dtype=torch.float32, device=x.device)
        keep(out)
    grid = (triton.cdiv(n, launch["BLOCK_N"]), split, triton.cdiv(m, launch["BLOCK_M"]))
    gemv_split_kernel[grid](
        x, w, out, m, n, k, launch["k_per_split"], x.stride(0), x.stride(1), w.stride(0),
        w.stride(1), m * n if split > 1 else 0, n, BLOCK_M=launch["BLOCK_M"],
        BLOCK_N=launch["BLOCK_N"], BLOCK_K=launch["BLOCK_K"], USE_DOT=use_dot,
        IEEE=x.dtype == torch.float32 or interp, LATE_SUM=late, STAGES=stages,
        X_AS_TILE=launch.get("X_AS_TILE", False),
        num_warps=launch.get("num_warps", 4), num_stages=stages,
    )  # fmt: skip
    if split > 1:
        block = 64 if interp else 1024
        sum_splits_kernel[(triton.cdiv(m * n, block),)](out, y, m * n, SPLIT=split, BLOCK=block)


PLANS = _planned.plans  # the launch plans (tests read and reset them)
