"""Decode GEMV / skinny GEMM, y[m, n] = x[m, k] @ W[n, k]^T for m <= 64: the public entry.

teaching.py is the kernel to read first; split_k.py is the fast path (all rows of x per W
tile, K split when the column blocks cannot fill the GPU, an atomic-free second pass);
roofline_walk.py says where the op sits against the roofline as m grows. The launch (tiles,
kernel form, warps, pipeline stages, K split) comes from tiles.json per itemsize, batch bucket
and, where one was measured, exact weight shape (tiles.py). An entry is a measured winner only
where its status says "measured" and it names its record under benchmarks/results/
(benchmarks/gemv_tiles.py sweeps the candidates and proposes the entries); the others are
GPU_TILES (planning.py), starting points derived from register and occupancy arithmetic.

A call launches through kernelab.runtime.launch_plans: the plan, the table lookup, the K split
and Triton's argument binding run on the first calls of a signature (shapes, strides, dtypes,
alignment, stream; a pinned launch's dict too), later calls replay the compiled kernels.

planning.py holds plan() and the split rule; this file checks a call and launches it.
"""

from __future__ import annotations

import torch
import triton

from kernelab.errors import KernelabError
from kernelab.ops.gemv import planning
from kernelab.ops.gemv.split_k import gemv_split_kernel, sum_splits_kernel
from kernelab.runtime.launch_plans import keep, planned
from kernelab.runtime.tuner import interpreting

# bound after the imports: importing the kernels' module split_k.py sets the package's
# attribute split_k to that module, which the rule's function of the same name must replace
GPU_TILES, INTERPRETER_TILE = planning.GPU_TILES, planning.INTERPRETER_TILE
PROGRAMS_PER_SM, heuristic_launch = planning.PROGRAMS_PER_SM, planning.heuristic_launch
plan, sm_count, split_k = planning.plan, planning.sm_count, planning.split_k

# the entry and its plan, as the decode ops, the tile sweep and the tests import them
__all__ = ["GPU_TILES", "INTERPRETER_TILE", "MAX_M", "PLANS", "PROGRAMS_PER_SM",
           "SUPPORTED_DTYPES", "gemv", "heuristic_launch", "plan", "sm_count", "split_k"]  # fmt: skip

SUPPORTED_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
MAX_M = 64  # the decode batches this path is for; larger m is a GEMM (triton.matmul)


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
