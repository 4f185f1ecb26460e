"""Run kernelab's Triton kernels on Triton's CPU interpreter when there is no GPU.

Import this before triton and any kernel module: without CUDA it sets TRITON_INTERPRET=1,
which triton.jit reads when a kernel is defined (with triton imported first, kernels that
call other jitted functions failed under the interpreter: "Cannot call @triton.jit'd outside
of the scope of a kernel", Triton 3.9). `kernel_module(name)` then makes sure that an op's
modules hold interpreter builds: an op folder whose kernels were built before the variable was
set (a JITFunction, not an InterpretedFunction) is imported afresh, every module of it at once
with the shared kernel modules, since its files call each other's kernels.
"""

from __future__ import annotations

import importlib
import os
import sys

import torch

HAS_CUDA = torch.cuda.is_available()
DEVICE = "cuda" if HAS_CUDA else "cpu"
if not HAS_CUDA:
    os.environ["TRITON_INTERPRET"] = "1"

KERNEL_MODULES = ("vector_add", "softmax", "norms", "matmul")


def _built_for_the_gpu(module) -> bool:
    return any(type(v).__name__ == "JITFunction" for v in vars(module).values())


def kernel_module(name: str):
    """kernelab.ops.<name> ("softmax", "softmax.teaching"), its kernels built for the
    interpreter when there is no GPU."""
    package = f"kernelab.ops.{name.split('.')[0]}"
    if not HAS_CUDA:
        # the op's folder, and the kernels it shares with other ops (kernelab.ops.row_tiles)
        loaded = [
            m
            for m in list(sys.modules)
            if m == package
            or m.startswith(package + ".")
            or (m.startswith("kernelab.ops.") and _built_for_the_gpu(sys.modules[m]))
        ]
        if any(_built_for_the_gpu(sys.modules[m]) for m in loaded):
            for m in loaded:
                del sys.modules[m]
    return importlib.import_module(f"kernelab.ops.{name}")


def interpreted_kernels() -> None:
    for name in KERNEL_MODULES:
        kernel_module(name)


def assert_matches_reference(fn, op: str, shape: dict, dtype: str, trials: int | None = None):
    """fn against op's float64 reference on fresh random inputs (kernelab.harness.check: the
    tolerance per dtype is the harness's table, and a NaN where the reference has none fails).
    On the interpreter fp32 -> bf16 rounds toward zero, so the bf16 allowance doubles."""
    from kernelab.harness.check import check_implementation

    trials = trials or (3 if HAS_CUDA else 1)
    report = check_implementation(fn, op, shape, dtype, trials=trials, device=DEVICE,
                                  bf16_truncates=not HAS_CUDA)  # fmt: skip
    assert report.ok, report.message


def shape_id(shape: dict) -> str:
    return "x".join(f"{k[0]}{v}" for k, v in shape.items())


FLOAT_DTYPES = ("fp32", "bf16", "fp16")


def kernel_fixture(name: str):
    """A module-scoped fixture `name` holding kernelab.ops.<name> (kernel_module)."""
    import pytest

    return pytest.fixture(scope="module", name=name)(lambda: kernel_module(name))
