"""Load a cubin and launch its kernels on torch's current stream, through cuda.core.

What works with cuda.core on a Hopper machine: `ObjectCode.from_cubin(bytes)`, `get_kernel`,
`Device(0).create_stream(torch.cuda.current_stream())`, pointers as plain ints from
`tensor.data_ptr()` and scalars as numpy scalars. Loaded modules are cached per process.
Set KERNELAB_SYNC=1 to synchronise after every launch, so that a faulting kernel is named at
its own launch instead of at some later, unrelated call.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernelab.errors import KernelabError, MissingToolError, NoGPUError

PORTABLE_SMEM_BYTES = 48 * 1024  # above this a kernel must opt in to more dynamic smem

_device = None
_kernels: dict[tuple[str, str], Any] = {}
_streams: dict[int, Any] = {}
_smem_limits: dict[tuple[str, str], int] = {}


def cdiv(a: int, b: int) -> int:
    """a / b rounded up: the blocks (or tiles) that cover a elements b at a time."""
    return -(-a // b)


@dataclass(frozen=True)
class Launch:
    """Where and how big: grid and block in (x, y, z), dynamic shared memory in bytes."""

    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_bytes: int = 0


def _cuda_core():
    try:
        import cuda.core as cuda_core
    except ImportError as exc:
        raise MissingToolError(
            f"cuda.core is not importable ({exc}); pip install 'cuda-core[cu13]'"
        ) from exc
    return cuda_core


def device():
    """The current CUDA device as a cuda.core Device, made current; NoGPUError without one."""
    global _device
    if _device is not None:
        return _device
    cuda_core = _cuda_core()
    try:
        dev = cuda_core.Device(0)
        dev.set_current()
    except Exception as exc:  # DynamicLibNotFoundError (no driver), CUDAError (no device)
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise NoGPUError(f"no NVIDIA driver/GPU: {type(exc).__name__}: {first[:160]}") from None
    _device = dev
    return dev


def device_arch() -> str:
    cc = device().compute_capability
    return f"sm_{cc.major}{cc.minor}"


def check_arch(cubin_arch: str, gpu_arch: str) -> None:
    """SASS runs only on the architecture it was built for: refuse a mismatch in one line."""
    digits = re.sub(r"[^0-9]", "", cubin_arch)
    if digits != re.sub(r"[^0-9]", "", gpu_arch):
        raise KernelabError(f"this cubin is built for {cubin_arch}; the GPU is {gpu_arch}")


def load(cubin: str | os.PathLike, kernel_name: str, *, arch: str):
    """The kernel `kernel_name` from `cubin` (built for `arch`), loaded once per process."""
    key = (str(cubin), kernel_name)
    if key in _kernels:
        return _kernels[key]
    dev = device()
    check_arch(arch, device_arch())
    cuda_core = _cuda_core()
    try:
        code = cuda_core.ObjectCode.from_cubin(Path(cubin).read_bytes(), name=Path(cubin).name)
        kernel = code.get_kernel(kernel_name)
    except Exception as exc:
        raise KernelabError(f"cannot load '{kernel_name}' from {cubin}: {exc}") from None
    del dev
    _kernels[key] = kernel
    return kernel


def _raise_smem_limit(kernel, key: tuple[str, str], shared_bytes: int) -> None:
    """Opt the kernel in to `shared_bytes` of dynamic shared memory (above 48 KiB)."""
    if shared_bytes <= max(PORTABLE_SMEM_BYTES, _smem_limits.get(key, 0)):
        return
    from cuda.bindings import driver

    attribute = driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
    handle = kernel.handle
    # cuda.core loads cubins as libraries, so the handle is a CUkernel; older releases
    # returned a CUfunction. Each has its own setter.
    if isinstance(handle, driver.CUfunction):
        (err,) = driver.cuFuncSetAttribute(handle, attribute, shared_bytes)
    else:
        dev = driver.CUdevice(device().device_id)
        (err,) = driver.cuKernelSetAttribute(attribute, shared_bytes, handle, dev)
    if err != driver.CUresult.CUDA_SUCCESS:
        raise KernelabError(
            f"cannot give kernel {key[1]} {shared_bytes} bytes of shared memory: {err.name}"
        )
    _smem_limits[key] = shared_bytes


def _stream():
    """torch's current stream wrapped for cuda.core (one wrapper per torch stream)."""
    import torch

    torch_stream = torch.cuda.current_stream()
    handle = torch_stream.cuda_stream
    if handle not in _streams:
        _streams[handle] = device().create_stream(torch_stream)
    return _streams[handle]


def launch(cubin: str | os.PathLike, kernel_name: str, arch: str, config: Launch, *args) -> None:
    """Launch `kernel_name` on torch's current stream. Pass pointers as ints (data_ptr())
    and scalars as numpy scalars (np.int32, np.float32): they fix the C types."""
    kernel = load(cubin, kernel_name, arch=arch)
    _raise_smem_limit(kernel, (str(cubin), kernel_name), config.shared_bytes)
    cuda_core = _cuda_core()
    stream = _stream()
    launch_config = cuda_core.LaunchConfig(
        grid=config.grid, block=config.block, shmem_size=config.shared_bytes
    )
    try:
        cuda_core.launch(stream, launch_config, kernel, *args)
        if os.environ.get("KERNELAB_SYNC") == "1":
            stream.sync()
    except Exception as exc:
        raise KernelabError(f"launch of {kernel_name} {config} failed: {exc}") from None
