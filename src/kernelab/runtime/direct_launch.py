"""A compiled Triton kernel launched by one cuLaunchKernel, its parameter array built once.

Triton's launcher, called for a planned launch, still parses its argument tuple, asks each
tensor for data_ptr() and the driver for each pointer's attributes (cuPointerGetAttribute),
and runs a Python wrapper that looks for scratch allocators. A plan already knows all of that:
the kernel, its grid and block, its dynamic shared memory and every scalar. So a DirectLaunch
keeps the kernel's parameter values as ctypes objects and the array of their addresses that
cuLaunchKernel takes; a call writes the new data pointers into their slots and launches.

It is built only when the launch is a plain one and its layout can be checked against the
loaded image: one CTA per cluster, no cooperative grid, no programmatic dependent launch, no
global or profile scratch, no tuples, scalars of a width known here; the image's own parameter
list (cuFuncGetParamInfo) must have exactly the sizes expected, the hidden scratch pointers
Triton appends included. Anything else returns None from build() and the plan keeps calling
Triton's launcher. A TMA descriptor parameter is passed as Triton's launcher passes it (the
128-byte tensor map, then the shape as i32 and the strides as i64), its map kept per tensor
address by tensor_maps.TensorMaps instead of encoded on every call.

Measured on the H200's host (host_cost_breakdown.py, now in git history):
cuLaunchKernel costs 5.7 us there through cuda.bindings, Triton's launcher 7.1-8.3 us, so this
saves 2-3 us of a planned call, and a TMA launch also the encode of every map; most of the
rest is our own Python around the launch. On by default (launch_plans.DIRECT; its GPU tests
pass on an H100, TMA descriptors included); KERNELAB_DIRECT_LAUNCH=0
turns it off, KERNELAB_DIRECT_TMA=0 only for launches with descriptors. On that H100 host
(host_cost_breakdown.py): cuda.bindings' cuLaunchKernel 4.00 us, ctypes with
argtypes 5.18, ctypes with every argument prebuilt 4.39, Triton's launcher 4.63-5.16.
Where compiled_replay.c builds (the default; KERNELAB_COMPILED_REPLAY=0 turns it off) a
DirectLaunch hands the same slots to it, which fills them and calls libcuda's cuLaunchKernel
from C.
"""

from __future__ import annotations

import ctypes
import os
import threading

from kernelab.errors import KernelabError
from kernelab.runtime import compiled_replay, tensor_maps

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
# KERNELAB_DIRECT_TMA=0 leaves launches with TMA descriptors to Triton's launcher while plain
# ones still go direct: the way back if the kept maps misbehave on some GPU or Triton.
TENSOR_MAPS = os.environ.get("KERNELAB_DIRECT_TMA", "1") != "0"

_streams: dict[int, object] = {}
# why the last build() returned None (tests and experiments print it)
last_refusal: str | None = None


def _driver_launch():
    """cuda.bindings' cuLaunchKernel. Measured on the H200's host (host_cost_breakdown.py):
    5.7 us a launch, against 8.2 through ctypes into libcuda, whose
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
    )


class DirectLaunch:
    """One planned launch of a compiled kernel with its parameter bytes kept."""

    def __init__(
        self, function_handle, grid, block, shared_bytes, values, pointer_slots, map_slots=()
    ):
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
        # (parameter index, index of the call's tensor, its TensorMaps): the array entry is
        # pointed at the map's bytes for the call's tensor
        self._map_slots = list(map_slots)
        self._lock = threading.Lock()  # the slots are shared: one writer-launcher at a time
        self.launches = 0  # made so far (tests and benchmarks check the path was taken)
        self._launch = _driver_launch()
        # the same launch from C (compiled_replay.py), where it is on and builds here
        self._prepared, self._compiled_launch = _prepared(self), None
        if self._prepared is not None:
            self._compiled_launch = compiled_replay.module().launch

    @property
    def compiled(self) -> bool:
        """Whether calls go through the compiled replay (compiled_replay.c)."""
        return self._prepared is not None

    @property
    def tensor_map_parameters(self) -> int:
        return len(self._map_slots)

    def __call__(self, tensors: tuple, stream: int) -> None:
        """Launch on the call's tensors (the plan's slots name which) on a raw stream handle."""
        if self._compiled_launch is not None:
            # C writes the slots and launches with no Python in between: no lock needed
            err = self._compiled_launch(self._prepared, tensors, stream)
            if err:
                raise KernelabError(f"cuLaunchKernel of a planned Triton launch failed: {err}")
            self.launches += 1
            return
        grid_x, grid_y, grid_z = self.grid
        with self._lock:
            for parameter, index in self._pointer_slots:
                self._values[parameter].value = tensors[index].data_ptr()
            for parameter, index, maps in self._map_slots:
                self._array[parameter] = maps.address(tensors[index])
            # the driver copies the parameter bytes before it returns
            (err,) = self._launch(self._function, grid_x, grid_y, grid_z, self.block, 1, 1,
                                  self.shared_bytes, _streams.get(stream) or _stream(stream),
                                  self._array_address, 0)  # fmt: skip
            failed = int(err) != 0
            self.launches += not failed
        if failed:
            raise KernelabError(f"cuLaunchKernel of a planned Triton launch failed: {err!r}")


def _prepared(direct: DirectLaunch):
    """The compiled replay's prepared launch of `direct` (its slots' addresses in the kept
    parameter bytes), or None where it is off, does not build or libcuda is not there."""
    if not compiled_replay.ENABLED:
        return None
    built, launch_address = compiled_replay.module(), compiled_replay.launch_function()
    if built is None or launch_address is None:
        return None
    grid_x, grid_y, grid_z = direct.grid
    return built.prepare(
        launch_address, direct.function_handle, grid_x, grid_y, grid_z, direct.block,
        direct.shared_bytes, direct._array_address, len(direct._values),
        tuple((ctypes.addressof(direct._values[p]), t) for p, t in direct._pointer_slots),
        tuple(direct._map_slots),
    )  # fmt: skip


def build(
    compiled, grid, names: list[str], template: list, slots: list, descriptors: list = ()
) -> DirectLaunch | None:
    """The direct launch of `compiled` with these launcher arguments (`template`, in the order
    of the kernel's parameter `names`, the call's tensors as None at `slots` and their TMA
    descriptors as None at `descriptors`: (position, tensor index, recorded descriptor)), or
    None where it is not a plain launch (module doc)."""
    metadata = getattr(compiled, "metadata", None)
    source = getattr(compiled, "src", None)
    signature = getattr(source, "signature", None)
    if metadata is None or not isinstance(signature, dict):
        return _refused("no metadata or source signature")
    if not _plain(metadata):
        return _refused("cluster, cooperative, PDL or scratch launch")
    if list(signature) != list(names):
        return _refused("signature and parameter names differ")
    if descriptors and not TENSOR_MAPS:
        return _refused("TMA descriptors, and KERNELAB_DIRECT_TMA=0")
    tensor_of = dict(slots)
    descriptor_of = {position: (index, d) for position, index, d in descriptors}
    # one metadata entry per descriptor parameter, in parameter order
    descriptor_metadata = list(getattr(metadata, "tensordesc_meta", None) or [])
    values, pointer_slots, map_slots = [], [], []
    for position, (name, value) in enumerate(zip(names, template, strict=True)):
        kind = signature[name]
        if kind == "constexpr":
            continue
        if not isinstance(kind, str):
            return _refused(f"{name}: a tuple of arguments")
        if kind.startswith("tensordesc"):
            if position not in descriptor_of or not descriptor_metadata:
                return _refused(f"{name}: a descriptor without its tensor or metadata")
            index, descriptor = descriptor_of[position]
            maps, why_not = _tensor_maps(descriptor, descriptor_metadata.pop(0))
            if maps is None:
                return _refused(f"{name}: {why_not}")
            map_slots.append((len(values), index, maps))
            values.append(ctypes.create_string_buffer(tensor_maps.TENSOR_MAP_BYTES))  # its size
            values.extend(ctypes.c_int32(v) for v in maps.shape)
            values.extend(ctypes.c_int64(v) for v in maps.strides)
        elif kind.startswith("*") and position in tensor_of:
            pointer_slots.append((len(values), tensor_of[position]))
            values.append(ctypes.c_uint64(0))
        elif kind.startswith("*") and hasattr(value, "data_ptr"):
            # a kept workspace: the plan holds the tensor, so its address stays
            values.append(ctypes.c_uint64(value.data_ptr()))
        elif kind in SCALAR_TYPES and isinstance(value, (int, float)):
            values.append(SCALAR_TYPES[kind](value))
        else:
            return _refused(f"{name}: {kind} {type(value).__name__} not packed here")
    if descriptor_metadata:
        return _refused("metadata for descriptors the signature does not have")
    sizes = image_parameter_sizes(compiled.function)
    if sizes is None or len(sizes) < len(values):
        return _refused(f"image parameters {sizes} for {len(values)} values")
    hidden = sizes[len(values) :]
    if any(size != POINTER_BYTES for size in hidden):
        return _refused(f"hidden parameters of sizes {hidden}")
    values.extend(ctypes.c_uint64(0) for _ in hidden)  # scratch pointers, unused: null
    if [ctypes.sizeof(v) for v in values] != sizes:
        return _refused(f"image sizes {sizes}, expected {[ctypes.sizeof(v) for v in values]}")
    return DirectLaunch(
        function_handle=compiled.function,
        grid=grid,
        block=metadata.num_warps * 32,
        shared_bytes=metadata.shared,
        values=values,
        pointer_slots=pointer_slots,
        map_slots=map_slots,
    )


def _tensor_maps(descriptor, metadata) -> tuple[tensor_maps.TensorMaps | None, str]:
    """The descriptor's TensorMaps, or None and why not."""
    if metadata is None:
        return None, "decomposed by Triton (no descriptor metadata)"
    try:
        return tensor_maps.TensorMaps(descriptor, metadata), ""
    except Exception as exc:  # an unfamiliar Triton: its launcher still encodes the map itself
        return None, f"{type(exc).__name__}: {exc}"[:200]


def _refused(reason: str) -> None:
    """build()'s None, with the reason kept in last_refusal for whoever asks why."""
    global last_refusal
    last_refusal = reason
    return None
