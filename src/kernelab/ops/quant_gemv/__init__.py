"""Weight-only quantized decode GEMVs: y[m, n] = x[m, k] @ dequant(W)[n, k]^T, public entry.

teaching.py (int8, one program per column block) is the kernel to read first; kernels.py holds
the split-K fast paths that dequantize int8, int4 (group scales, symmetric or with zero
points) and fp8 e4m3 in registers; packing.py the formats and their float64 references. The
launch plan is the GEMV's heuristic (ops/gemv.plan without an itemsize: GPU_TILES, not the
swept tiles.json), BLOCK_K doubled for int4 (registers, not bytes, bound the step: see
INT4_K_SCALE): untuned, no record under benchmarks/results/ backs it yet.
"""

from __future__ import annotations

import torch
import triton

from kernelab.errors import KernelabError
from kernelab.ops.gemv import MAX_M, plan, sm_count
from kernelab.ops.gemv.split_k import sum_splits_kernel
from kernelab.ops.quant_gemv.kernels import int4_kernel, per_channel_kernel
from kernelab.runtime.tuner import interpreting
from kernelab.spec.decode import INT4_SYMMETRIC_ZERO

SUPPORTED_DTYPES = (torch.bfloat16, torch.float16)
# 2x the weights of a bf16 step: each half (even, odd columns) then holds as many fp32 values
# as a bf16 tile (64 a thread at m = 1), half the bytes of W a step
INT4_K_SCALE = 2


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


def _launch(kernel, x, n, k, k_scale, args, strides, constants=None):
    """Allocate y (and fp32 partials when K is split), launch, sum the splits."""
    m = x.shape[0]
    y = torch.empty((m, n), dtype=x.dtype, device=x.device)
    if m == 0 or n == 0:
        return y
    if k == 0:
        return y.zero_()
    interp = interpreting()
    sms = None if interp or x.device.type != "cuda" else sm_count(x.device.index or 0)
    p = plan(m, n, k, sms, interpreter=interp, k_scale=k_scale)
    split = p["split"]
    out = y if split == 1 else torch.empty((split, m, n), dtype=torch.float32, device=x.device)
    grid = (triton.cdiv(n, p["BLOCK_N"]), split, triton.cdiv(m, p["BLOCK_M"]))
    kernel[grid](x, *args, out, m, n, k, p["k_per_split"], x.stride(0), x.stride(1), *strides,
                 m * n if split > 1 else 0, n, BLOCK_M=p["BLOCK_M"], BLOCK_N=p["BLOCK_N"],
                 BLOCK_K=p["BLOCK_K"], USE_DOT=p["USE_DOT"], FP32_DOT=interp, num_warps=4,
                 **(constants or {}))  # fmt: skip
    if split > 1:
        block = 64 if interp else 1024
        sum_splits_kernel[(triton.cdiv(m * n, block),)](out, y, m * n, SPLIT=split, BLOCK=block)
    return y


def _per_channel(name: str, x, q, scale, qdtype):
    if q.dim() != 2 or scale.shape != q.shape[:1]:
        raise _shape_error(name, x, q, scale)
    _check_x(name, x, q.shape[1], q, scale)
    if q.dtype != qdtype or scale.dtype != torch.float32:
        raise KernelabError(f"{name} needs {qdtype} weights and fp32 scales, got {q.dtype} and "
                            f"{scale.dtype}")  # fmt: skip
    n, k = q.shape
    return _launch(per_channel_kernel, x, n, k, 1, (q, scale.contiguous()),
                   (q.stride(0), q.stride(1)))  # fmt: skip


def quant_gemv_int8(x, q, scale):
    """x[m, k] @ (q int8[n, k] * scale fp32[n])^T -> y[m, n] in x's dtype."""
    return _per_channel("quant_gemv_int8", x, q, scale, torch.int8)


def quant_gemv_fp8(x, q, scale):
    """x[m, k] @ (q float8_e4m3fn[n, k] * scale fp32[n])^T -> y[m, n] in x's dtype."""
    if not hasattr(torch, "float8_e4m3fn"):
        raise KernelabError(f"this torch ({torch.__version__}) has no float8_e4m3fn")
    return _per_channel("quant_gemv_fp8", x, q, scale, torch.float8_e4m3fn)


def quant_gemv_int4(x, packed, scales, zeros, group: int):
    """x[m, k] @ dequant(packed uint8[n, k/2], scales fp16[n, k/group], zeros uint8 or None)^T
    -> y[m, n]; w = (nibble - zero) * scale, zero = 8 when zeros is None (symmetric)."""
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
    if packed.dtype != torch.uint8 or scales.dtype != torch.float16 or (
        zeros is not None and zeros.dtype != torch.uint8
    ):
        raise KernelabError(f"{name} needs uint8 packed weights, fp16 scales, uint8 zeros, got "
                            f"{packed.dtype}, {scales.dtype}, "
                            f"{zeros.dtype if zeros is not None else None}")  # fmt: skip
    z = zeros if zeros is not None else scales  # an unused pointer when symmetric
    strides = (packed.stride(0), packed.stride(1), scales.stride(0), scales.stride(1),
               z.stride(0), z.stride(1))  # fmt: skip
    constants = {"GROUP": group, "HAS_ZEROS": zeros is not None, "ZERO": INT4_SYMMETRIC_ZERO}
    return _launch(int4_kernel, x, n, k, INT4_K_SCALE, (packed, scales, z), strides, constants)
