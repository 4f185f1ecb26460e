"""The verdict on one solution and its parts: the judge's options, each case's result, each
timing, and the constants the judge works by (kernelab.evaluate.evaluator judges; read its
docstring for how)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from kernelab.errors import KernelabError
from kernelab.evaluate.problem import Case
from kernelab.harness.timing import MODES
from kernelab.output import to_jsonable

# "skipped": the problem does not fit the device even with one input set (footprint.py)
STATUSES = ("pass", "fail", "suspect", "crash", "timeout", "error", "skipped")
EAGER_ERROR_MARGIN = 2.0
POOL_SETS = 3  # input sets the timed calls rotate through, memory allowing (footprint.py)
# ... where they cannot each get a new set: making one set takes longer than this (a set per
# call moves the judge's floor on a faked time by as much: kernelab.evaluate.observed)
FRESH_MAKE_MAX_MS = 20.0
CHECKED_EXTRA = 8  # checked timed calls besides the last POOL_SETS, at least
CHECKED_SHARE = 0.1  # ... or this share of the batch
CHECKED_MAX = 32  # ... at most
KEPT_OUTPUT_BYTES = 4 << 30  # a batch's outputs kept by the worker until the judge chooses,
# at most (less where the device's memory is short: footprint.py)
WARMUP_CALLS = 3  # untimed: compilation, autotuning, lazy allocation
PROBE_CALLS = 3  # sized on the judge's clock: how many calls fit in --max-time
MAX_TIMED_CALLS = 2000
DEFAULT_TIMEOUT_S = 300.0
# Warnings that make a correct verdict "suspect" rather than a celebrated time.
SUSPECT_MARKS = ("speed of light", "tampered with")


@dataclass
class Options:
    seeds: int = 3  # seeds per test case
    seed: int | None = None  # base of the extra seeds; random when None
    timing: bool = True  # time on a GPU (never on a CPU)
    mode: str = "cold"
    max_time_s: float = 1.0
    min_samples: int = 10
    compile: bool = True  # time torch.compile of the reference as a baseline
    repeat_calls: int = 20  # calls before the re-check where there is no timing

    def validate(self) -> Options:
        if self.seeds < 1:
            raise KernelabError(f"--seeds must be at least 1, got {self.seeds}")
        if self.mode not in MODES:
            raise KernelabError(f"--mode must be one of {', '.join(MODES)}, got {self.mode!r}")
        if self.max_time_s <= 0 or self.min_samples < 1 or self.repeat_calls < 0:
            raise KernelabError("--max-time must be positive and --min-samples at least 1")
        return self


@dataclass
class CaseResult:
    case: str
    kind: str  # "test", "benchmark" or "recheck"
    seed: int
    ok: bool
    error: float | None  # worst relative norm error over the output's tensors
    threshold: float | None
    message: str
    format_check: str | None = None  # the problem's own checker: its message


# What every eval time is, so that a speedup says what it compares (timed_calls.py): one call
# at a time from an idle GPU to a device-wide synchronise, so the host's launch path is in it
# beside the device time; kernelab bench reports the device time alone and the host cost apart.
TIMING_BASIS = (
    "per-call latency, the mean of a batch: host launch path + device time, one call at a time"
)


@dataclass
class Timed:
    case: str
    solution_ms: float
    eager_ms: float | None
    compiled_ms: float | None
    speedup_vs_eager: float | None
    speedup_vs_compiled: float | None
    rel_noise: float
    mode: str
    placement: dict | None
    warnings: list[str] = field(default_factory=list)
    basis: str = TIMING_BASIS  # what the times and so the speedups compare


@dataclass
class Verdict:
    problem: str
    format: str
    solution: str
    status: str  # one of STATUSES
    message: str  # one line: why
    device: str = "cpu"
    cases: list[CaseResult] = field(default_factory=list)
    timings: list[Timed] = field(default_factory=list)
    roofline: list[dict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    records: list[dict] = field(default_factory=list)
    wall: dict = field(default_factory=dict)  # what the worker's wall holds, what it lacks
    memory: dict = field(default_factory=dict)  # footprint.MemoryPlan: the pool size used, why

    def to_dict(self) -> dict:
        # The message and notes quote the solution's own words (its exception, its log), which
        # may hold lone surrogates that no encoding can print: written as escapes.
        return printable(to_jsonable(asdict(self)))


def printable(value):
    """`value` with every string in it made encodable as UTF-8 (a lone surrogate becomes
    its backslash escape), so that printing or writing a verdict can never raise."""
    if isinstance(value, str):
        return value.encode("utf-8", "backslashreplace").decode("utf-8")
    if isinstance(value, dict):
        return {printable(key): printable(item) for key, item in value.items()}
    if isinstance(value, list):
        return [printable(item) for item in value]
    return value


@dataclass
class Expected:
    """The reference's answer for one (case, seed), computed before any solution loads."""

    case: Case
    seed: int
    data: Any  # the pristine inputs
    eager: Any  # the reference's output as the problem computes it
    exact: Any  # the same in float64 (or the eager output when float64 failed)
    buffers: set  # paths of inputs the reference writes: output buffers
    dtype: str | None  # kernelab name of the input dtype that sets the threshold
    allowance: float  # extra threshold: EAGER_ERROR_MARGIN x the eager output's own error
