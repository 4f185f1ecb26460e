"""A compiled Triton kernel launched by one cuLaunchKernel, its parameter array built once.

Triton's launcher, called for a planned launch, still parses its argument tuple, asks each
tensor for data_ptr() and the driver for each pointer's attributes (cuPointerGetAttribute),
and runs a Python wrapper that looks for scratch allocators. A plan already knows all of that:
the kernel, its grid and block, its dynamic shared memory and every scalar. So a DirectLaunch
keeps the kernel's parameter values as ctypes objects and the array of their addresses that
cuLaunchKernel takes; a call writes the new data pointers into their slots and launches.

It is built only when the launch is a plain one and its layout can be checked against the
loaded image: one CTA per cluster, no cooperative grid, no programmatic dependent launch, no
global or profile scratch, no TMA descriptors or tuples, scalars of a width known here; the
image's own parameter list (cuFuncGetParamInfo) must have exactly the sizes expected, the
hidden scratch pointers Triton appends included. Anything else returns None from build() and
the plan keeps calling Triton's launcher.

Measured on the H200's host (session 21, benchmarks/experiments/host_cost_breakdown.py):
cuLaunchKernel costs 5.7 us there through cuda.bindings, Triton's launcher 7.1-8.3 us, so this
saves 2-3 us of a planned call; most of the rest is our own Python around the launch. Off
unless KERNELAB_DIRECT_LAUNCH=1 (launch_plans.DIRECT) until the GPU tests have run it.
"""

from __future__ import annotations

import ctypes
import threading

from kernelab.errors import KernelabError

# Triton's signature types this launcher can pass, and their C types. Booleans (i1) and 16-bit
# floats are left to Triton's launcher: their packing is Triton's business.
SCALAR_TYPES = {
    "i8": ctypes.c_int8,
    "i16": ctypes.c_int16,
    "i32": ctypes.c_int32,
    "i64": ctypes.c_int64,
    "u8": ctypes.c_uint8,
    "u16": ctypes.c_uint16,
    "u32": ctypes.c_uint32,
    "u64": ctypes.c_uint64,
    "fp32": ctypes.c_float,
    "fp64": ctypes.c_double,
}
POINTER_BYTES = 8
MOST_PARAMETERS = 256

_streams: dict[int, object] = {}


def _driver_launch():
    """cuda.bindings' cuLaunchKernel. Measured on the H200's host (session 21,
    host_cost_breakdown.py): 5.7 us a launch, against 8.2 through ctypes into libcuda, whose
    per-call argument conversion costs more than the launch."""
    from cuda.bindings import driver

    return driver.cuLaunchKernel


def _stream(handle: int):
    if handle not in _streams:
        from cuda.bindings import driver

        _streams[handle] = driver.CUstream(handle)
    return _streams[handle]


def image_parameter_sizes(function_handle: int) -> list[int] | None:
    """The byte size of each parameter of a loaded kernel, in order, or None where the driver
    cannot say (cuFuncGetParamInfo needs CUDA 12.4)."""
    try:
        from cuda.bindings import driver
    except ImportError:
        return None
    function = driver.CUfunction(function_handle)
    sizes = []
    for index in range(MOST_PARAMETERS):
        err, _offset, size = driver.cuFuncGetParamInfo(function, index)
        if err != driver.CUresult.CUDA_SUCCESS:
            return sizes if err == driver.CUresult.CUDA_ERROR_INVALID_VALUE else None
        sizes.append(size)
    return None


def _plain(metadata) -> bool:
    cluster = tuple(getattr(metadata, "cluster_dims", None) or (1, 1, 1))
    return (
        getattr(metadata, "num_ctas", 1) == 1
        and all(c == 1 for c in cluster)
        and not getattr(metadata, "launch_cooperative_grid", False)
        and not getattr(metadata, "launch_pdl", False)
        and not getattr(metadata, "global_scratch_size", 0)
        and not getattr(metadata, "profile_scratch_size", 0)
        and not getattr(metadata, "tensordesc_meta", None)
    )


class DirectLaunch:
    """One planned launch of a compiled kernel with its parameter bytes kept."""

    def __init__(self, function_handle, grid, block, shared_bytes, values, pointer_slots):
        from cuda.bindings import driver

        self.function_handle = function_handle
        self._function = driver.CUfunction(function_handle)
        self.grid = grid
        self.block = block
        self.shared_bytes = shared_bytes
        self._values = values  # ctypes objects; the array points into them
        self._array = (ctypes.c_void_p * len(values))(*(ctypes.addressof(v) for v in values))
        self._array_address = ctypes.addressof(self._array)
        self._pointer_slots = pointer_slots  # (parameter index, index of the call's tensor)
        self._lock = threading.Lock()  # the slots are shared: one writer-launcher at a time
        self._launch = _driver_launch()

    def __call__(self, tensors: tuple, stream: int) -> None:
        """Launch on the call's tensors (the plan's slots name which) on a raw stream handle."""
        grid_x, grid_y, grid_z = self.grid
        with self._lock:
            for parameter, index in self._pointer_slots:
                self._values[parameter].value = tensors[index].data_ptr()
            # the driver copies the parameter bytes before it returns
            (err,) = self._launch(self._function, grid_x, grid_y, grid_z, self.block, 1, 1,
                                  self.shared_bytes, _stream(stream), self._array_address, 0)  # fmt: skip
        if int(err) != 0:
            raise KernelabError(f"cuLaunchKernel of a planned Triton launch failed: {err!r}")


def build(compiled, grid, names: list[str], template: list, slots: list) -> DirectLaunch | None:
    """The direct launch of `compiled` with these launcher arguments (`template`, in the order
    of the kernel's parameter `names`, the call's tensors as None at `slots`), or None where
    it is not a plain launch (module doc)."""
    metadata = getattr(compiled, "metadata", None)
    source = getattr(compiled, "src", None)
    signature = getattr(source, "signature", None)
    if metadata is None or not isinstance(signature, dict) or not _plain(metadata):
        return None
    if list(signature) != list(names):
        return None
    tensor_of = dict(slots)
    values, pointer_slots = [], []
    for position, (name, value) in enumerate(zip(names, template, strict=True)):
        kind = signature[name]
        if kind == "constexpr":
            continue
        if not isinstance(kind, str):
            return None  # a tuple of arguments
        if kind.startswith("*") and position in tensor_of:
            pointer_slots.append((len(values), tensor_of[position]))
            values.append(ctypes.c_uint64(0))
        elif kind.startswith("*") and hasattr(value, "data_ptr"):
            # a kept workspace: the plan holds the tensor, so its address stays
            values.append(ctypes.c_uint64(value.data_ptr()))
        elif kind in SCALAR_TYPES and isinstance(value, (int, float)):
            values.append(SCALAR_TYPES[kind](value))
        else:
            return None
    sizes = image_parameter_sizes(compiled.function)
    if sizes is None or len(sizes) < len(values):
        return None
    hidden = sizes[len(values) :]
    if any(size != POINTER_BYTES for size in hidden):
        return None
    values.extend(ctypes.c_uint64(0) for _ in hidden)  # scratch pointers, unused: null
    if [ctypes.sizeof(v) for v in values] != sizes:
        return None
    return DirectLaunch(
        function_handle=compiled.function,
        grid=grid,
        block=metadata.num_warps * 32,
        shared_bytes=metadata.shared,
        values=values,
        pointer_slots=pointer_slots,
    )
