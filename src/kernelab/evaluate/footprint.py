"""How much memory judging a problem takes, learnt before any of it is allocated, and the
plan that makes it fit the device.

What the judge holds of one (case, seed) set (an `Expected`): its inputs, the reference's
output and the same output in float64 (every floating leaf at 8 bytes an element). It keeps,
from set-up to the end, one such set per timing case's re-check and one per input set of the
timed-call pool (the baselines are timed on them before any solution runs). The correctness
sets (each test seed, each benchmark case) it makes one at a time, when each is checked, and
drops each before it makes the next: at most one of them, the largest, is held beside the
kept sets. While it computes a set it also holds, for a moment, a scratch copy of the inputs
and the inputs upcast to float64. On a GPU the worker shares the device: it holds the pool's
inputs again, the one tree every timed call receives, and the outputs of a batch until the
judge chooses which to see (at least POOL_SETS of them) with the fingerprint's scratch; the
judge fetches the chosen outputs one at a time and checks each in float64. Where every timed
call gets an input set of its own (the evaluator decides, only when the pool could hold
POOL_SETS sets), the worker keeps no pool and the judge makes each checked call's set again,
one at a time: at most one set more on the judge's side, against the two or more the worker
no longer keeps.

The sizes come from the problem itself, run on fake tensors (torch's FakeTensorMode: shapes
and dtypes, no memory), or, where the problem cannot run on fake tensors, from one real
set-up. The plan keeps all of it within MEMORY_SHARE of the device's free memory (of the
available RAM on a CPU): the pool shrinks from POOL_SETS input sets towards one, the batch's
kept outputs get what is left (at most KEPT_OUTPUT_BYTES), and a problem that does not fit
with a single input set is skipped, with what it needs and what the device has. The number
of seeds does not change the need: the correctness sets are never held together.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernelab.errors import KernelabError
from kernelab.evaluate import trees

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
    """The bytes of one (case, seed) set, from its inputs and output (real or fake tensors)."""

    inputs: int
    inputs64: int  # the inputs upcast to float64 for the exact reference
    output: int
    output64: int  # the output in float64: the exact answer the judge keeps

    @property
    def kept(self) -> int:
        """What the judge keeps of one set: inputs, the eager output and the exact one."""
        return self.inputs + self.output + self.output64

    @property
    def transient(self) -> int:
        """What the judge holds for a moment beside what it keeps: computing a set (a scratch
        copy of the inputs, the inputs in float64), or checking an output against it (the
        output, the output in float64, their difference in float64), whichever is more."""
        return max(self.inputs + self.inputs64, self.output + 2 * self.output64)


def _bytes(tree: Any, *, as_float64: bool = False) -> int:
    total = 0
    for _, t in trees.tensors(tree):
        width = FLOAT64_BYTES if as_float64 and t.is_floating_point() else t.element_size()
        total += t.numel() * width
    return total


def set_size(data: Any, output: Any) -> SetSize:
    return SetSize(_bytes(data), _bytes(data, as_float64=True), _bytes(output),
                   _bytes(output, as_float64=True))  # fmt: skip


def fake_set_size(problem, case) -> SetSize:
    """The set's size from the problem run on fake tensors: its generator and reference see
    shapes and dtypes only, nothing is allocated. Raises whatever the problem raises when it
    cannot run that way (a .item(), a data-dependent shape, a custom kernel)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    # torch logs a traceback for every op that fails on fake tensors; the caller reports the
    # failure in one line, so the user sees no traceback
    fake_log = logging.getLogger("torch._subclasses.fake_tensor")
    level = fake_log.level
    fake_log.setLevel(logging.CRITICAL)
    try:
        with FakeTensorMode(allow_non_fake_inputs=True):
            data = problem.generate(case, 0)
            output = problem.reference(trees.clone(data))
            return set_size(data, output)
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

    pool_sets: int
    kept_output_bytes: int
    need_bytes: int  # with pool_sets input sets and the fewest kept outputs
    available_bytes: int | None
    what: str  # "free device memory", "available RAM"
    how: str  # how the sizes were learnt
    share: float = MEMORY_SHARE

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
    """Peak bytes of judging with `pool_sets` input sets per timing case: the judge's kept
    sets (per timing case in `timed`, its re-check and its pool of `pool_sets` sets), one
    correctness set (`checked`: a test seed's or a benchmark case's, made when it is checked
    and dropped after, so the largest one counts, not their sum), the largest set's
    transient, and on a GPU the worker's pool, its call tree, `min_kept` outputs and the one
    being made, and the fingerprint's scratch (at most a contiguous and a padded copy of an
    output: two outputs' worth; the digest's folds add 1/128 of one)."""
    every = [*checked, *timed]
    judge = max((s.kept for s in checked), default=0)
    judge += (1 + pool_sets) * sum(s.kept for s in timed)
    judge += max((s.transient for s in every), default=0)
    if not on_gpu or not timed:
        return judge
    worker = sum(pool_sets * s.inputs for s in timed)  # the worker keeps every case's pool
    # one case is timed at a time: its call tree, its outputs, the fingerprint's scratch
    worker += max(s.inputs + (min_kept + 1 + 2) * s.output for s in timed)
    return judge + worker


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
) -> MemoryPlan:
    """The most input sets (wanted_sets down to 1) whose need (need_bytes: `checked`, the
    correctness sets, one at a time; `timed`, one set per timing case) fits MEMORY_SHARE of
    the available memory; DoesNotFit when one does not."""
    free, what = available
    largest_output = max((s.output for s in timed), default=0)
    if free is None:
        need = need_bytes(checked, timed, wanted_sets, on_gpu=on_gpu, min_kept=min_kept)
        return MemoryPlan(wanted_sets, kept_cap, need, None, what, how)
    budget = int(MEMORY_SHARE * free)
    for sets in range(wanted_sets, 0, -1):
        need = need_bytes(checked, timed, sets, on_gpu=on_gpu, min_kept=min_kept)
        if need <= budget:
            spare = budget - need + min_kept * largest_output  # the kept outputs may grow
            return MemoryPlan(sets, min(kept_cap, spare), need, free, what, how)
    device = "card" if on_gpu else "machine"
    details = MemoryPlan(1, 0, need, free, what, how).to_dict()
    raise DoesNotFit(
        f"skipped: needs {need / GB:.1f} GB, {device} has {free / GB:.1f} GB {what} (the judge "
        f"plans within {MEMORY_SHARE:.0%} of it: {budget / GB:.1f} GB) with one input set for "
        f"the timed calls; sizes {how}; --scale below 1 needs less",
        details,
    )
