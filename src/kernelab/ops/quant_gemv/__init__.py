"""Weight-only quantized decode GEMVs: y[m, n] = x[m, k] @ dequant(W)[n, k]^T, public entry.

teaching.py (int8, one program per column block) is the kernel to read first; kernels.py holds
the split-K paths that dequantize int8, int4 (group scales, symmetric or with zero points)
and fp8 e4m3 in registers, step-summed (m > 1); late.py the m = 1 forms, late-summed (no
reduction inside the K loop); packing.py the formats and their float64 references. m = 1
launches from launches.json (launches.py: derived, not measured, until sweep.py's candidates
are timed on a GPU); m > 1 from the GEMV's heuristic (ops/gemv.plan without an itemsize,
BLOCK_K doubled for int4: see INT4_K_SCALE). Calls replay their launches through
runtime.launch_plans (planned) instead of Triton's front door.
"""

from __future__ import annotations

import torch
import triton

from kernelab.errors import KernelabError
from kernelab.ops.gemv import MAX_M, plan, sm_count, split_k
from kernelab.ops.gemv.split_k import sum_splits_kernel
from kernelab.ops.quant_gemv import launches
from kernelab.ops.quant_gemv.kernels import int4_kernel, per_channel_kernel
from kernelab.ops.quant_gemv.late import int4_late_kernel, per_channel_late_kernel
from kernelab.runtime.launch_plans import keep, planned
from kernelab.runtime.tuner import interpreting
from kernelab.spec.decode import INT4_SYMMETRIC_ZERO

SUPPORTED_DTYPES = (torch.bfloat16, torch.float16)
# 2x the weights of a bf16 step: each half (even, odd columns) then holds as many fp32 values
# as a bf16 tile (64 a thread at m = 1), half the bytes of W a step
INT4_K_SCALE = 2
INTERPRETER_TILE = (4, 16)  # BLOCK_N, BLOCK_K of the late forms on the interpreter


def _shape_error(name: str, *tensors) -> KernelabError:
    shapes = ", ".join(str(tuple(t.shape)) for t in tensors)
    return KernelabError(f"{name}: shapes that do not fit together: {shapes}")


def _check_x(name: str, x, n_weights_k: int, *weights) -> None:
    if x.dim() != 2 or x.shape[1] != n_weights_k:
        raise _shape_error(name, x, *weights)
    if x.dtype not in SUPPORTED_DTYPES:
        raise KernelabError(f"{name} needs bf16 or fp16 x, got {x.dtype}")
    if x.shape[0] > MAX_M:
        raise KernelabError(f"{name} is the decode path for m <= {MAX_M}, got m = {x.shape[0]}")
    if any(w.device != x.device for w in weights):
        raise KernelabError(f"{name} needs x and the weights on one device")


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


def _output(x, n: int, k: int):
    """y, and whether it is already the answer (empty, or zeros at k = 0)."""
    y = torch.empty((x.shape[0], n), dtype=x.dtype, device=x.device)
    if x.shape[0] == 0 or n == 0:
        return y, True
    if k == 0:
        return y.zero_(), True
    return y, False


@planned("triton.quant_gemv", tensors=4, untuned=(True, None))
def _per_channel_dispatch(x, q, scale, y, int8: bool, launch) -> None:
    n, k = q.shape
    late = x.shape[0] == 1 and late_plan("int8" if int8 else "fp8", n, k, sms=_sms(x),
                                         interpreter=interpreting(), launch=launch)  # fmt: skip
    if late:
        _late(per_channel_late_kernel, x, n, k, y, late, (q, scale),
              (x.stride(1), q.stride(0), q.stride(1)), {"INT8": int8, "BLOCK_K": late["BLOCK_K"]})  # fmt: skip
    else:
        _launch(per_channel_kernel, x, y, n, k, 1, (q, scale), (q.stride(0), q.stride(1)))


PLANS = _per_channel_dispatch.plans  # the launch plans (tests read and reset them)


def _per_channel(name: str, x, q, scale, qdtype, launch):
    if q.dim() != 2 or scale.shape != q.shape[:1]:
        raise _shape_error(name, x, q, scale)
    _check_x(name, x, q.shape[1], q, scale)
    if q.dtype != qdtype or scale.dtype != torch.float32:
        raise KernelabError(f"{name} needs {qdtype} weights and fp32 scales, got {q.dtype} and "
                            f"{scale.dtype}")  # fmt: skip
    y, done = _output(x, *q.shape)
    if not done:
        _per_channel_dispatch(x, q, scale.contiguous(), y, qdtype == torch.int8, launch)
    return y


def quant_gemv_int8(x, q, scale, *, launch: dict | None = None):
    """x[m, k] @ (q int8[n, k] * scale fp32[n])^T -> y[m, n] in x's dtype.

    launch: at m = 1, a launches.json launch to use instead of the table's (the sweep's)."""
    return _per_channel("quant_gemv_int8", x, q, scale, torch.int8, launch)


def quant_gemv_fp8(x, q, scale, *, launch: dict | None = None):
    """x[m, k] @ (q float8_e4m3fn[n, k] * scale fp32[n])^T -> y[m, n] in x's dtype."""
    if not hasattr(torch, "float8_e4m3fn"):
        raise KernelabError(f"this torch ({torch.__version__}) has no float8_e4m3fn")
    return _per_channel("quant_gemv_fp8", x, q, scale, torch.float8_e4m3fn, launch)


@planned(PLANS, tensors=5, untuned=None)
def _int4_dispatch(x, packed, scales, z, y, group: int, has_zeros: bool, late: bool,
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


def quant_gemv_int4(x, packed, scales, zeros, group: int, *, launch: dict | None = None):
    """x[m, k] @ dequant(packed uint8[n, k/2], scales fp16[n, k/group], zeros uint8 or None)^T
    -> y[m, n]; w = (nibble - zero) * scale, zero = 8 when zeros is None (symmetric).

    launch: at m = 1, a launches.json launch to use instead of the table's (the sweep's)."""
    name = "quant_gemv_int4"
    if isinstance(group, bool) or not isinstance(group, int) or group <= 0 or group % 2:
        raise KernelabError(f"{name} needs an even positive group size, got {group!r}")
    if packed.dim() != 2 or scales.dim() != 2 or scales.shape[0] != packed.shape[0]:
        raise _shape_error(name, x, packed, scales)
    n, k = packed.shape[0], 2 * packed.shape[1]
    if k % group:
        raise KernelabError(f"{name}: K = {k} is not a multiple of the group size {group}")
    if scales.shape[1] != k // group or (zeros is not None and zeros.shape != scales.shape):
        raise _shape_error(name, packed, scales, *([zeros] if zeros is not None else []))
    _check_x(name, x, k, packed, scales)
    if (
        packed.dtype != torch.uint8
        or scales.dtype != torch.float16
        or (zeros is not None and zeros.dtype != torch.uint8)
    ):
        raise KernelabError(f"{name} needs uint8 packed weights, fp16 scales, uint8 zeros, got "
                            f"{packed.dtype}, {scales.dtype}, "
                            f"{zeros.dtype if zeros is not None else None}")  # fmt: skip
    y, done = _output(x, n, k)
    if done:
        return y
    z = zeros if zeros is not None else scales  # an unused pointer when symmetric
    # the late form (m = 1) reads x's row as 32-bit pairs and whole groups of packed bytes
    late = x.shape[0] == 1 and group & (group - 1) == 0 and packed.stride(1) == 1
    if late:
        row = x[0] if x.stride(1) == 1 and x.data_ptr() % 4 == 0 else x[0].clone()
        x = row.view(torch.int32)  # [k / 2] words: columns (2j, 2j + 1)
    _int4_dispatch(x, packed, scales, z, y, group, zeros is not None, late,
                   None if launch is None else tuple(sorted(launch.items())))  # fmt: skip
    return y
