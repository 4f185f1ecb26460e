"""Did each SGEMM step do what it claims? Its Nsight Compute counters, against the step before.

Every step in steps.py names the measurement that proves its technique worked ("proof").
Here each claim becomes checks: a quantity read from ncu metrics (or from the step's SASS),
the direction it must move against the previous step, and how far. One ncu run profiles
every step once at one size (one shape, so raw counts compare directly), then `verify`
turns the profiles into PASS/FAIL rows. Everything but `profile_steps` and the `__main__`
launcher is pure and runs without a GPU.

The bounds come from the arithmetic of each kernel, written next to the check, not from a
run: a check that fails says the claim in steps.py does not hold on that GPU. Checks marked
informational (required=False) are claims in steps.py that the kernels' arithmetic does not
support; they are shown with their outcome but do not decide the step's verdict.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from kernelab.errors import KernelabError, one_line_failures
from kernelab.ladders.sgemm.launch import build_step
from kernelab.ladders.sgemm.steps import STEPS, Step, get_step, parse_steps
from kernelab.ladders.sgemm.tuning import winner
from kernelab.profiling import runner
from kernelab.profiling.diagnose import diagnose
from kernelab.profiling.runner import PROFILE_RANGE
from kernelab.profiling.session import default_report_path, run_command
from kernelab.runtime.cuda.sass import find_tool, sass_facts

DEFAULT_SIZE = 4096
LAUNCHER_WARMUP = 1  # the step runs once (compile, load, first-touch) before the profiled launch

# --- ncu metrics the checks read (names as ncu 2025.x reports them on GH100) -----------------

GLOBAL_LD_SECTORS = "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum"
GLOBAL_LD_REQUESTS = "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum"
GLOBAL_LD_INSTRUCTIONS = "smsp__inst_executed_op_global_ld.sum"  # warp instructions
SHARED_LD_INSTRUCTIONS = "smsp__inst_executed_op_shared_ld.sum"
SHARED_ST_INSTRUCTIONS = "smsp__inst_executed_op_shared_st.sum"
SHARED_LD_WAVEFRONTS = "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum"
BANK_CONFLICTS_LD = "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum"
BANK_CONFLICTS_ST = "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum"
FFMA_THREAD_INSTRUCTIONS = "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum"
INSTRUCTIONS = "smsp__inst_executed.sum"  # warp instructions issued
LSU_INSTRUCTIONS = "sm__inst_executed_pipe_lsu.sum"
FMA_PIPE_INSTRUCTIONS = "sm__inst_executed_pipe_fma.sum"
L2_READ_SECTORS_FROM_L1 = "lts__t_sectors_srcunit_tex_op_read.sum"
DRAM_READ_BYTES = "dram__bytes_read.sum"
LONG_SCOREBOARD_STALL = "smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio"
BARRIER_STALL = "smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio"
SHORT_SCOREBOARD_STALL = "smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio"
SM_INSTRUCTIONS = "sm__inst_executed.sum"
DURATION = "gpu__time_duration.sum"

WARP = 32  # FFMA is counted per thread; one warp instruction is 32 of them when none is off
SASS_PREFIX = "sass:"  # a quantity read from the step's SASS facts instead of ncu


@dataclass(frozen=True)
class Quantity:
    """numerator / denominator * scale, each a metric name or "sass:<fact>"."""

    name: str
    numerator: str
    denominator: str | None = None
    scale: float = 1.0

    @property
    def formula(self) -> str:
        text = (
            self.numerator if self.denominator is None else f"{self.numerator} / {self.denominator}"
        )
        return text if self.scale == 1.0 else f"{self.scale:g} * {text}"

    def metric_names(self) -> tuple[str, ...]:
        names = (self.numerator, self.denominator)
        return tuple(n for n in names if n is not None and not n.startswith(SASS_PREFIX))

    def value(self, metrics: dict, sass: dict) -> float | None:
        top = _read(self.numerator, metrics, sass)
        if self.denominator is None or top is None:
            return None if top is None else top * self.scale
        bottom = _read(self.denominator, metrics, sass)
        if bottom is None or bottom == 0:
            return None
        return top / bottom * self.scale


def _read(name: str, metrics: dict, sass: dict) -> float | None:
    source, key = (
        (sass, name.removeprefix(SASS_PREFIX)) if name.startswith(SASS_PREFIX) else (metrics, name)
    )
    value = source.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


SECTORS_PER_REQUEST = Quantity(
    "global load sectors per request", GLOBAL_LD_SECTORS, GLOBAL_LD_REQUESTS
)
REQUESTS_PER_FFMA = Quantity(
    "global load requests per FFMA", GLOBAL_LD_REQUESTS, FFMA_THREAD_INSTRUCTIONS, WARP
)
GLOBAL_LD_PER_FFMA = Quantity(
    "global load instructions per FFMA", GLOBAL_LD_INSTRUCTIONS, FFMA_THREAD_INSTRUCTIONS, WARP
)
SHARED_LD_PER_FFMA = Quantity(
    "shared load instructions per FFMA", SHARED_LD_INSTRUCTIONS, FFMA_THREAD_INSTRUCTIONS, WARP
)
LSU_PER_FMA = Quantity("LSU / FMA-pipe instructions", LSU_INSTRUCTIONS, FMA_PIPE_INSTRUCTIONS)
FFMA_SHARE = Quantity(
    "FFMA share of issued instructions", FFMA_THREAD_INSTRUCTIONS, INSTRUCTIONS, 1.0 / WARP
)
FMA_PIPE_SHARE = Quantity(
    "FMA-pipe share of issued instructions", FMA_PIPE_INSTRUCTIONS, SM_INSTRUCTIONS
)
L2_READS = Quantity("L2 read sectors from L1", L2_READ_SECTORS_FROM_L1)
DRAM_READS = Quantity("DRAM bytes read", DRAM_READ_BYTES)
LD_CONFLICTS = Quantity(
    "shared-load bank conflicts per instruction", BANK_CONFLICTS_LD, SHARED_LD_INSTRUCTIONS
)
ST_CONFLICTS = Quantity(
    "shared-store bank conflicts per instruction", BANK_CONFLICTS_ST, SHARED_ST_INSTRUCTIONS
)
WAVEFRONTS_PER_LD = Quantity(
    "shared wavefronts per shared load", SHARED_LD_WAVEFRONTS, SHARED_LD_INSTRUCTIONS
)
LONG_SCOREBOARD = Quantity("long-scoreboard stall cycles per issue", LONG_SCOREBOARD_STALL)
BARRIER = Quantity("barrier stall cycles per issue", BARRIER_STALL)
SHORT_SCOREBOARD = Quantity("short-scoreboard stall cycles per issue", SHORT_SCOREBOARD_STALL)
KERNEL_TIME = Quantity("kernel time (ms)", DURATION, scale=1e-6)
LDG_128 = Quantity("LDG.E.128 in SASS (static count)", SASS_PREFIX + "ldg_128")
LDGSTS_128 = Quantity("LDGSTS.128 in SASS (static count)", SASS_PREFIX + "ldgsts_128")

# --- the checks ---------------------------------------------------------------------------

DIRECTIONS = ("down", "up", "at_least", "at_most", "present")


@dataclass(frozen=True)
class Check:
    """down: value <= bound * previous (bound 1: strictly below it; above 1: a tolerance);
    up: value >= bound * previous (bound 1: strictly above); at_least / at_most: against
    `bound` itself; present: a SASS count above zero."""

    quantity: Quantity
    expect: str
    bound: float
    why: str  # the arithmetic behind the bound
    required: bool = True

    def __post_init__(self):
        if self.expect not in DIRECTIONS:
            raise ValueError(f"unknown direction {self.expect!r}")

    @property
    def needs_previous(self) -> bool:
        return self.expect in ("down", "up")

    @property
    def requirement(self) -> str:
        return {
            "down": "< prev" if self.bound == 1.0 else f"<= {self.bound:g}x prev",
            "up": "> prev" if self.bound == 1.0 else f">= {self.bound:g}x prev",
            "at_least": f">= {self.bound:g}",
            "at_most": f"<= {self.bound:g}",
            "present": "> 0",
        }[self.expect]


CHECKS: dict[int, tuple[Check, ...]] = {
    1: (
        Check(SECTORS_PER_REQUEST, "at_least", 8.0,
              "a coalesced fp32 warp load touches 4 sectors (128 B); naive's A load strides by "
              "a row (32 sectors) and its B load is one broadcast sector: ~16.5 on average"),
    ),
    2: (
        Check(SECTORS_PER_REQUEST, "down", 0.5,
              "threads along N: A becomes a broadcast (1 sector), B one 128-byte line (4): "
              "~2.5, from ~16.5"),
    ),
    3: (
        Check(REQUESTS_PER_FFMA, "down", 0.25,
              "one A and one B element per thread per 32-wide K tile instead of per k: "
              "2 requests per FFMA fall to 2/32"),
        Check(L2_READS, "down", 1.0,
              "the first claim for this step; but L1 already caught step 2's reuse (the B row is shared "
              "by the block's 32 warps, an A sector serves 8 k), so L2 reads may not move",
              required=False),
        Check(DRAM_READS, "down", 1.0,
              "the first claim for this step; both steps walk the same grid in the same order, so what "
              "L2 keeps, and so DRAM traffic, hardly changes", required=False),
    ),
    4: (
        Check(SHARED_LD_PER_FFMA, "down", 0.8,
              "one B value feeds 8 FFMAs: static SASS has 40 LDS per 32 FFMA in step 3 "
              "(1.25) and 24 per 64 in step 4 (0.375)"),
    ),
    5: (
        Check(LSU_PER_FMA, "down", 0.8,
              "an 8x8 outer product per k: 4 LDS.128 feed 64 FFMA instead of 3 LDS per 8; "
              "global loads and stores per output fall too"),
        Check(FFMA_SHARE, "up", 1.1,
              "the same work in far fewer load and address instructions"),
    ),
    6: (
        Check(LDG_128, "present", 0.0, "float4 global loads compile to LDG.E.128"),
        Check(GLOBAL_LD_PER_FFMA, "down", 0.5,
              "4 floats per load instruction: 8 LDG per thread per K tile become 2"),
        Check(SHARED_LD_PER_FFMA, "down", 1.0,
              "first claimed ~4x; but the compiler already merged step 5's shared reads "
              "into LDS.128 (32 LDS.128 per K tile in both), so it may not move",
              required=False),
    ),
    7: (
        Check(LD_CONFLICTS, "down", 0.5,
              "step 6's B fragments sit 32 B apart, two lanes per 16-byte bank group: 2-way; "
              "contiguous 16-byte lanes remove it"),
        Check(ST_CONFLICTS, "down", 0.5,
              "step 6 stores A transposed with lanes 128 floats apart in pairs on one bank: "
              "2-way; the padded row breaks the pairing"),
    ),
    8: (
        Check(KERNEL_TIME, "down", 1.03,
              "the searched tile is the fastest of its candidates on the card, so it should not "
              "be slower than step 7 (3 %: run-to-run noise of one ncu launch)"),
    ),
    9: (
        Check(WAVEFRONTS_PER_LD, "down", 1.0,
              "a warp reads one 64x32 sub-tile: its fragments fall on distinct bank groups, "
              "toward 1 wavefront per shared load"),
    ),
    10: (
        Check(LDGSTS_128, "present", 0.0, "cp.async of 16 bytes compiles to LDGSTS.E.BYPASS.128"),
        Check(LONG_SCOREBOARD, "down", 1.0,
              "loads for the tiles ahead are in flight while this one is computed: warps wait "
              "less on global memory"),
        Check(BARRIER, "down", 1.0,
              "a hoped-for effect; the ring still needs one barrier per K tile",
              required=False),
    ),
    11: (
        Check(FFMA_SHARE, "up", 1.0,
              "the lean K loop: copies planned once, pointers advanced, bounds checked on the "
              "last K tile only (static: 88 % of the aligned loop is FFMA)"),
        Check(L2_READS, "down", 1.0,
              "the first claim, for the 256x128 tile (25 % fewer sectors); the tuned H200 "
              "winner at 4096 is 128x128 like step 10, where it should not move",
              required=False),
    ),
    12: (
        Check(SHORT_SCOREBOARD, "down", 1.0,
              "the fragments for k+1 are loaded from shared memory during the FFMAs of k: "
              "warps stop waiting on LDS results"),
        Check(LDGSTS_128, "present", 0.0, "B still arrives by 16-byte cp.async"),
        Check(FMA_PIPE_SHARE, "at_least", 0.89,
              "predicted: >= 89 % of issued instructions on the FMA pipe "
              "(cuBLAS: 88 %)"),
        Check(LD_CONFLICTS, "at_most", 0.1,
              "predicted ~0: k-major A and 16-byte B lanes put a warp's reads on "
              "distinct banks", required=False),
    ),
    13: (
        Check(SHORT_SCOREBOARD, "at_most", 0.35,
              "predicted: A copied along k (4 lines per warp request, not 16) and the tile's "
              "copies spread over its k steps keep the queue in front of the shared loads "
              "short (sgemm:12 measured 0.56, cuBLAS 0.21)"),
        Check(KERNEL_TIME, "down", 1.0,
              "the point of the step: faster than sgemm:12 at the same tile", required=False),
    ),
}  # fmt: skip


def needed_metrics(steps: Sequence[Step]) -> tuple[str, ...]:
    """The ncu metrics the checks of `steps` read (on top of kernelab's own)."""
    names: dict[str, None] = {DURATION: None}
    for step in steps:
        for check in CHECKS.get(step.number, ()):
            names.update(dict.fromkeys(check.quantity.metric_names()))
    return tuple(names)


def with_predecessors(steps: Sequence[Step]) -> list[Step]:
    """`steps` plus the step before each one that compares against it, in ladder order."""
    numbers = {s.number for s in steps}
    for step in steps:
        if step.number > 1 and any(c.needs_previous for c in CHECKS.get(step.number, ())):
            numbers.add(step.number - 1)
    return [s for s in STEPS if s.number in numbers]


# --- the outcome --------------------------------------------------------------------------


@dataclass
class StepProfile:
    """What one profiled launch of a step says: its ncu metrics and its static SASS facts."""

    step: int
    kernel: str
    metrics: dict
    sass: dict = field(default_factory=dict)
    duration_ns: float | None = None
    diagnosis: dict | None = None  # kernelab.profiling.diagnose's verdict, when computed


@dataclass
class CheckResult:
    quantity: str
    formula: str
    expect: str
    requirement: str
    previous: float | None
    value: float | None
    ratio: float | None  # value / previous, when both are known and previous is not zero
    verdict: str  # "PASS", "FAIL", "MISSING" (a metric absent), "NO-PREV" (nothing to compare)
    required: bool
    why: str

    @property
    def passed(self) -> bool:
        return self.verdict == "PASS"

    def to_dict(self) -> dict:
        return {
            "quantity": self.quantity,
            "formula": self.formula,
            "expect": self.expect,
            "requirement": self.requirement,
            "previous": self.previous,
            "value": self.value,
            "ratio": self.ratio,
            "verdict": self.verdict,
            "required": self.required,
            "why": self.why,
        }


def judge(check: Check, value: float | None, previous: float | None) -> str:
    """The verdict of one check: PASS, FAIL, MISSING (no value) or NO-PREV (a relative check
    with nothing to compare against)."""
    if value is None:
        return "MISSING"
    if check.expect == "present":
        return "PASS" if value > 0 else "FAIL"
    if check.expect == "at_least":
        return "PASS" if value >= check.bound else "FAIL"
    if check.expect == "at_most":
        return "PASS" if value <= check.bound else "FAIL"
    if previous is None:
        return "NO-PREV"
    if check.expect == "down":
        if previous == 0.0:  # nothing left to remove: holding zero meets the claim
            return "PASS" if value == 0.0 else "FAIL"
        moved = value < previous if check.bound == 1.0 else value <= check.bound * previous
        return "PASS" if moved else "FAIL"
    moved = value > previous if check.bound == 1.0 else value >= check.bound * previous
    return "PASS" if moved else "FAIL"


def evaluate(step: int, now: StepProfile, before: StepProfile | None) -> list[CheckResult]:
    """Every check of `step`, reading `now` and (for the relative ones) `before`. The previous
    value is shown for absolute checks too, for context."""
    results = []
    for check in CHECKS.get(step, ()):
        q = check.quantity
        value = q.value(now.metrics, now.sass)
        previous = q.value(before.metrics, before.sass) if before is not None else None
        both = value is not None and previous is not None and previous != 0.0
        results.append(
            CheckResult(
                quantity=q.name,
                formula=q.formula,
                expect=check.expect,
                requirement=check.requirement,
                previous=previous,
                value=value,
                ratio=value / previous if both else None,
                verdict=judge(check, value, previous if check.needs_previous else None),
                required=check.required,
                why=check.why,
            )
        )
    return results


@dataclass
class StepVerdict:
    step: Step
    previous: Step | None  # the step compared against (None for step 1 or when not profiled)
    kernel: str
    duration_ms: float | None
    speedup_vs_prev: float | None  # previous kernel time / this one, both under ncu
    checks: list  # [CheckResult]
    diagnosis: dict | None

    @property
    def verdict(self) -> str:
        required = [c for c in self.checks if c.required]
        if not required:
            return "NO-CHECK"
        if all(c.passed for c in required):
            return "PASS"
        if any(c.verdict == "FAIL" for c in required):
            return "FAIL"
        return "INCOMPLETE"  # a metric missing or nothing to compare against

    def to_dict(self) -> dict:
        return {
            "step": self.step.name,
            "technique": self.step.technique,
            "claim": self.step.proof,
            "kernel": self.kernel,
            "previous": self.previous.name if self.previous else None,
            "duration_ms": self.duration_ms,
            "speedup_vs_prev": self.speedup_vs_prev,
            "expected_speedup": self.step.expected_speedup if self.previous else None,
            "verdict": self.verdict,
            "checks": [c.to_dict() for c in self.checks],
            "diagnosis": self.diagnosis,
        }


def verify(profiles: dict[int, StepProfile], steps: Sequence[Step]) -> list[StepVerdict]:
    """One verdict per step in `steps` that was profiled, each against the step before it
    when that one was profiled too."""
    verdicts = []
    for step in steps:
        now = profiles.get(step.number)
        if now is None:
            continue
        before = profiles.get(step.number - 1)
        duration_ms = now.duration_ns / 1e6 if now.duration_ns else None
        prior_ms = before.duration_ns / 1e6 if before is not None and before.duration_ns else None
        verdicts.append(
            StepVerdict(
                step=step,
                previous=get_step(step.number - 1) if before is not None else None,
                kernel=now.kernel,
                duration_ms=duration_ms,
                speedup_vs_prev=prior_ms / duration_ms if prior_ms and duration_ms else None,
                checks=evaluate(step.number, now, before),
                diagnosis=now.diagnosis,
            )
        )
    return verdicts


def summary(verdicts: Sequence[StepVerdict]) -> dict:
    counts: dict[str, int] = {}
    for v in verdicts:
        counts[v.verdict] = counts.get(v.verdict, 0) + 1
    return counts


# --- from a report to profiles --------------------------------------------------------------


def step_for_kernel(name: str) -> Step | None:
    """The ladder step whose extern "C" kernel this is (ncu shows the bare function name)."""
    bare = name.split("(", 1)[0].strip()
    return next((s for s in STEPS if s.kernel == bare), None)


def profiles_from_kernels(
    kernels: Sequence, sass: dict[int, dict] | None = None, *, with_diagnosis: bool = True
) -> dict[int, StepProfile]:
    """StepProfiles from kernelab.profiling.report.KernelProfile objects; a step launched
    more than once keeps its last launch. Kernels that are no ladder step are ignored."""
    found: dict[int, StepProfile] = {}
    for kernel in kernels:
        step = step_for_kernel(kernel.name)
        if step is None:
            continue
        found[step.number] = StepProfile(
            step=step.number,
            kernel=kernel.name,
            metrics=dict(kernel.metrics),
            sass=dict((sass or {}).get(step.number, {})),
            duration_ns=kernel.duration_ns,
            diagnosis=_short_diagnosis(diagnose(kernel.metrics)) if with_diagnosis else None,
        )
    return found


def _short_diagnosis(d) -> dict:
    return {"bottleneck": d.bottleneck, "unit": d.unit, "summary": d.summary}


def step_defines(step: Step, size: int) -> dict | None:
    """The tile defines the step runs with at size^3: the tuned winner for tunable steps on
    this GPU; without a GPU (verifying a saved report), the step's default configuration."""
    if not step.tunable:
        return None
    import torch

    if not torch.cuda.is_available():
        return step.default_defines
    return winner(step, size, size, size)


def sass_for(
    steps: Sequence[Step], size: int, progress: Callable[[str], None] = lambda _: None
) -> dict[int, dict]:
    """Static SASS facts of the cubins the steps run at size^3 (nvcc and cuobjdump, no GPU);
    steps whose checks read no SASS fact are skipped, and so is everything without cuobjdump."""
    wanted = [
        s
        for s in steps
        if any(c.quantity.numerator.startswith(SASS_PREFIX) for c in CHECKS.get(s.number, ()))
    ]
    if not wanted or find_tool("cuobjdump") is None:
        if wanted:
            progress("cuobjdump not found: the SASS checks will read MISSING")
        return {}
    if any(s.tunable for s in wanted):
        import torch

        if not torch.cuda.is_available():
            progress("no GPU: the SASS of tunable steps is read from their default tiles")
    facts = {}
    for step in wanted:
        progress(f"reading the SASS of {step.name}")
        built = build_step(step, step_defines(step, size))
        facts[step.number] = sass_facts(built.cubin, step.kernel)
    return facts


# --- the ncu run ----------------------------------------------------------------------------

# What the checks and the diagnosis column read, without the focused set's memory tables and
# scheduler statistics: fewer replay passes, and the naive step takes ~0.3 s a pass at 4096^3.
VERIFY_SECTIONS = (
    "SpeedOfLight",
    "ComputeWorkloadAnalysis",
    "LaunchStats",
    "Occupancy",
    "WarpStateStats",
)


def launcher_command(steps: Sequence[Step], size: int) -> list[str]:
    """The program ncu runs: every step once inside kernelab's profiling NVTX range."""
    return [
        sys.executable,
        "-m",
        "kernelab.ladders.sgemm.verify",
        "--size",
        str(size),
        "--steps",
        ",".join(str(s.number) for s in steps),
    ]


def profile_steps(
    steps: Sequence[Step],
    size: int = DEFAULT_SIZE,
    *,
    out_path=None,
    sections: Sequence[str] = VERIFY_SECTIONS,
    timeout_s: float | None = 900.0,
    progress: Callable[[str], None] = lambda _: None,
):
    """Profile one launch of every step at size^3 in one ncu run; the ProfileRun and the
    StepProfiles (SASS facts included). Needs a GPU and ncu."""
    if size <= 0:
        raise KernelabError(f"the profile size must be positive, got {size}")
    steps = list(steps)
    prebuild(steps, size, progress)
    sass = sass_for(steps, size, progress)
    progress(f"profiling {len(steps)} steps at {size}^3 under ncu (one launch each)")
    run = run_command(
        launcher_command(steps, size),
        nvtx_range=PROFILE_RANGE + "/",
        launch_count=None,  # every kernel inside the ranges: one per step
        sections=sections,
        metrics=needed_metrics(steps),
        out_path=out_path or default_report_path(f"sgemm_ladder_verify_{size}"),
        timeout_s=timeout_s,
    )
    profiles = profiles_from_kernels(run.kernels, sass)
    missing = [s.name for s in steps if s.number not in profiles]
    if missing:
        raise KernelabError(f"ncu's report holds no kernel of {', '.join(missing)}")
    return run, profiles


def prebuild(
    steps: Sequence[Step], size: int, progress: Callable[[str], None] = lambda _: None
) -> None:
    """Compile every step here, before ncu starts: the launcher then finds each cubin in the
    disk cache instead of running nvcc under ncu (which follows child processes)."""
    for step in steps:
        progress(f"building {step.name}")
        build_step(step)  # what the registry's build() compiles
        if step.tunable:
            build_step(step, step_defines(step, size))  # what sgemm() runs at this size


def launch_steps(steps: Sequence[Step], size: int, warmup: int = LAUNCHER_WARMUP) -> None:
    """Run each step at size^3 once more inside the profiling range (under ncu)."""
    shape = {"m": size, "n": size, "k": size}
    for step in steps:
        runner.run(step.name, shape, "fp32", warmup=warmup, range_name=PROFILE_RANGE)


@one_line_failures
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kernelab.ladders.sgemm.verify")
    parser.add_argument("--size", type=int, default=DEFAULT_SIZE)
    parser.add_argument("--steps", default=None, help='e.g. "1-11" or "6,7"')
    parser.add_argument("--warmup", type=int, default=LAUNCHER_WARMUP)
    args = parser.parse_args(argv)
    if args.size <= 0:
        raise KernelabError(f"--size must be positive, got {args.size}")
    launch_steps(parse_steps(args.steps), args.size, args.warmup)
    return 0


if __name__ == "__main__":
    sys.exit(main())
