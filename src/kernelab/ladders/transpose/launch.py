"""One transpose ladder step called from Python: validate, compile (cached), launch on the
current stream. Nothing here touches CUDA at import time."""

from __future__ import annotations

import ctypes

from kernelab.errors import KernelabError
from kernelab.ladders.provider import StepBuilds
from kernelab.ladders.transpose.steps import Step, get_step
from kernelab.runtime.cuda.prepared import current_stream_handle, prepare

SOURCE_DIR = "ladders/transpose"  # relative to the kernelab package
INT32_MAX = 2**31 - 1

_builds = StepBuilds(SOURCE_DIR)


def build_step(step: Step, *, arch: str | None = None):
    """Compile one step (both dtype entries live in one cubin); cached on disk and in memory."""
    return _builds.get(step, None, arch)


def checked_input(x, who: str = "transpose"):
    """(x with contiguous rows, dtype name) or a one-line KernelabError, before any compile."""
    import torch

    if not isinstance(x, torch.Tensor):
        raise KernelabError(f"{who}: expected a torch.Tensor, got {type(x).__name__}")
    if x.dim() != 2:
        raise KernelabError(f"{who}: x must be 2-D, got shape {tuple(x.shape)}")
    names = {torch.float32: "fp32", torch.bfloat16: "bf16"}
    if x.dtype not in names:
        raise KernelabError(f"{who}: x must be float32 or bfloat16, got {x.dtype}")
    if not x.is_cuda:
        raise KernelabError(f"{who}: x must be a CUDA tensor")
    if max(x.shape) > INT32_MAX:
        raise KernelabError(f"{who}: each dimension must be below 2^31, got {tuple(x.shape)}")
    return (x if x.is_contiguous() else x.contiguous()), names[x.dtype]


def transpose(step: Step | int | str, x):
    """x.t().contiguous() with one ladder step: a new [cols, rows] tensor of x's dtype.

    x is a 2-D fp32 or bf16 CUDA tensor of any shape; a non-contiguous x is made contiguous
    first (a copy: the kernels take dense rows).
    """
    import torch

    step = step if isinstance(step, Step) else get_step(step)
    x, dtype = checked_input(x)
    rows, cols = x.shape
    out = torch.empty((cols, rows), dtype=x.dtype, device=x.device)
    if x.numel() == 0:
        return out
    config = step.launch(rows, cols)  # refuses too many row tiles in one line
    built = build_step(step)
    params = [
        ctypes.c_int32(rows), ctypes.c_int32(cols),
        ctypes.c_uint64(x.data_ptr()), ctypes.c_uint64(out.data_ptr()),
    ]  # fmt: skip
    plan = prepare(built.cubin, step.kernel_for(dtype), built.arch, config, params)
    plan(current_stream_handle(x.device.index if x.device.index is not None else 0))
    return out
