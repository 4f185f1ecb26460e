"""From the timeline to Nsight Compute: profile the top kernels of a script and diagnose each.

For each of the top N kernels (by total GPU time) the script runs again under ncu through
kernelab.profiling, with its warm-up outside and its profiled steps inside the NVTX range
`kernelab_timeline` (capture.py's --nvtx-only mode), so that no warm-up launch (cuBLAS
heuristics, Triton autotuning, lazy module loads) is ever the profiled one. ncu matches a
kernel by its bare function name (its default `--kernel-name-base function`); several
template instances can share that name, so the launch to profile is picked by its index
among the same-named launches of the first profiled step, which the torch.profiler trace
recorded in order. One ncu run per kernel: ncu replays the profiled kernel many times to
read its counters, and a run is a fresh process (tens of seconds with torch's start-up).
"""

from __future__ import annotations

import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

from kernelab.errors import KernelabError
from kernelab.output import note
from kernelab.timeline.capture import NVTX_RANGE, child_command, child_env, parse_target
from kernelab.timeline.classify import function_name


@dataclass
class DrillTarget:
    kernel: str  # the full kernel name in the trace
    regex: str  # what ncu matches against the function name
    launch_skip: int  # same-named launches to skip inside the NVTX range


@dataclass
class DrillResult:
    kernel: str
    target: DrillTarget
    report: str | None
    summary: dict | None  # kernelab.profiling.summary.KernelSummary.to_dict()
    error: str | None = None

    def to_dict(self) -> dict:
        data = {
            "kernel": self.kernel,
            "regex": self.target.regex,
            "launch_skip": self.target.launch_skip,
            "report": self.report,
            "error": self.error,
        }
        if self.summary is not None:
            data["bottleneck"] = self.summary.get("bottleneck")
            data["unit"] = self.summary.get("unit")
            data["diagnosis"] = self.summary.get("diagnosis")
            data["profile"] = self.summary
        return data


def drill_targets(trace, kernel_names: list[str]) -> list[DrillTarget]:
    """Where each kernel first runs in the first profiled step, as (function regex, skip)."""
    window_start = trace.steps[0][1] if trace.steps else float("-inf")
    window_end = trace.steps[0][2] if trace.steps else float("inf")
    # Launches made during the first step, in launch order (the order ncu counts them in).
    in_step = [
        a
        for a in sorted(
            trace.activities, key=lambda a: a.launch.start_us if a.launch else a.start_us
        )
        if a.kind == "kernel"
        and window_start <= (a.launch.start_us if a.launch else a.start_us) <= window_end
    ]
    if not in_step:  # the step range may not be there (a trace from elsewhere): use them all
        in_step = [a for a in trace.activities if a.kind == "kernel"]
    targets = []
    for name in kernel_names:
        base = function_name(name)
        skip = 0
        for activity in in_step:
            if activity.name == name:
                break
            if function_name(activity.name) == base:
                skip += 1
        else:
            skip = 0  # not launched in the first step: take the first same-named launch
        targets.append(DrillTarget(name, f"^{re.escape(base)}$", skip))
    return targets


def drill(
    command,
    timeline,
    count: int,
    *,
    out_dir=None,
    warmup: int = 3,
    gpu=None,
    timeout_s: float | None = 600,
) -> list[DrillResult]:
    """Profile the top `count` kernels of `timeline` (from profile_script of `command`) with
    Nsight Compute and diagnose each; a failed ncu run is reported in its result's error."""
    from kernelab.profiling import ncu
    from kernelab.profiling.report import load_report
    from kernelab.profiling.summary import summarize

    if count < 0:
        raise KernelabError(f"--drill must be 0 or more, got {count}")
    if count == 0:
        return []
    if timeline.summary.unit != "kernel" or not timeline.trace.activities:
        raise KernelabError("--drill needs a GPU timeline: this run recorded no kernel")
    kernels = [row.name for row in timeline.summary.top if row.kind == "kernel"][:count]
    target = parse_target(command)
    out = Path(out_dir) if out_dir is not None else Path(tempfile.mkdtemp(prefix="kernelab-dr-"))
    results = []
    for i, drill_target in enumerate(drill_targets(timeline.trace, kernels)):
        argv = child_command(target, out / "nvtx-run", warmup=warmup, steps=1, nvtx_only=True)
        note(f"drill {i + 1}/{len(kernels)}: {function_name(drill_target.kernel)}")
        try:
            report, _, _ = ncu.run_ncu(
                argv,
                out_path=out / f"drill_{i + 1}.ncu-rep",
                kernel_regex=drill_target.regex,
                nvtx_range=NVTX_RANGE + "/",  # a push/pop range: ncu wants the trailing slash
                launch_skip=drill_target.launch_skip,
                launch_count=1,
                timeout_s=timeout_s,
                env=child_env(),  # kernelab importable in the profiled process
            )
            profiles = load_report(report)
            if not profiles:
                raise KernelabError(f"{report}: the report holds no kernel")
            summary = summarize(profiles[0], gpu=gpu).to_dict()
            results.append(DrillResult(drill_target.kernel, drill_target, str(report), summary))
        except KernelabError as exc:
            results.append(DrillResult(drill_target.kernel, drill_target, None, None, str(exc)))
    return results
