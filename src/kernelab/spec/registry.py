"""Implementations register here by name, so every command can find, check and time them.

An Implementation is cheap to create: `build()` does the expensive part (compiling a cubin,
importing Triton) only when the kernel is about to run. Providers are modules that return
their implementations from `implementations()`; they are imported on the first lookup, so
importing kernelab stays free of torch, Triton and CUDA.

Calling convention: the callable built by an Implementation takes the inputs that
`kernelab.spec.reference.OPS[op].make_inputs(...)` returns, in that order, and returns the
output tensor. It must not write into its inputs.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field

from kernelab.errors import unknown

PROVIDERS = (
    "kernelab.ops.torch_baselines",
    "kernelab.ops",
    "kernelab.ladders.sgemm",
    "kernelab.ladders.hgemm",
    "kernelab.ladders.reduce",
    "kernelab.ladders.transpose",
    "kernelab.ladders.histogram",
    "kernelab.ladders.scan",
)


@dataclass(frozen=True)
class Implementation:
    name: str  # unique: "torch.softmax", "triton.softmax", "sgemm:10"
    op: str  # the op in kernelab.spec.reference.OPS: "gemm", "softmax", ...
    build: Callable[[], Callable]  # returns the callable; compiles or imports lazily
    dtypes: tuple[str, ...]  # input dtypes it accepts: "fp32", "bf16", ...
    description: str = ""
    math_mode: str | None = None  # "tf32" when fp32 inputs are multiplied in tf32
    is_baseline: bool = False  # torch eager / torch.compile / cuBLAS: what others are compared to
    metadata: dict = field(default_factory=dict)  # technique, tiles, expected speedup, ...


_REGISTRY: dict[str, Implementation] = {}
_loaded = False


def register(impl: Implementation) -> Implementation:
    if impl.name in _REGISTRY and _REGISTRY[impl.name] is not impl:
        raise ValueError(f"implementation {impl.name!r} registered twice")
    _REGISTRY[impl.name] = impl
    return impl


def _load_providers() -> None:
    global _loaded
    if _loaded:
        return
    _loaded = True
    for module_name in PROVIDERS:
        module = importlib.import_module(module_name)
        for impl in module.implementations():
            register(impl)


def get(name: str) -> Implementation:
    _load_providers()
    if name not in _REGISTRY:
        raise unknown("implementation", name, _REGISTRY)
    return _REGISTRY[name]


def implementations(op: str | None = None) -> list[Implementation]:
    _load_providers()
    return [impl for impl in _REGISTRY.values() if op is None or impl.op == op]
