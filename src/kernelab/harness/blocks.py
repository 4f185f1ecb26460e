"""Whole tensors compared a block at a time, so that the copies a comparison makes (float64
upcasts, differences, masks) are a block's, never a whole tensor's.

kernelab.harness.check.compare and .mutation walk their tensors with `pieces`; the judge's
memory plan (kernelab.evaluate.footprint) counts CHECK_BYTES_PER_ELEMENT per element of a
block, not several float64 copies of the largest output. Sums are a block's sums added up,
so a norm can differ in its last bits with the block size; a verdict cannot.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

CHECK_BLOCK = 1 << 21  # elements a comparison takes at a time (in each tensor it compares)
# The most a comparison holds at once per element of a block: two float64 upcasts (16 B), a
# float64 difference (8 B), boolean masks and torch's temporaries (the rest).
CHECK_BYTES_PER_ELEMENT = 64


def block_size(block: int | None) -> int:
    """Elements per block: CHECK_BLOCK unless told (read at each call: tests shrink it)."""
    return block or CHECK_BLOCK


def _index_plan(shape: tuple, contiguous: bool, block: int) -> Iterator[tuple[int, object]]:
    """(flat offset, index) for pieces of a tensor of `shape` in row-major order, each of at
    most `block` elements where a row allows: the flat elements of contiguous tensors,
    slices of rows, or a row's own pieces when one row is larger than a block."""
    numel = math.prod(shape)
    if numel == 0:
        return
    if not shape:
        yield 0, ()
        return
    if contiguous:
        for start in range(0, numel, block):
            yield start, ("flat", start, min(numel, start + block))
        return
    row = math.prod(shape[1:])
    if row <= block or len(shape) == 1:
        step = max(1, block // max(1, row))
        for start in range(0, shape[0], step):
            yield start * row, (slice(start, min(shape[0], start + step)),)
        return
    for first in range(shape[0]):
        for offset, rest in _index_plan(shape[1:], False, block):
            yield first * row + offset, (first, *rest)


def pieces(*tensors, block: int | None = None) -> Iterator[tuple[int, list]]:
    """(flat offset, [flat piece of each tensor]) over tensors of one shape, in row-major
    order; a piece is a view where the tensor allows, else a copy of at most a block."""
    block = block_size(block)
    shape = tuple(tensors[0].shape)
    contiguous = all(t.is_contiguous() for t in tensors)
    for offset, index in _index_plan(shape, contiguous, block):
        if index and index[0] == "flat":
            _, start, stop = index
            yield offset, [t.reshape(-1)[start:stop] for t in tensors]
        else:
            yield offset, [t[index].reshape(-1) for t in tensors]


def relative_error(out, ref, *, block: int | None = None) -> float:
    """||out - ref|| / ||ref|| over the elements finite in both, in float64 (the absolute
    norm where the reference is all zeros)."""
    import torch

    difference = scale = 0.0  # sums of squares
    for _, (o, r) in pieces(out.detach(), ref.detach(), block=block):
        o64 = o.to(device=r.device, dtype=torch.float64, copy=True)  # its own: changed here
        r64 = r.to(torch.float64)
        finite = torch.isfinite(o64) & torch.isfinite(r64)
        difference += float(torch.linalg.vector_norm(o64.sub_(r64).masked_fill_(~finite, 0))) ** 2
        del o64
        scale += float(torch.linalg.vector_norm(r64.masked_fill(~finite, 0.0))) ** 2
    difference, scale = math.sqrt(difference), math.sqrt(scale)
    return difference / scale if scale > 0 else difference


def allclose(out, ref, *, tolerance: float, block: int | None = None) -> tuple[bool, float]:
    """(torch.allclose(out.double(), ref.double(), atol=rtol=tolerance), the largest
    |out - ref|) over tensors of one shape; the largest difference only where it fails
    (NaN where a difference is NaN, as torch's max gives)."""
    import torch

    ok = True
    for _, (o, r) in pieces(out.detach(), ref.detach(), block=block):
        if not torch.allclose(o.double(), r.to(o.device).double(), atol=tolerance, rtol=tolerance):
            ok = False
            break
    if ok:
        return True, 0.0
    worst = 0.0
    for _, (o, r) in pieces(out.detach(), ref.detach(), block=block):
        gap = float((o.double() - r.to(o.device).double()).abs().max())
        if math.isnan(gap):
            return False, gap
        worst = max(worst, gap)
    return False, worst


def storage_bytes(tensor):
    """Every byte of the tensor's storage, padding included, as a flat uint8 tensor."""
    import torch

    flat = torch.empty(0, dtype=torch.uint8, device=tensor.device)
    return flat.set_(tensor.untyped_storage())


def same_bytes(a, b, *, block: int | None = None) -> bool:
    """Whether two tensors' storages hold the same bytes (padding included), a block of
    bytes (8 x CHECK_BLOCK unless told) at a time: torch.equal on a GPU makes a mask as large
    as what it compares."""
    import torch

    block = block or 8 * CHECK_BLOCK
    x, y = storage_bytes(a), storage_bytes(b)
    if x.numel() != y.numel():
        return False
    return all(
        torch.equal(x[start : start + block], y[start : start + block])
        for start in range(0, x.numel(), block)
    )
