"""Nested problem data: the tuples, lists and dicts of tensors that problems pass around.

A KernelBench problem hands its model a list of inputs; a GPU MODE problem hands its kernel
one `data` object, usually a tuple, sometimes holding preallocated output buffers. The
evaluator treats both as a tree whose leaves are tensors or plain values, and needs to copy
it, move it, upcast it and see which leaves changed. Copies keep each tensor's exact layout
(strides, offset, padding bytes: kernelab.harness.check.copy_with_layout), so a candidate
sees the same memory the reference saw.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kernelab.errors import KernelabError
from kernelab.harness.blocks import same_bytes
from kernelab.harness.check import copy_with_layout, mutation
from kernelab.spec.op_spec import name_of


def _is_tensor(value) -> bool:
    import torch

    return isinstance(value, torch.Tensor)


def tensor_type():
    import torch

    return torch.Tensor


def map_tensors(fn: Callable, tree: Any) -> Any:
    """The same structure with fn applied to every tensor leaf; other leaves kept as they are."""
    if _is_tensor(tree):
        return fn(tree)
    if isinstance(tree, tuple) and hasattr(tree, "_fields"):  # a namedtuple
        return type(tree)(*(map_tensors(fn, item) for item in tree))
    if isinstance(tree, (tuple, list)):
        return type(tree)(map_tensors(fn, item) for item in tree)
    if isinstance(tree, dict):
        return {key: map_tensors(fn, value) for key, value in tree.items()}
    return tree


def leaves(tree: Any, path: str = "") -> list[tuple[str, Any]]:
    """Every leaf with its path ("[0]", "['x']", "" for a bare tensor), in a fixed order."""
    if _is_tensor(tree):
        return [(path, tree)]
    if isinstance(tree, (tuple, list)):
        found = []
        for index, item in enumerate(tree):
            found.extend(leaves(item, f"{path}[{index}]"))
        return found
    if isinstance(tree, dict):
        found = []
        for key, value in tree.items():
            found.extend(leaves(value, f"{path}[{key!r}]"))
        return found
    return [(path, tree)]


def tensors(tree: Any) -> list[tuple[str, Any]]:
    return [(path, leaf) for path, leaf in leaves(tree) if _is_tensor(leaf)]


def clone(tree: Any) -> Any:
    """A deep copy of every tensor, layout and padding bytes included."""

    return map_tensors(copy_with_layout, tree)


def to_device(tree: Any, device) -> Any:
    return map_tensors(lambda t: t if t.device == device else t.to(device), tree)


def upcast(tree: Any) -> Any:
    """Floating tensors as float64 (the exact reference's inputs); others copied as they are."""
    import torch

    def up(tensor):
        if tensor.is_floating_point():
            return tensor.detach().to(torch.float64)
        return tensor.detach().clone()

    return map_tensors(up, tree)


def first_float_dtype(tree: Any):
    """The torch dtype of the first floating tensor in the tree, or None."""
    for _, tensor in tensors(tree):
        if tensor.is_floating_point():
            return tensor.dtype
    return None


def changed_paths(before: Any, after: Any) -> list[str]:
    """The tensor leaves whose bytes differ between two trees of the same structure."""
    old, new = tensors(before), tensors(after)
    return [
        path
        for (path, original), (_, copy) in zip(old, new, strict=True)
        if not same_bytes(original, copy)
    ]


def same_structure(a, b) -> bool:
    """Whether two trees have the same paths, with tensors where the other has tensors."""
    import torch

    ours, theirs = leaves(a), leaves(b)
    return len(ours) == len(theirs) and all(
        p == q and isinstance(x, torch.Tensor) == isinstance(y, torch.Tensor)
        for (p, x), (q, y) in zip(ours, theirs, strict=True)
    )


def same_set(a, b) -> bool:
    """Whether two input sets are the same: structure, every tensor's bytes, other leaves."""
    import torch

    if not same_structure(a, b):
        return False
    pairs = list(zip(leaves(a), leaves(b), strict=True))
    for (_, x), (_, y) in pairs:
        if isinstance(x, torch.Tensor):
            if x.shape != y.shape or x.dtype != y.dtype:
                return False
        elif type(x) is not type(y) or x != y:
            return False
    return not changed_paths(a, b)


def mutation_message(before: Any, after: Any, allowed: set[str]) -> str | None:
    """How the candidate changed an input it should only read, or None (compared a block
    at a time: kernelab.harness.check.mutation).

    Leaves in `allowed` (the output buffers the reference itself writes) are skipped.
    """
    old = [None if path in allowed else leaf for path, leaf in tensors(before)]
    new = [None if path in allowed else leaf for path, leaf in tensors(after)]
    return mutation(old, new, who="the solution")


def poison(tree: Any, paths: set[str]) -> None:
    """Fill the floating tensors at `paths` with NaN: output buffers a kernel must overwrite."""
    for path, tensor in tensors(tree):
        if path in paths and tensor.is_floating_point():
            tensor.fill_(float("nan"))


def describe(tree: Any) -> str:
    """ "tuple of 2: fp32[128, 64], fp32[64]" for messages."""

    def one(leaf) -> str:
        if not _is_tensor(leaf):
            return type(leaf).__name__
        try:
            dtype = name_of(leaf.dtype)
        except KernelabError:
            dtype = str(leaf.dtype).removeprefix("torch.")
        return f"{dtype}{list(leaf.shape)}"

    if _is_tensor(tree):
        return one(tree)
    items = [one(leaf) for _, leaf in leaves(tree)]
    return f"{type(tree).__name__} of {len(items)}: {', '.join(items)}"
