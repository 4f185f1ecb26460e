"""How much memory judging a problem takes, learnt before any of it is allocated, and the
plan that makes it fit the device: an upper bound of what the judge (and on a GPU its
worker) holds at its peak, step by step (tests/evaluate/test_eval_peaks.py measures each).

What the judge holds of one (case, seed) set (an `Expected`): its inputs, the reference's
output and the same output in float64 (every floating leaf at 8 bytes an element). It keeps,
from set-up to the end, one such set per timing case's re-check and one per input set of the
timed-call pool (the baselines are timed on them before any solution runs). The correctness
sets (each test seed, each benchmark case) it makes one at a time, when each is checked, and
drops each before it makes the next: at most one of them, the largest, is held beside the
kept sets. Beside those it holds, for a moment, the largest of (SetSize.transient): what
making a set takes beyond what it keeps (the generator's peak; a scratch copy of the inputs
and the reference run on it; the inputs in float64 and the float64 run; the outputs' copies);
a second set made beside a first; a baseline's call tree with a set being made or the
reference running; checking an output (the inputs sent back, the output and its snapshot,
or a copy of the inputs and the reference run for the format's own check); fingerprinting a
fetched output. Every float64 comparison works a block of blocks.CHECK_BLOCK elements at a
time (kernelab.harness.blocks), so it adds the blocks' scratch, never a float64 copy of a whole
output. On a CPU the judge also maps the pages the inputs are shared through (the largest
inputs). On a GPU the worker shares the device: it holds the pool's inputs again and, for
the case being timed, a batch (SetSize.batch): the one tree every timed call receives, the
outputs kept until the judge chooses which to see (at least POOL_SETS of them), a set being
made, the call's own output and the fingerprint's scratch; the judge fetches the chosen
outputs one at a time. The judge's own timed loops (the baselines, the loop's cost) run
before any worker exists, within the worker's share. Where every timed call gets an input
set of its own (the evaluator decides, only when the pool could hold POOL_SETS sets), the
worker keeps no pool and the judge makes each checked call's set again, one at a time: at
most one set more on the judge's side, against the two or more the worker no longer keeps.

The sizes come from the problem itself, run on fake tensors (torch's FakeTensorMode: shapes
and dtypes, no memory), or, where the problem cannot run on fake tensors, from one real
set-up; the generator's and the reference's peaks come from the same run (LivePeak: the
storages torch ops make, counted until they are freed). The plan keeps all of it within
MEMORY_SHARE of the device's free memory (of the available RAM on a CPU): the pool shrinks
from POOL_SETS input sets towards one, the batch's kept outputs get what is left (at most
KEPT_OUTPUT_BYTES), and a problem that does not fit with a single input set is skipped, with
what it needs and what the device has. The number of seeds does not change the need: the
correctness sets are never held together. What the plan leaves out comes from the other
1 - MEMORY_SHARE: the CUDA contexts, the allocator's rounding and fragmentation, the
interpreter's own objects, torch.compile's workspace, the L2 flush buffer, the float64 copy
of a KernelBench model's weights, and whatever a solution allocates of its own.
"""

from __future__ import annotations

import logging
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernelab.errors import KernelabError
from kernelab.evaluate import trees
from kernelab.harness import blocks

MEMORY_SHARE = 0.8  # of the free memory at set-up: room for the allocator's rounding, CUDA
# contexts of judge and worker, torch.compile's workspace and the L2 flush buffer
FLOAT64_BYTES = 8
GB = 1e9


class DoesNotFit(KernelabError):
    """The problem cannot be judged on this device even with one input set: a verdict of
    its own ("skipped"), not a failure of the solution or of the problem. `plan`: the
    sums behind it (MemoryPlan.to_dict, for one input set)."""

    def __init__(self, message: str, plan: dict):
        super().__init__(message)
        self.plan = plan


def is_out_of_memory(exc: BaseException) -> bool:
    """Whether an exception is an allocation that failed: torch's OutOfMemoryError on a GPU,
    its CPU allocator's refusal, or Python's MemoryError."""
    return (type(exc).__name__ == "OutOfMemoryError" or isinstance(exc, MemoryError)
            or "can't allocate memory" in str(exc))  # fmt: skip


@dataclass(frozen=True)
class SetSize:
    """The bytes of one (case, seed) set, from its inputs and output (real or fake tensors),
    and the peaks of making it: `make`, the most the generator holds while it makes the
    inputs (a `torch.randn(n) * 3.0` holds two tensors for a moment); `run`, the most the
    eager reference makes while it runs (its output and the intermediates alive with it).
    0 stands for the least they can be: the inputs, the output."""

    inputs: int
    inputs64: int  # the inputs upcast to float64 for the exact reference
    output: int
    output64: int  # the output in float64: the exact answer the judge keeps
    make: int = 0
    run: int = 0
    checker: int = 0  # what the problem's own checker holds beside its reference run

    @property
    def kept(self) -> int:
        """What the judge keeps of one set: inputs, the eager output and the exact one."""
        return self.inputs + self.output + self.output64

    @property
    def making(self) -> int:
        return max(self.make, self.inputs)

    @property
    def running(self) -> int:
        return max(self.run, self.output)

    @property
    def running64(self) -> int:
        """The float64 reference's peak: its output, and the eager run's intermediates
        widened as the output is (an estimate: a fake float64 run could build state)."""
        widen = self.output64 / self.output if self.output else 1.0
        return self.output64 + int((self.running - self.output) * max(1.0, widen))

    @property
    def blocks(self) -> int:
        """The scratch of a comparison done a block at a time (blocks.CHECK_BLOCK elements)."""
        elements = max(self.output64, self.inputs64) // FLOAT64_BYTES
        return min(elements, blocks.CHECK_BLOCK) * blocks.CHECK_BYTES_PER_ELEMENT

    @property
    def making_peak(self) -> int:
        """The most the judge holds while it makes this set (Evaluator._expect), the set's
        own inputs and outputs included: the generator; the inputs, a scratch copy and the
        reference run on it; the inputs, the eager output, a probe copy of the inputs and
        the reference run on it (the search for output buffers); the eager output and its
        copy; the inputs upcast to float64 and the float64 reference; the exact output and
        its copy; the eager error, a block at a time."""
        i, o = self.inputs, self.output
        return max(
            self.making,
            2 * i + o + self.running,
            2 * i + o + self.blocks,
            i + 2 * o,
            i + o + self.inputs64 + self.running64,
            i + o + 2 * self.output64,
            i + o + self.output64 + self.blocks,
        )

    @property
    def transient(self) -> int:
        """What the judge holds for a moment beside the sets it keeps (this one counted as
        kept while it is made or checked), whichever moment is the largest: making it, beyond
        what it keeps; its cost recognised (a copy of the inputs and a reference run); a
        second set made beside a first (whether a set per timed call can be had); a baseline
        timed on sets made per call (the call tree, a set being made or a reference run);
        checking an output (the inputs sent back, the output and its snapshot, the blocks of
        the comparison; or a copy of the inputs, the reference run on it and what the
        problem's own checker holds besides); fingerprinting a fetched output (its copy and
        the padded words: three outputs)."""
        i, o = self.inputs, self.output
        return max(
            self.making_peak - self.kept,
            i + self.running,
            i + self.making,
            i + max(self.making, self.running),
            i + 2 * o + self.blocks,
            i + o + self.running + self.checker + self.blocks,
            3 * o,
        )

    @property
    def in_worker(self) -> int:
        """What the worker holds on the device while a call is checked: its copy of the
        inputs, the call's output and the output's snapshot on the caller's stream."""
        return self.inputs + 2 * self.output

    def batch(self, kept_outputs: int) -> int:
        """What a timed batch holds on the device besides any pool (timed_calls.run_calls):
        the tree every call is loaded into; while a set is made, the outputs kept so far
        (all but the last); at the last call, the kept outputs, the call's own output and
        the fingerprint's scratch (at most a contiguous and a padded copy: two outputs)."""
        o = self.output
        return self.inputs + max(self.making + (kept_outputs - 1) * o, (kept_outputs + 3) * o)


def _bytes(tree: Any, *, as_float64: bool = False) -> int:
    total = 0
    for _, t in trees.tensors(tree):
        width = FLOAT64_BYTES if as_float64 and t.is_floating_point() else t.element_size()
        total += t.numel() * width
    return total


def set_size(data: Any, output: Any, *, make: int = 0, run: int = 0,
             checker_outputs: int = 0) -> SetSize:  # fmt: skip
    out = _bytes(output)
    return SetSize(_bytes(data), _bytes(data, as_float64=True), out,
                   _bytes(output, as_float64=True), make, run, checker_outputs * out)  # fmt: skip


class LivePeak:
    """The peak of the bytes of the storages that torch ops make while it is on (fake or
    real tensors): a storage counts from the op that made it until it is freed; storages
    that existed before (inputs, weights) and views of them count nothing. Use it as a
    context manager; `peak` after."""

    def __init__(self):
        self.live = 0
        self.peak = 0
        self._known: dict[int, int] = {}  # id(storage) -> the bytes it counts for
        self._mode = None

    def _note(self, value, count: bool) -> None:
        import torch

        try:
            storage = value if isinstance(value, torch.UntypedStorage) else value.untyped_storage()
        except Exception:  # no storage (sparse, nested): nothing to count
            return
        key = id(storage)
        if key in self._known:
            return
        # a meta tensor holds no memory (a fake tensor, backed by meta storage, names the
        # device it stands for)
        count = count and getattr(value, "device", None) != torch.device("meta")
        nbytes = storage.nbytes() if count else 0
        self._known[key] = nbytes
        self.live += nbytes
        self.peak = max(self.peak, self.live)
        weakref.finalize(storage, self._forget, key)

    def _forget(self, key: int) -> None:
        self.live -= self._known.pop(key, 0)

    def __enter__(self) -> LivePeak:
        import torch
        from torch.utils._python_dispatch import TorchDispatchMode
        from torch.utils._pytree import tree_leaves

        counter = self

        class Counting(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                kwargs = kwargs or {}
                for leaf in tree_leaves((args, kwargs)):
                    if isinstance(leaf, (torch.Tensor, torch.UntypedStorage)):
                        counter._note(leaf, count=False)
                out = func(*args, **kwargs)
                # a return the schema says aliases an argument (a view, an in-place op, set_)
                # holds no new storage
                if not any(r.alias_info is not None for r in func._schema.returns):
                    for leaf in tree_leaves(out):
                        if isinstance(leaf, torch.Tensor):
                            counter._note(leaf, count=True)
                return out

        self._mode = Counting()
        self._mode.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._mode.__exit__(*exc)
        self._mode = None


def fake_set_size(problem, case) -> SetSize:
    """The set's size from the problem run on fake tensors, with the peaks of making it
    (LivePeak): its generator and reference see shapes and dtypes only, nothing is
    allocated. Raises whatever the problem raises when it cannot run that way (a .item(), a
    data-dependent shape, a custom kernel)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    # torch logs a traceback for every op that fails on fake tensors; the caller reports the
    # failure in one line, so the user sees no traceback
    fake_log = logging.getLogger("torch._subclasses.fake_tensor")
    level = fake_log.level
    fake_log.setLevel(logging.CRITICAL)
    try:
        with FakeTensorMode(allow_non_fake_inputs=True):
            with LivePeak() as made:
                data = problem.generate(case, 0)
            scratch = trees.clone(data)
            with LivePeak() as ran:
                output = problem.reference(scratch)
            return set_size(data, output, make=made.peak, run=ran.peak,
                            checker_outputs=problem.checker_outputs)  # fmt: skip
    finally:
        fake_log.setLevel(level)


def available_bytes(device) -> tuple[int | None, str]:
    """(bytes free for judging, what they are): the device's free memory on a GPU
    (torch.cuda.mem_get_info), MemAvailable on a CPU; None where it cannot be read."""
    if getattr(device, "type", str(device)) == "cuda":
        import torch

        free, _ = torch.cuda.mem_get_info(device)
        return int(free), "free device memory"
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024, "available RAM"
    except (OSError, ValueError, IndexError):
        pass
    return None, "available RAM (unreadable here)"


@dataclass
class MemoryPlan:
    """How the judge fits the device: the input sets its timed calls rotate through, the
    bytes the worker may keep of a batch's outputs, and the sums behind them."""

    pool_sets: int  # 0: no pool fits; every timed call must get an input set of its own
    kept_output_bytes: int
    need_bytes: int  # with pool_sets input sets and the fewest kept outputs
    available_bytes: int | None
    what: str  # "free device memory", "available RAM"
    how: str  # how the sizes were learnt
    share: float = MEMORY_SHARE
    refusal: str = ""  # with pool_sets 0: the skip where a timing case cannot get a set a call

    @property
    def budget_bytes(self) -> int | None:
        return None if self.available_bytes is None else int(self.share * self.available_bytes)

    def to_dict(self) -> dict:
        return {"pool_sets": self.pool_sets, "kept_output_bytes": self.kept_output_bytes,
                "need_bytes": self.need_bytes, "available_bytes": self.available_bytes,
                "budget_bytes": self.budget_bytes, "available": self.what, "sizes": self.how,
                "share": self.share}  # fmt: skip


def need_bytes(
    checked: list[SetSize], timed: list[SetSize], pool_sets: int, *, on_gpu: bool, min_kept: int
) -> int:
    """Peak bytes of judging with `pool_sets` input sets per timing case (0: every timed call
    gets a set of its own and the judge keeps no set of a timing case between its uses).

    What the judge keeps throughout: per timing case in `timed`, its re-check and its pool of
    `pool_sets` sets (with 0, nothing: the re-check is made again from its seed when it is
    checked). Beside it, the largest set's transient (SetSize.transient) and, at any one time,
    one of three phases, never two together:
    - set-up: with 0, every timing case's re-check, held until the baselines are timed;
    - the correctness checks: one correctness set (`checked`: a test seed's or a benchmark
      case's, made when it is checked and dropped after, so the largest counts, not their
      sum) and, on a GPU, what the worker holds of a checked call (SetSize.in_worker);
    - the timed calls, on a GPU: the worker's pool of every timing case and, for the one case
      timed at a time, its batch (SetSize.batch: the call tree, `min_kept` outputs and the
      one being made, a set being made, the fingerprint's scratch).
      The judge's own timed loops (the baselines, the loop's cost) run before any worker
      exists, within this phase's share.
    With 0 (_need_without_pool) the judge holds nothing of a timing case while its calls run,
    so the timed phase splits into moments that never coexist: the batch (the worker's alone:
    the judge has handed its cached memory back to the device), the checks of its sampled
    outputs (the worker's kept outputs beside the judge's set and transient) and the re-check
    (a checked call: the worker has dropped the batch's outputs).
    On a CPU the worker is another process and its memory is not the judge's; the judge also
    maps the shared pages the inputs go through (arena.Arena: the largest inputs)."""
    every = [*checked, *timed]
    transient = max((s.transient for s in every), default=0)
    if not pool_sets:
        need = _need_without_pool(checked, timed, transient, on_gpu=on_gpu, min_kept=min_kept)
    else:
        throughout = (1 + pool_sets) * sum(s.kept for s in timed)
        worker = on_gpu
        checking = max((s.kept + (s.in_worker if worker else 0) for s in checked), default=0)
        timing = 0
        if timed and worker:
            timing = sum(pool_sets * s.inputs for s in timed) + max(
                s.batch(min_kept) for s in timed
            )
        need = throughout + transient + max(checking, timing)
    if not on_gpu:
        need += max((s.inputs for s in every), default=0)
    return need


def _need_without_pool(
    checked: list[SetSize], timed: list[SetSize], transient: int, *, on_gpu: bool, min_kept: int
) -> int:
    """need_bytes with no pool (a set per timed call), the largest of five moments that never
    coexist; on a GPU each process hands its cached memory back (release_cached) where the
    next moment is another process's:
    - set-up: every timing case's re-check (held until the baselines are timed) and the
      transient; then the judge drops them to meta tensors and hands their memory back;
    - the loop's own cost, timed by the judge after that, before any worker exists: a
      stand-in of the output and a batch (SetSize.batch) on the judge's side;
    - a checked call (a correctness set, or a timing case's re-check made again after its
      calls): the judge's set and transient, and on a GPU the worker's copy of the inputs,
      the output and its snapshot (SetSize.in_worker; it dropped the batch's outputs);
    - a timed batch, on a GPU: the worker's batch alone (SetSize.batch); the judge holds
      nothing of the case (its re-check is shelved, the seeds go one at a time) and handed
      its cached memory back before the batch;
    - the checks of a batch's sampled outputs: the judge makes each call's set again and
      checks the fetched output (the set and the transient: making it, or the fetched
      output, its fingerprint's scratch and the comparison's blocks), while the worker
      keeps the batch's `min_kept` outputs (it handed the rest of the batch back)."""
    set_up = sum(s.kept for s in timed) + transient
    loops = max((s.output + s.batch(min_kept) for s in timed), default=0)
    worker = on_gpu
    check = transient + max(
        (s.kept + (s.in_worker if worker else 0) for s in [*checked, *timed]), default=0
    )
    batch = max((s.batch(min_kept) for s in timed), default=0) if worker else 0
    sampled = 0
    if timed:
        sampled = transient + max(s.kept + (min_kept * s.output if worker else 0) for s in timed)
    return max(set_up, loops, check, batch, sampled)


def release_cached(device) -> None:
    """Hand the memory torch's caching allocator holds unused back to the device (a GPU), so
    that the other process (judge or worker) can have it: the plan of a set per timed call
    (need_bytes with 0) counts the two processes' moments apart."""
    if getattr(device, "type", str(device)) == "cuda":
        import torch

        torch.cuda.empty_cache()


def plan(
    checked: list[SetSize],
    timed: list[SetSize],
    *,
    wanted_sets: int,
    min_kept: int,
    kept_cap: int,
    on_gpu: bool,
    available: tuple[int | None, str],
    how: str,
    fresh: bool = False,
) -> MemoryPlan:
    """The most input sets (wanted_sets down to 1) whose need (need_bytes: `checked`, the
    correctness sets, one at a time; `timed`, one set per timing case) fits MEMORY_SHARE of
    the available memory; where even one does not and the timed calls may each get a set of
    their own (`fresh`), a plan of no pool (pool_sets 0: it holds only where every timing
    case gets a set per call, which the evaluator then requires: `refusal` is the skip's
    message otherwise); DoesNotFit when neither fits."""
    free, what = available
    largest_output = max((s.output for s in timed), default=0)
    if free is None:
        need = need_bytes(checked, timed, wanted_sets, on_gpu=on_gpu, min_kept=min_kept)
        return MemoryPlan(wanted_sets, kept_cap, need, None, what, how)
    budget = int(MEMORY_SHARE * free)
    for sets in range(wanted_sets, -1 if fresh else 0, -1):
        need = need_bytes(checked, timed, sets, on_gpu=on_gpu, min_kept=min_kept)
        if sets == 1:
            one_set = need
        if need <= budget:
            spare = budget - need + min_kept * largest_output  # the kept outputs may grow
            found = MemoryPlan(sets, min(kept_cap, spare), need, free, what, how)
            if not sets:
                found.refusal = _refusal(one_set, free, what, how, on_gpu)
            return found
    raise DoesNotFit(
        _refusal(one_set, free, what, how, on_gpu),
        MemoryPlan(1, 0, one_set, free, what, how).to_dict(),
    )


def _refusal(need: int, free: int, what: str, how: str, on_gpu: bool) -> str:
    device = "card" if on_gpu else "machine"
    budget = int(MEMORY_SHARE * free)
    return (
        f"skipped: needs {need / GB:.1f} GB, {device} has {free / GB:.1f} GB {what} (the judge "
        f"plans within {MEMORY_SHARE:.0%} of it: {budget / GB:.1f} GB) with one input set for "
        f"the timed calls; sizes {how}; --scale below 1 needs less"
    )
