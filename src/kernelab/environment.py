"""The software this process runs with: versions that go into every record."""

from __future__ import annotations

import importlib.metadata
import platform
import shutil
import subprocess

import kernelab


def _package_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def nvcc_version() -> str | None:
    """The release of the nvcc on PATH (e.g. "13.0"), or None when there is none."""
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        return None
    out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, check=False).stdout
    for line in out.splitlines():
        if "release" in line:
            return line.split("release", 1)[1].split(",")[0].strip()
    return None


def software_versions() -> dict[str, str | None]:
    """kernelab, Python, torch (and the CUDA it was built for), Triton, cuda-core, nvcc, and
    the CuTe-DSL package where it is installed (the records of cute.* kernels name it)."""
    versions: dict[str, str | None] = {
        "kernelab": kernelab.__version__,
        "python": platform.python_version(),
        "torch": _package_version("torch"),
        "triton": _package_version("triton"),
        "cuda-core": _package_version("cuda-core") or _package_version("cuda_core"),
        "nvcc": nvcc_version(),
    }
    cute_dsl = _package_version("nvidia-cutlass-dsl")
    if cute_dsl is not None:
        versions["nvidia-cutlass-dsl"] = cute_dsl
    try:
        import torch

        versions["torch_cuda"] = torch.version.cuda
    except ImportError:
        versions["torch_cuda"] = None
    return versions
