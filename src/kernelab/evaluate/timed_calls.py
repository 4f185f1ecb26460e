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
call. The outputs of the calls listed in `sampled` are copied (after the synchronise) and
returned for the judge to check against the reference of their input set.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from kernelab.evaluate import trees


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


def _flush_buffer(torch, device, mode: str):
    if device.type != "cuda" or mode != "cold":
        return None
    from kernelab.harness.timing import flush_size_bytes

    l2 = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0)
    return torch.empty(max(1, flush_size_bytes(l2) // 4), dtype=torch.int32, device=device)


def run_calls(
    call: Callable[[Any], Any],
    pool: list,
    *,
    buffers: set[str],
    calls: int,
    sampled: set[int],
    mode: str = "cold",
) -> tuple[list[float], dict[int, Any]]:
    """`calls` calls of `call`; (the time of each in ms, {index: output} for `sampled`)."""
    import torch

    data = trees.clone(pool[0])
    device = next((t.device for _, t in trees.tensors(data)), torch.device("cpu"))
    on_gpu = device.type == "cuda"
    flush = _flush_buffer(torch, device, mode)
    samples: list[float] = []
    pairs = []
    outputs: dict[int, Any] = {}
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
        if index in sampled:
            outputs[index] = trees.clone(out)
    if on_gpu:
        torch.cuda.synchronize()
        samples = [start.elapsed_time(end) for start, end in pairs]
    return samples, outputs
