"""The quantized GEMVs' launches: the m = 1 late forms' plan (launches.json through
launches.py, K split by ops/gemv's rule), the step-summed split-K launch above m = 1 (ops/gemv's
heuristic plan), and the planned dispatches that replay them (runtime.launch_plans).
__init__.py checks a call's tensors, then calls a dispatch here.
"""

from __future__ import annotations

import torch
import triton

from kernelab.ops.gemv import plan, sm_count, split_k
from kernelab.ops.gemv.split_k import sum_splits_kernel
from kernelab.ops.quant_gemv import launches
from kernelab.ops.quant_gemv.kernels import int4_kernel, per_channel_kernel
from kernelab.ops.quant_gemv.late import int4_late_kernel, per_channel_late_kernel
from kernelab.runtime.launch_plans import keep, planned
from kernelab.runtime.tuner import interpreting
from kernelab.spec.decode import INT4_SYMMETRIC_ZERO

# 2x the weights of a bf16 step: each half (even, odd columns) then holds as many fp32 values
# as a bf16 tile (64 a thread at m = 1), half the bytes of W a step
INT4_K_SCALE = 2
INTERPRETER_TILE = (4, 16)  # BLOCK_N, BLOCK_K of the late forms on the interpreter


def late_plan(kind: str, n: int, k: int, *, group: int | None = None, sms: int | None = None,
              interpreter: bool = False, launch: dict | None = None) -> dict | None:  # fmt: skip
    """The m = 1 late form's launch: `launch` (forced: the sweep's candidates, kept as given) or
    launches.json's (tiles shrunk to INTERPRETER_TILE on the interpreter), BLOCK_K rounded to
    whole groups for int4, K split by ops/gemv's rule; None where the table has no entry."""
    chosen = dict(launch) if launch is not None else launches.lookup(kind, 1, n, k)
    if chosen is None:
        return None
    launches.check_launch(chosen)
    block_n, block_k = chosen["BLOCK_N"], chosen["BLOCK_K"]
    if interpreter and launch is None:
        block_n, block_k = INTERPRETER_TILE
    if group is not None:
        block_k = max(block_k // group, 1) * group
    wanted = chosen["split"] if chosen["split"] != "heuristic" else None
    split, k_per_split = split_k(1, n, k, 1, block_n, block_k, sms, wanted=wanted,
                                 interpreter=interpreter)  # fmt: skip
    return {**chosen, "BLOCK_N": block_n, "BLOCK_K": block_k, "split": split,
            "k_per_split": k_per_split}  # fmt: skip


def _sms(x) -> int | None:
    return None if interpreting() or x.device.type != "cuda" else sm_count(x.device.index or 0)


def _sum_splits(out, y, split: int) -> None:
    count = y.numel()
    block = 64 if interpreting() else 1024
    sum_splits_kernel[(triton.cdiv(count, block),)](out, y, count, SPLIT=split, BLOCK=block)


def _late(kernel, x, n, k, y, p, args, strides, constants) -> None:
    """One m = 1 late launch into y (through fp32 partials when K is split)."""
    split = p["split"]
    out = y if split == 1 else torch.empty((split, 1, n), dtype=torch.float32, device=y.device)
    keep(out)  # every split writes its whole slice before the sum reads it
    kernel[(triton.cdiv(n, p["BLOCK_N"]), split)](
        x, *args, out, n, k, p["k_per_split"], *strides, n if split > 1 else 0,
        BLOCK_N=p["BLOCK_N"], X_AS_TILE=p["X_AS_TILE"], STAGES=p["num_stages"],
        num_warps=p["num_warps"], num_stages=p["num_stages"], **constants,
    )  # fmt: skip
    if split > 1:
        _sum_splits(out, y, split)


def _launch(kernel, x, y, n, k, k_scale, args, strides, constants=None) -> None:
    """The step-summed split-K launch (m > 1) into y, the splits summed."""
    m = x.shape[0]
    interp = interpreting()
    p = plan(m, n, k, _sms(x), interpreter=interp, k_scale=k_scale)
    split = p["split"]
    out = y if split == 1 else torch.empty((split, m, n), dtype=torch.float32, device=x.device)
    keep(out)
    grid = (triton.cdiv(n, p["BLOCK_N"]), split, triton.cdiv(m, p["BLOCK_M"]))
    kernel[grid](x, *args, out, m, n, k, p["k_per_split"], x.stride(0), x.stride(1), *strides,
                 m * n if split > 1 else 0, n, BLOCK_M=p["BLOCK_M"], BLOCK_N=p["BLOCK_N"],
                 BLOCK_K=p["BLOCK_K"], USE_DOT=p["USE_DOT"], FP32_DOT=interp, num_warps=4,
                 **(constants or {}))  # fmt: skip
    if split > 1:
        _sum_splits(out, y, split)


@planned("triton.quant_gemv", tensors=4, untuned=(True, None))
def per_channel_dispatch(x, q, scale, y, int8: bool, launch) -> None:
    n, k = q.shape
    late = x.shape[0] == 1 and late_plan("int8" if int8 else "fp8", n, k, sms=_sms(x),
                                         interpreter=interpreting(), launch=launch)  # fmt: skip
    if late:
        _late(per_channel_late_kernel, x, n, k, y, late, (q, scale),
              (x.stride(1), q.stride(0), q.stride(1)), {"INT8": int8, "BLOCK_K": late["BLOCK_K"]})  # fmt: skip
    else:
        _launch(per_channel_kernel, x, y, n, k, 1, (q, scale), (q.stride(0), q.stride(1)))


PLANS = per_channel_dispatch.plans  # the launch plans (tests read and reset them)


@planned(PLANS, tensors=5, untuned=None)
def int4_dispatch(x, packed, scales, z, y, group: int, has_zeros: bool, late: bool,
                   launch) -> None:  # fmt: skip
    """x is x's row as int32 words where `late` (the m = 1 form), else x itself."""
    n, k = packed.shape[0], 2 * packed.shape[1]
    constants = {"GROUP": group, "HAS_ZEROS": has_zeros, "ZERO": INT4_SYMMETRIC_ZERO}
    p = late and late_plan("int4", n, k, group=group, sms=_sms(x), interpreter=interpreting(),
                           launch=None if launch is None else dict(launch))  # fmt: skip
    if p:
        strides = (packed.stride(0), scales.stride(0), scales.stride(1), z.stride(0), z.stride(1))
        constants.update(X_BF16=y.dtype == torch.bfloat16, GROUPS=p["BLOCK_K"] // group)
        _late(int4_late_kernel, x, n, k, y, p, (packed, scales, z), strides, constants)
        return
    if late:  # no table entry: the step-summed path takes x's row as a [1, k] tensor
        x = x.view(y.dtype)[None, :]
    strides = (packed.stride(0), packed.stride(1), scales.stride(0), scales.stride(1),
               z.stride(0), z.stride(1))  # fmt: skip
    _launch(int4_kernel, x, y, n, k, INT4_K_SCALE, (packed, scales, z), strides, constants)
