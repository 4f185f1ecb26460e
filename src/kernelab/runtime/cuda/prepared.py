"""Prepared launches: what a ladder call costs the host once its shape and pointers are known.

A call of a ladder step spends most of its host time before the driver sees it: the tuned
tile lookup, the launch geometry, three TMA descriptors encoded by cuTensorMapEncodeTiled,
the parameter array (measured on the H200: hgemm:18 at 256^3 took 135 us a call
from Python against torch.mm's 20 us, almost none of it the launch itself). None of that
changes while the shapes, strides and data pointers stay the same, and torch's caching
allocator hands a loop the same output pointer call after call. So a PreparedLaunch keeps
the loaded function, the geometry and the argument bytes, and a hit costs a dict lookup and
one cuLaunchKernel.

Keys must name everything the argument bytes depend on (the callers build them); a TMA
descriptor depends only on the address, sizes, strides and box, so reusing one for a new
tensor at the same address is exact. PLAN_CAPACITY bounds what is kept (oldest dropped first).
"""

from __future__ import annotations

import ctypes
import os
from collections import OrderedDict
from dataclasses import dataclass, field

from kernelab.errors import KernelabError

PLAN_CAPACITY = 256

_streams: dict[int, object] = {}


def current_stream_handle(device_index: int) -> int:
    """torch's current stream on that device as a raw handle, without building a Stream
    object (torch.cuda.current_stream cost ~5 us a call on the H200's host)."""
    import torch

    return torch._C._cuda_getCurrentRawStream(device_index)


def _cu_stream(handle: int):
    if handle not in _streams:
        from cuda.bindings import driver

        _streams[handle] = driver.CUstream(handle)
    return _streams[handle]


def param_array(params: list) -> ctypes.Array:
    """cuLaunchKernel's kernelParams: one pointer to each argument's bytes, in order. The
    driver copies each argument with the size the kernel's image declares for it, so every
    entry must be a ctypes object of exactly the kernel's parameter type."""
    return (ctypes.c_void_p * len(params))(*(ctypes.addressof(p) for p in params))


@dataclass
class PreparedLaunch:
    """A kernel with its grid, block, dynamic shared memory and argument bytes, ready to go."""

    name: str
    function: object  # the loaded CUkernel / CUfunction handle
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_bytes: int
    params: list = field(repr=False)  # ctypes values; kept alive for the array's pointers
    array_address: int = 0

    def __post_init__(self):
        self._array = param_array(self.params)
        self.array_address = ctypes.addressof(self._array)

    def __call__(self, stream_handle: int) -> None:
        from cuda.bindings import driver

        (err,) = driver.cuLaunchKernel(
            self.function,
            *self.grid,
            *self.block,
            self.shared_bytes,
            _cu_stream(stream_handle),
            self.array_address,
            0,
        )
        if err != driver.CUresult.CUDA_SUCCESS:
            raise KernelabError(
                f"launch of {self.name} {self.grid}x{self.block} failed: {err.name}"
            )
        if os.environ.get("KERNELAB_SYNC") == "1":
            import torch

            torch.cuda.synchronize()


def prepare(cubin, kernel_name: str, arch: str, config, params: list) -> PreparedLaunch:
    """Load the kernel (cached per process), opt it in to its shared memory and keep the
    launch: `config` is a launch.Launch, `params` ctypes values in the kernel's order."""
    from kernelab.runtime.cuda import launch as cuda_launch

    kernel = cuda_launch.load(cubin, kernel_name, arch=arch)
    cuda_launch._raise_smem_limit(kernel, (str(cubin), kernel_name), config.shared_bytes)
    return PreparedLaunch(
        name=kernel_name,
        function=kernel.handle,
        grid=tuple(config.grid),
        block=tuple(config.block),
        shared_bytes=config.shared_bytes,
        params=list(params),
    )


class PlanCache:
    """Prepared launches by key, the oldest dropped past `capacity`."""

    def __init__(self, capacity: int = PLAN_CAPACITY):
        self.capacity = capacity
        self._plans: OrderedDict = OrderedDict()

    def get(self, key):
        return self._plans.get(key)

    def put(self, key, plan):
        self._plans[key] = plan
        if len(self._plans) > self.capacity:
            self._plans.popitem(last=False)
        return plan

    def __len__(self) -> int:
        return len(self._plans)

    def clear(self) -> None:
        self._plans.clear()
