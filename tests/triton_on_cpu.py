"""Run kernelab's Triton kernels on Triton's CPU interpreter when there is no GPU.

Import this before triton and any kernel module: without CUDA it sets TRITON_INTERPRET=1,
which triton.jit reads when a kernel is defined (with triton imported first, kernels that
call other jitted functions failed under the interpreter: "Cannot call @triton.jit'd outside
of the scope of a kernel", Triton 3.9). `interpreted_kernels()` then makes sure that the
kernel modules hold interpreter builds, reloading one that was imported before the variable
was set (the same check as tests/test_triton_kernels.py makes per module).
"""

from __future__ import annotations

import importlib
import os

import torch

HAS_CUDA = torch.cuda.is_available()
DEVICE = "cuda" if HAS_CUDA else "cpu"
if not HAS_CUDA:
    os.environ["TRITON_INTERPRET"] = "1"

KERNEL_MODULES = ("vector_add", "softmax", "norms", "matmul")


def interpreted_kernels() -> None:
    if HAS_CUDA:
        return
    for name in KERNEL_MODULES:
        module = importlib.import_module(f"kernelab.ops.{name}")
        if any(type(v).__name__ == "JITFunction" for v in vars(module).values()):
            importlib.reload(module)
