"""Many calls of one implementation, each on inputs that differ from the previous call's.

The same loop times the solution (in its worker), eager PyTorch and torch.compile of the
reference (in the judge), and a call that does nothing (the judge's measure of the loop's own
cost). Before call i, outside the clock:

- call i's input set is copied into one fixed tree of tensors, the one every call receives:
  the same addresses each time, new values each time, so an answer remembered per pointer (or
  per tensor object) is the previous set's answer, and wrong. The set comes from `sets`:
  `Fresh` makes a new one for every call with the problem's generator, from a seed the judge
  draws for that call, so no call's inputs were ever seen before and an answer remembered by
  the inputs' content is never reused. In the worker the seeds come one at a time
  (`Streamed`): call i's seed is handed over only against the fingerprint of call i - 1's
  output, so no call's inputs exist before the previous call's answer is fixed, and no call
  can do (or batch) the work of later ones. `Rotation` hands out the K sets of a pool in
  turn (set i % K), where making a set per call is too slow;
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
unless it is the output the call returned: the fingerprint holds a digest of its bytes that
no other bytes give (kernelab.evaluate.digest), not a sum that nudged low bits can reach.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from kernelab.evaluate import trees
from kernelab.evaluate.digest import digest
from kernelab.harness.timing import flush_size_bytes

UNREADABLE = "unreadable"  # in a fingerprint: a tensor whose bytes could not be digested


def _tensor_fingerprint(tensor) -> str:
    import torch

    if type(tensor) not in (torch.Tensor, torch.nn.Parameter):
        return f"a {type(tensor).__name__}"
    if tensor.layout != torch.strided or tensor.device.type == "meta":
        return f"a {tensor.layout} tensor on {tensor.device}"
    return f"{tensor.dtype}{list(tensor.shape)}:{digest(tensor)}"


def fingerprint(tree: Any) -> list[str]:
    """One string per leaf of an output: its path, and for a tensor its dtype, shape and the
    digest of its bytes (kernelab.evaluate.digest: no other bytes give it); equal for the same
    values on the same kind of device."""
    found = [type(tree).__name__]
    for path, leaf in trees.leaves(tree):
        if isinstance(leaf, trees.tensor_type()):
            try:
                found.append(f"{path} {_tensor_fingerprint(leaf)}")
            except Exception as exc:  # the judge fails a checked call printed so (UNREADABLE)
                found.append(f"{path} {UNREADABLE} {type(exc).__name__}")
        else:
            found.append(f"{path} {type(leaf).__name__} {leaf!r}"[:500])
    return found


class Rotation:
    """The input sets of a pool in turn: call i gets set i % K."""

    def __init__(self, pool: list):
        self.pool = pool

    def first(self) -> Any:
        return self.pool[0]

    def __call__(self, index: int) -> Any:
        return self.pool[index % len(self.pool)]


class Fresh:
    """A new input set for every call: `make(seed)` (the problem's generator) from the call's
    own seed. The judge draws the seeds and makes the same sets again to check the calls it
    chooses."""

    def __init__(self, make: Callable[[int], Any], seeds: list[int]):
        if not seeds:
            raise ValueError("Fresh needs a seed per call")
        self.make, self.seeds = make, seeds
        self._first = None

    def first(self) -> Any:
        if self._first is None:
            self._first = self.make(self.seeds[0])
        return self._first

    def __call__(self, index: int) -> Any:
        if index == 0:
            made, self._first = self.first(), None  # not kept past its call
            return made
        return self.make(self.seeds[index])


class Streamed:
    """A new input set for every call, `make(seed)`, each seed asked for when its call comes:
    `ask(index, printed)` returns call `index`'s seed, given the fingerprint of call
    index - 1's output (None for the first call). The worker asks the judge."""

    def __init__(self, make: Callable[[int], Any], ask: Callable[[int, Any], int]):
        self.make, self.ask = make, ask
        self._printed = None  # the fingerprint of the last call's output
        self._first = None

    def first(self) -> Any:
        if self._first is None:
            self._first = self.make(self.ask(0, None))
        return self._first

    def __call__(self, index: int) -> Any:
        if index == 0:
            made, self._first = self.first(), None
            return made
        return self.make(self.ask(index, self._printed))

    def after(self, index: int, printed: list[str]) -> None:
        self._printed = printed


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
    return tensor.detach().resolve_conj().resolve_neg().clone()


def _flush_buffer(torch, device, mode: str):
    if device.type != "cuda" or mode != "cold":
        return None
    l2 = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0)
    return torch.empty(max(1, flush_size_bytes(l2) // 4), dtype=torch.int32, device=device)


def run_calls(
    call: Callable[[Any], Any],
    sets: Rotation | Fresh | Streamed,
    *,
    buffers: set[str],
    calls: int,
    mode: str = "cold",
    keep: bool = True,
) -> tuple[list[float], list[Any], list[list[str]]]:
    """`calls` calls of `call`, call i on `sets(i)`; (the time of each in ms, and when `keep`
    the output of each and its fingerprint, taken right after the call, outside the clock).
    A call's own output is dropped once it is copied: it is not held while the next set is
    made, nor during the next call (the memory plan: footprint.SetSize.batch)."""
    import torch

    if isinstance(sets, Fresh) and len(sets.seeds) < calls:
        raise ValueError(f"{calls} calls need {calls} seeds, got {len(sets.seeds)}")
    if isinstance(sets, Streamed) and not keep:
        raise ValueError("streamed seeds are asked for against the kept outputs' fingerprints")
    data = trees.clone(sets.first())
    device = next((t.device for _, t in trees.tensors(data)), torch.device("cpu"))
    on_gpu = device.type == "cuda"
    flush = _flush_buffer(torch, device, mode)
    samples: list[float] = []
    pairs = []
    outputs: list[Any] = []
    prints: list[list[str]] = []
    for index in range(calls):
        load_set(data, sets(index))
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
            prints.append(fingerprint(outputs[-1]))
            if isinstance(sets, Streamed):
                sets.after(index, prints[-1])
        del out
    if on_gpu:
        torch.cuda.synchronize()
        samples = [start.elapsed_time(end) for start, end in pairs]
    return samples, outputs, prints
