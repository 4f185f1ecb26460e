"""The hardware: a catalog of GPUs with sourced numbers, and the GPU this process runs on."""

from __future__ import annotations

from kernelab.hardware.catalog import CATALOG, get_gpu
from kernelab.hardware.specs import DTYPES, GPUSpec

__all__ = ["CATALOG", "DTYPES", "GPUSpec", "get_gpu", "resolve_gpu"]


def resolve_gpu(name: str) -> GPUSpec:
    """A catalog id, or "auto" for the GPU this process sees (NoGPUError without one)."""
    if name.strip().lower() == "auto":
        from kernelab.hardware.detect import require_gpu

        return require_gpu().spec
    return get_gpu(name)
