"""Inputs in memory the judge shares with the worker: how the judge sees, with its own eyes,
what a call did to its inputs.

On a CPU, the judge writes each call's inputs into a memfd that it maps and the worker maps
too (the fd is handed over at the worker's start). The solution's input tensors are views
of those very pages, so after the call the judge reads the bytes back from its own mapping:
no reply of the worker's says what the inputs hold afterwards. The worker builds its views
once per layout and keeps them, so that every call with the same shapes gets the same tensor
objects at the same addresses, with new values (an answer remembered per pointer or per
tensor object is the previous call's, and wrong).

A layout is the input tree with each tensor replaced by a Slot: where its storage bytes sit
in the arena, and the dtype, sizes, strides and offset that make it the same tensor.
"""

from __future__ import annotations

import fcntl
import mmap
import os
from dataclasses import dataclass
from typing import Any

from kernelab.evaluate import trees
from kernelab.harness.blocks import storage_bytes

ALIGN = 64


@dataclass(frozen=True)
class Slot:
    at: int  # byte offset of the storage in the arena
    nbytes: int  # the storage's bytes (padding included)
    dtype: Any  # torch.dtype
    size: tuple
    stride: tuple
    offset: int  # storage offset, in elements


def _aligned(size: int) -> int:
    return (size + ALIGN - 1) // ALIGN * ALIGN


def tree_bytes(tree) -> int:
    """The arena bytes a tree of tensors needs."""
    return sum(_aligned(t.untyped_storage().nbytes()) for _, t in trees.tensors(tree))


def map_slots(fn, tree):
    if isinstance(tree, Slot):
        return fn(tree)
    if isinstance(tree, tuple) and hasattr(tree, "_fields"):
        return type(tree)(*(map_slots(fn, item) for item in tree))
    if isinstance(tree, (tuple, list)):
        return type(tree)(map_slots(fn, item) for item in tree)
    if isinstance(tree, dict):
        return {key: map_slots(fn, value) for key, value in tree.items()}
    return tree


def _tensor_on(storage, slot: Slot, base_elements: int):
    import torch

    empty = torch.empty(0, dtype=slot.dtype)
    return empty.set_(storage, base_elements + slot.offset, slot.size, slot.stride)


class Arena:
    """A shared mapping of `size` bytes; the judge creates it, the worker opens it by fd."""

    def __init__(self, size: int, fd: int | None = None):
        import torch

        self.size = max(ALIGN, _aligned(size))
        if fd is None:
            fd = os.memfd_create("kernelab-inputs", os.MFD_ALLOW_SEALING)
            os.ftruncate(fd, self.size)
            # The worker maps the same file: sealed at its size, it cannot truncate it under
            # the judge's own mapping (whose next read would then die of SIGBUS).
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS,
                        fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL)  # fmt: skip
        self.fd = fd
        self.map = mmap.mmap(fd, self.size)
        self.bytes = torch.frombuffer(self.map, dtype=torch.uint8)
        self._views: dict = {}

    # --- the judge's side --------------------------------------------------------------

    def write(self, tree):
        """Copy the tree's tensors into the arena (storage bytes, padding included); the
        layout that names where each one went."""
        cursor = 0

        def place(tensor):
            nonlocal cursor
            raw = storage_bytes(tensor.detach())
            nbytes = raw.numel()
            if cursor + nbytes > self.size:
                raise ValueError(f"the inputs need more than the arena's {self.size} bytes")
            self.bytes[cursor : cursor + nbytes].copy_(raw)
            slot = Slot(cursor, nbytes, tensor.dtype, tuple(tensor.size()), tuple(tensor.stride()),
                        tensor.storage_offset())  # fmt: skip
            cursor += _aligned(nbytes)
            return slot

        return trees.map_tensors(place, tree)

    def read(self, layout):
        """The judge's own copy of what the arena holds now, as tensors shaped by `layout`."""

        def copy(slot: Slot):
            region = self.bytes[slot.at : slot.at + slot.nbytes].clone()
            return _tensor_on(region.untyped_storage(), slot, 0)

        return map_slots(copy, layout)

    # --- the worker's side -------------------------------------------------------------

    def view(self, layout):
        """Tensors over the shared pages, shaped by `layout`: the same objects for the same
        layout, call after call."""
        key = repr(layout)
        if key not in self._views:
            storage = self.bytes.untyped_storage()

            def alias(slot: Slot):
                itemsize = slot.dtype.itemsize
                return _tensor_on(storage, slot, slot.at // itemsize)

            self._views[key] = map_slots(alias, layout)
        return self._views[key]

    def close(self) -> None:
        self._views.clear()
        del self.bytes
        try:
            self.map.close()
        except BufferError:  # a tensor still views it: the mapping goes with the process
            pass
        os.close(self.fd)
