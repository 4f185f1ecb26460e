"""The judge's comparisons of whole outputs (and inputs) a block at a time, so that the
copies they make (float64 upcasts, differences, masks) are a block's, never a whole
tensor's: the memory plan (kernelab.evaluate.footprint) counts CHECK_BYTES_PER_ELEMENT per
element of a block, not several float64 copies of the largest output.

`compare` gives kernelab.harness.check.compare's verdict (the same rules, in the same order,
with the same messages); a tensor of at most one block goes to compare itself. Sums are a
block's sums added up, so an error can differ from compare's in its last bits. `allclose`
is torch.allclose over the blocks, `relative_error` the norm error over the finite elements,
and `mutation` kernelab.harness.check's account of an input the candidate wrote into.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

from kernelab.errors import KernelabError
from kernelab.harness.check import (
    WORST_SHOWN,
    CheckResult,
    _fmt,
    _index,
    _storage_bytes,
    _subnormal_allowance,
)
from kernelab.harness.check import compare as whole_compare
from kernelab.harness.tolerances import threshold, threshold_explanation
from kernelab.spec.op_spec import name_of

CHECK_BLOCK = 1 << 21  # elements a comparison takes at a time (in each tensor it compares)
CHECK_BYTES_PER_ELEMENT = 64  # the most the blocks hold at once, per element of a block


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


def _block(block: int | None) -> int:
    """Elements per block: CHECK_BLOCK unless told."""
    return block or CHECK_BLOCK


def pieces(*tensors, block: int | None = None) -> Iterator[tuple[int, list]]:
    """(flat offset, [flat piece of each tensor]) over tensors of one shape, in row-major
    order; a piece is a view where the tensor allows, else a copy of at most a block."""
    block = _block(block)
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


def _listing(found: list[tuple[int, float, float]], shape) -> str:
    return "; ".join(
        f"{_index(position, shape)} got {_fmt(got)} expected {_fmt(want)}"
        for position, got, want in found
    )


def compare(out, ref, *, dtype: str, block: int | None = None) -> CheckResult:
    """kernelab.harness.check.compare(out, ref, dtype=dtype) for an output of ref's shape,
    a block at a time."""
    import torch

    if (
        not isinstance(out, torch.Tensor)
        or tuple(out.shape) != tuple(ref.shape)
        or out.numel() <= _block(block)
    ):
        return whole_compare(out, ref, dtype=dtype)
    limit = threshold(dtype, None)
    try:
        out_name = name_of(out.dtype)
        limit = threshold(dtype, None, out_name)
    except KernelabError:
        message = f"output dtype {out.dtype} is not a floating type kernelab checks"
        return CheckResult(False, math.inf, limit, message)
    inf = float("inf")
    shape = tuple(ref.shape)
    bad_count = nan_count = inf_count = finite_count = 0
    first_bad: list[tuple[int, float, float]] = []
    low, high, largest = inf, -inf, 0.0  # the finite reference's range and largest magnitude
    first_value, constant = None, True  # the output where the reference is first finite
    difference = scale = 0.0  # sums of squares over the finite elements
    for offset, (o, r) in pieces(out.detach(), ref.detach(), block=block):
        o64 = o.to(device=r.device, dtype=torch.float64, copy=True)  # its own: changed here
        r64 = r.to(torch.float64)
        bad = (
            (o64.isnan() != r64.isnan())
            | ((o64 == inf) != (r64 == inf))
            | ((o64 == -inf) != (r64 == -inf))
        )
        finite = torch.isfinite(r64)
        if bool(bad.any()):
            bad_count += int(bad.sum())
            nan_count += int((o64.isnan() & finite).sum())
            inf_count += int((o64.isinf() & finite).sum())
            if len(first_bad) < WORST_SHOWN:
                where = torch.nonzero(bad).reshape(-1)[: WORST_SHOWN - len(first_bad)].tolist()
                first_bad += [(offset + p, float(o64[p]), float(r64[p])) for p in where]
        del bad
        if bad_count:
            continue  # the verdict is the non-finite mismatch; only its counts go on
        count = int(finite.sum())
        if not count:
            continue
        finite_count += count
        everywhere = count == finite.numel()
        if everywhere:
            lo, hi = torch.aminmax(r64)
            values = o64
        else:
            lo = r64.masked_fill(~finite, inf).min()
            hi = r64.masked_fill(~finite, -inf).max()
            values = None
        low, high = min(low, float(lo)), max(high, float(hi))
        largest = max(largest, abs(low), abs(high))
        if first_value is None:
            at = 0 if everywhere else int(torch.nonzero(finite).reshape(-1)[0])
            first_value = float(o64[at])
        if constant:
            if values is None:
                constant = bool(((o64 == first_value) | ~finite).all())
            else:
                constant = bool((values == first_value).all())
        kept = r64 if everywhere else r64.masked_fill(~finite, 0.0)
        scale += float(torch.linalg.vector_norm(kept)) ** 2
        del kept
        o64 = o64.sub_(r64)
        if not everywhere:
            o64.masked_fill_(~finite, 0.0)
        difference += float(torch.linalg.vector_norm(o64)) ** 2
        del o64, r64, finite
    if bad_count:
        parts = [f"{n} {what}" for n, what in ((nan_count, "NaN"), (inf_count, "Inf")) if n]
        head = (
            f"output has {' and '.join(parts)} where the reference is finite"
            if parts
            else "output's NaN/Inf pattern differs from the reference's"
        )
        return CheckResult(
            False, math.inf, limit,
            f"{head} ({bad_count} of {out.numel()} elements disagree); first: "
            f"{_listing(first_bad, shape)}",
        )  # fmt: skip
    if finite_count == 0:
        return CheckResult(True, 0.0, limit, "every element is non-finite, as in the reference")
    difference, scale = math.sqrt(difference), math.sqrt(scale)
    error = difference / scale if scale > 0 else difference
    if finite_count > 1 and constant and high - low > limit * largest:
        return CheckResult(
            False, error, limit,
            f"output is constant (all {_fmt(first_value)}) but the reference is not (it ranges "
            f"from {_fmt(low)} to {_fmt(high)})",
        )  # fmt: skip
    if error <= limit:
        return CheckResult(
            True, error, limit, f"relative norm error {error:.3g} <= threshold {limit:.3g}"
        )
    allowance = _subnormal_allowance(out.dtype, finite_count)
    if difference <= limit * scale + allowance:
        return CheckResult(
            True, error, limit,
            f"relative norm error {error:.3g} over {limit:.3g}, but the difference "
            f"{difference:.3g} is within the threshold plus what rounding to "
            f"{out_name}'s subnormals alone makes ({allowance:.3g})",
        )  # fmt: skip
    worst: list[tuple[float, int, float, float]] = []
    for offset, (o, r) in pieces(out.detach(), ref.detach(), block=block):
        o64 = o.to(device=r.device, dtype=torch.float64)
        r64 = r.to(torch.float64)
        gap = (o64 - r64).abs_().masked_fill_(~torch.isfinite(r64), 0.0)
        top = torch.topk(gap, min(WORST_SHOWN, gap.numel()))
        worst += [
            (float(v), offset + int(p), float(o64[p]), float(r64[p]))
            for v, p in zip(top.values.tolist(), top.indices.tolist(), strict=True)
        ]
        worst = sorted(worst, key=lambda item: -item[0])[:WORST_SHOWN]
    explanation = threshold_explanation(dtype, None, out_name)
    return CheckResult(
        False, error, limit,
        f"relative norm error {error:.3g} exceeds the threshold {limit:.3g} ({explanation}); "
        f"worst elements: {_listing([(p, g, w) for _, p, g, w in worst], shape)}",
    )  # fmt: skip


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


def same_bytes(a, b, *, block: int | None = None) -> bool:
    """Whether two tensors' storages hold the same bytes (padding included), a block of
    bytes (8 x CHECK_BLOCK unless told) at a time: torch.equal on a GPU makes a mask as large
    as what it compares."""
    import torch

    block = block or 8 * CHECK_BLOCK
    x, y = _storage_bytes(a), _storage_bytes(b)
    if x.numel() != y.numel():
        return False
    return all(
        torch.equal(x[start : start + block], y[start : start + block])
        for start in range(0, x.numel(), block)
    )


def mutation(originals, given, *, block: int | None = None) -> str | None:
    """How the candidate changed its inputs, or None when every byte is as it was:
    kernelab.harness.check's account (None stands for a leaf not checked), a block at a
    time."""
    import torch

    for position, (original, copy) in enumerate(zip(originals, given, strict=True)):
        if not isinstance(original, torch.Tensor) or same_bytes(
            original, copy, block=8 * _block(block)
        ):
            continue
        changed = 0
        if tuple(original.shape) == tuple(copy.shape):
            for _, (before, after) in pieces(original.detach(), copy.detach(), block=block):
                before, after = before.to(torch.float64), after.to(torch.float64)
                same = (before == after) | (before.isnan() & after.isnan())
                changed += int((~same).sum())
        else:
            changed = original.numel()
        label = f"input {position} ({name_of(original.dtype)}{list(original.shape)})"
        if changed == 0:
            return f"the solution wrote into {label} outside its elements (its padding)"
        return f"the solution wrote into {label}: {changed} of {original.numel()} elements changed"
    return None
