"""Weight-only quantized decode GEMVs: y[m, n] = x[m, k] @ dequant(W)[n, k]^T, public entry.

teaching.py (int8, one program per column block) is the kernel to read first; kernels.py holds
the split-K paths that dequantize int8, int4 (group scales, symmetric or with zero points)
and fp8 e4m3 in registers, step-summed (m > 1); late.py the m = 1 forms, late-summed (no
reduction inside the K loop); packing.py the formats and their float64 references. m = 1
launches from launches.json (launches.py: derived, not measured, until sweep.py's candidates
are timed on a GPU); m > 1 from the GEMV's heuristic (ops/gemv.plan without an itemsize,
BLOCK_K doubled for int4: see INT4_K_SCALE). dispatch.py plans and launches them; calls
replay their launches through runtime.launch_plans (planned) instead of Triton's front door.
This file checks a call's tensors and hands it to a dispatch.
"""

from __future__ import annotations

import torch

from kernelab.errors import KernelabError
from kernelab.ops.gemv import MAX_M
from kernelab.ops.quant_gemv.dispatch import (
    INT4_K_SCALE,
    INTERPRETER_TILE,
    PLANS,
    int4_dispatch,
    late_plan,
    per_channel_dispatch,
)

__all__ = ["INT4_K_SCALE", "INTERPRETER_TILE", "PLANS", "SUPPORTED_DTYPES", "late_plan",
           "quant_gemv_fp8", "quant_gemv_int4", "quant_gemv_int8"]  # fmt: skip

SUPPORTED_DTYPES = (torch.bfloat16, torch.float16)


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


def _output(x, n: int, k: int):
    """y, and whether it is already the answer (empty, or zeros at k = 0)."""
    y = torch.empty((x.shape[0], n), dtype=x.dtype, device=x.device)
    if x.shape[0] == 0 or n == 0:
        return y, True
    if k == 0:
        return y.zero_(), True
    return y, False


def _per_channel(name: str, x, q, scale, qdtype, launch):
    if q.dim() != 2 or scale.shape != q.shape[:1]:
        raise _shape_error(name, x, q, scale)
    _check_x(name, x, q.shape[1], q, scale)
    if q.dtype != qdtype or scale.dtype != torch.float32:
        raise KernelabError(f"{name} needs {qdtype} weights and fp32 scales, got {q.dtype} and "
                            f"{scale.dtype}")  # fmt: skip
    y, done = _output(x, *q.shape)
    if not done:
        per_channel_dispatch(x, q, scale.contiguous(), y, qdtype == torch.int8, launch)
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
    int4_dispatch(x, packed, scales, z, y, group, zeros is not None, late,
                   None if launch is None else tuple(sorted(launch.items())))  # fmt: skip
    return y
