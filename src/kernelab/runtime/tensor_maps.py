"""Tensor maps for a planned TMA launch, encoded once per tensor address.

A kernel that takes a host-side TensorDescriptor (the Triton matmul, the shared-row softmax)
receives it as a CUtensorMap: 128 bytes, passed by value, that hold the tensor's address,
sizes, byte strides, box and swizzle. Triton's launcher encodes a fresh one on every call
(make_tensordesc_arg, one cuTensorMapEncodeTiled per descriptor). Within a plan the sizes,
strides, dtype and alignment are fixed by the plan's key, so the map depends only on the
address: a TensorMaps keeps the maps it has encoded by address, and a repeated call (the
same input, or the caching allocator handing back the same block for the output) reuses one.

Encoding is left to Triton's own make_tensordesc_arg, so the bytes are exactly those its
launcher would pass (swizzle, OOB fill, L2 promotion, its driver-version fixes); kernelab only
keeps the result. Triton returns it as a PyCUtensorMap, a C object holding the map after its
object header, aligned to the map's alignment; nothing in Python exposes the bytes, so
map_address() finds them from the object's size (the map is its last field) and refuses any
other size. A map is used only once its first 8 bytes are seen to hold the tensor's address
(where the driver's encoding put it on the H100): a layout that moved is refused
at build, and Triton's launcher takes the call.
"""

from __future__ import annotations

import copy
import ctypes
import inspect

TENSOR_MAP_BYTES = 128
# what PyCUtensorMapObject measures: a 16-byte object header padded to the map's alignment,
# then the map. Triton 3.9 aligns to 64 (driver.c, read here), Triton 3.6 to 128 (basicsize 256,
# the map's first word at byte 128, as printed on the H100)
PY_TENSOR_MAP_BYTES = (192, 256)
# distinct addresses remembered per descriptor parameter; past that the cache starts over
MAPS_PER_PARAMETER = 64


def _triton_encoder():
    """Triton's make_tensordesc_arg(descriptor, metadata, ...) with its version's arity: the
    result is [tensor map, *shape, *strides] where metadata is given."""
    from triton.backends.nvidia import driver

    encode = driver.make_tensordesc_arg
    extra = [None] * (len(inspect.signature(encode).parameters) - 2)
    return lambda descriptor, metadata: encode(descriptor, metadata, *extra)


def map_address(tensor_map) -> int | None:
    """Where the 128 bytes of Triton's tensor map object lie, or None for a layout not known."""
    kind = type(tensor_map)
    if kind.__name__ != "PyCUtensorMap" or kind.__basicsize__ not in PY_TENSOR_MAP_BYTES:
        return None
    return id(tensor_map) + kind.__basicsize__ - TENSOR_MAP_BYTES


def holds_address(address: int, pointer: int) -> bool:
    """Whether the map at address starts with the tensor address pointer."""
    return ctypes.c_uint64.from_address(address).value == pointer


class TensorMaps:
    """The tensor maps of one descriptor parameter of a planned launch, by tensor address."""

    def __init__(self, descriptor, metadata):
        """descriptor: the TensorDescriptor recorded with the plan (its base one of the call's
        tensors); metadata: the compiled kernel's tensordesc_meta entry for this parameter.
        Raises ValueError when Triton's encoding is not the form expected here."""
        self._metadata = metadata
        self._encode = _triton_encoder()
        expanded = self._encode(descriptor, metadata)
        rank = len(descriptor.shape)
        if len(expanded) != 1 + 2 * rank or not all(type(v) is int for v in expanded[1:]):
            raise ValueError(f"unexpected expansion of a tensor descriptor: {expanded!r}")
        address = map_address(expanded[0])
        if address is None:
            raise ValueError(f"unknown tensor map object {type(expanded[0])!r}")
        if not holds_address(address, descriptor.base.data_ptr()):
            raise ValueError("the tensor map's bytes do not start with the tensor's address")
        self.shape = tuple(expanded[1 : 1 + rank])  # passed as i32 after the map
        self.strides = tuple(expanded[1 + rank :])  # passed as i64 after the shape
        # tensor address -> (Triton's map object, which keeps the bytes alive; their address)
        self._maps = {descriptor.base.data_ptr(): (expanded[0], address)}
        self._descriptor = copy.copy(descriptor)  # rebased on each new address: hold no tensor
        self._descriptor.base = None

    def address(self, tensor) -> int:
        """The address of the map's bytes for this tensor; encodes it on first sight. The
        returned bytes stay valid until the next call (cuLaunchKernel copies them)."""
        pointer = tensor.data_ptr()
        held = self._maps.get(pointer)
        if held is None:
            rebased = copy.copy(self._descriptor)
            rebased.base = tensor
            tensor_map = self._encode(rebased, self._metadata)[0]
            if len(self._maps) >= MAPS_PER_PARAMETER:
                self._maps.clear()
            address = map_address(tensor_map)
            if address is None or not holds_address(address, pointer):
                # the build saw the layout hold; a map that breaks it must never be launched
                raise RuntimeError("a tensor map encoded for this plan has an unknown layout")
            held = self._maps[pointer] = (tensor_map, address)
        return held[1]
