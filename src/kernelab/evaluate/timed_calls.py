"""Many calls of one implementation, each on inputs that differ from the previous call's.

The same loop times the solution (in its worker), eager PyTorch and torch.compile of the
reference (in the judge), and a call that does nothing (the judge's measure of the loop's own
cost). Before call i, outside the clock:

- the tensors of input set i % K of the pool are copied into one fixed tree of tensors, the
  one every call receives: the same addresses each time, new values each time, so an answer
  remembered per pointer (or per tensor object) is the previous set's answer, and wrong;
- the output buffers (GPU MODE preallocates them) are filled with NaN;
- in cold mode on a GPU, a buffer twice the L2's size is written, so inputs come from HBM.

On a GPU a sample runs from a start event recorded on an idle device to an end event recorded
after a device-wide synchronise: work the call left on another stream, or still queued when
it returned, is inside the clock. The price is the synchronise's latency (a few us), paid
equally by the solution and by the baselines. On a CPU a sample is the host clock around the
call.

Every call's output is kept (copied after the synchronise, outside the clock). The worker
sends the judge a fingerprint of each in its reply to the batch, inside the judge's own
clock (kernelab.evaluate.observed); only then does the judge choose, from a secret the worker
never holds, which outputs to see, and it checks each against its fingerprint and against
the reference of its input set. Nothing in the worker knows before or during the batch which
calls will be checked, and an output made after the batch does not match its fingerprint
unless it is the output the call returned.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from kernelab.evaluate import trees
from kernelab.harness.timing import flush_size_bytes

# An odd 64-bit constant (as a signed int64): the multiplier that mixes a word with its position.
_MIX = -0x61C8864680B583EB
_positions: dict = {}  # (words, device) -> arange, kept: a batch fingerprints one size again and again


def _tensor_fingerprint(tensor) -> str:
    import torch

    if type(tensor) not in (torch.Tensor, torch.nn.Parameter):
        return f"a {type(tensor).__name__}"
    if tensor.layout != torch.strided or tensor.device.type == "meta":
        return f"a {tensor.layout} tensor on {tensor.device}"
    flat = tensor.detach().contiguous().reshape(-1).view(torch.uint8)
    if flat.numel() % 8 or flat.storage_offset() % 8 or flat.numel() == 0:
        padded = torch.zeros(_padded(flat.numel()), dtype=torch.uint8, device=flat.device)
        padded[: flat.numel()] = flat
        flat = padded
    words = flat.view(torch.int64)
    key = (words.numel(), str(words.device))
    if key not in _positions:
        _positions.clear()
        _positions[key] = torch.arange(words.numel(), dtype=torch.int64, device=words.device)
    # Each word xor its position, times an odd constant, summed (all mod 2**64): a changed,
    # moved or swapped word changes the sum, and the sum needs every word of the output.
    mixed = (words ^ _positions[key]).mul_(_MIX)
    return f"{tensor.dtype}{list(tensor.shape)}:{int(mixed.sum())}"


def _padded(size: int) -> int:
    return max(8, (size + 7) // 8 * 8)


def fingerprint(tree: Any) -> list[str]:
    """One string per leaf of an output: its path, and for a tensor its dtype, shape and a
    64-bit mix of every byte and its position; equal for the same values on any device."""
    found = [type(tree).__name__]
    for path, leaf in trees.leaves(tree):
        if isinstance(leaf, trees.tensor_type()):
            try:
                found.append(f"{path} {_tensor_fingerprint(leaf)}")
            except Exception as exc:
                found.append(f"{path} unreadable {type(exc).__name__}")
        else:
            found.append(f"{path} {type(leaf).__name__} {leaf!r}"[:500])
    return found


def load_set(target: Any, source: Any) -> None:
    """Copy the tensor leaves of `source` into those of `target` (same structure, shapes)."""
    for (_, dst), (_, src) in zip(trees.tensors(target), trees.tensors(source), strict=True):
        dst.copy_(src)


def compatible(pool: list) -> str | None:
    """Why the input sets cannot share one tree of tensors, or None when they can."""
    first = [(path, tuple(t.shape), t.dtype) for path, t in trees.tensors(pool[0])]
    for index, data in enumerate(pool[1:], start=1):
        theirs = [(path, tuple(t.shape), t.dtype) for path, t in trees.tensors(data)]
        if theirs != first:
            return f"input set {index} differs in structure, shape or dtype from set 0"
    return None


def _kept(tensor):
    """A copy of an output tensor (one the judge would refuse to compare, as it is)."""
    import torch

    if type(tensor) is not torch.Tensor or tensor.layout != torch.strided or tensor.is_meta:
        return tensor
    return tensor.detach().clone()


def _flush_buffer(torch, device, mode: str):
    if device.type != "cuda" or mode != "cold":
        return None
    l2 = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0)
    return torch.empty(max(1, flush_size_bytes(l2) // 4), dtype=torch.int32, device=device)


def run_calls(
    call: Callable[[Any], Any],
    pool: list,
    *,
    buffers: set[str],
    calls: int,
    mode: str = "cold",
    keep: bool = True,
) -> tuple[list[float], list[Any]]:
    """`calls` calls of `call`; (the time of each in ms, the output of each when `keep`)."""
    import torch

    data = trees.clone(pool[0])
    device = next((t.device for _, t in trees.tensors(data)), torch.device("cpu"))
    on_gpu = device.type == "cuda"
    flush = _flush_buffer(torch, device, mode)
    samples: list[float] = []
    pairs = []
    outputs: list[Any] = []
    for index in range(calls):
        load_set(data, pool[index % len(pool)])
        trees.poison(data, buffers)
        if flush is not None:
            flush.zero_()
        if on_gpu:
            torch.cuda.synchronize()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            out = call(data)
            torch.cuda.synchronize()  # every stream of the device, before the clock stops
            end.record()
            pairs.append((start, end))
        else:
            begin = time.perf_counter()
            out = call(data)
            samples.append((time.perf_counter() - begin) * 1e3)
        if keep:
            outputs.append(trees.map_tensors(_kept, out))
    if on_gpu:
        torch.cuda.synchronize()
        samples = [start.elapsed_time(end) for start, end in pairs]
    return samples, outputs
