"""What the primitive ladders share (transpose, histogram, scan): the compile report (no GPU),
timing beside a copy of the same bytes in the same run, a record per timed row, and a profile
of every step's proof metric under Nsight Compute with its verdict against the step before.

The copy ceiling is measured beside the steps: dst.copy_(src) over the bytes a step moves one
way, cold, so "% of copy" compares two timings of one run on one GPU.
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

__all__ = [
    "SHARED_LOADS", "ZERO_ALLOWANCE_PER_LOAD", "compile_report", "profile_steps", "public_row",
    "timed_rows", "to_record", "verdict",
]  # fmt: skip

# A "zero" proof (no bank conflicts) is judged per shared-load instruction: the counter of
# those instructions comes along, and a step passes at 0 or at most this many conflicts per
# load (ncu counts a few extra wavefronts on conflict-free loads; the smallest real conflict,
# 2-way on every other load, adds 0.5: ladders/transpose/steps.py has the measured figures).
SHARED_LOADS = "smsp__sass_inst_executed_op_shared_ld.sum"
ZERO_ALLOWANCE_PER_LOAD = 0.25


def compile_report(
    steps, dtypes, build: Callable, progress: Callable[[str], None] = lambda _: None
) -> list[dict]:
    """What ptxas says about each step's entry per dtype: registers, shared memory, spills.
    Needs nvcc (or a warm cache), no GPU. Shared with the histogram ladder."""
    rows = []
    for step in steps:
        progress(f"compiling {step.name} ({step.file})")
        built = build(step)
        for dtype in dtypes:
            report = built.report(step.kernel_for(dtype))
            rows.append(
                {
                    "step": step.name,
                    "dtype": dtype,
                    "technique": step.technique,
                    "proof": step.proof,
                    "arch": built.arch,
                    "registers": report.registers,
                    "static_smem_bytes": report.shared_bytes,
                    "spill_store_bytes": report.spill_store_bytes,
                    "spill_load_bytes": report.spill_load_bytes,
                    "cubin": str(built.cubin),
                }
            )
    return rows


def timed_rows(
    entries: list[tuple[str, str, Callable]],
    *,
    bytes_moved: float,
    copy: Callable,
    copy_bytes: float,
    anchor: str,
    mode: str,
    max_time_s: float,
    progress: Callable[[str], None],
    timer: Callable | None = None,
) -> list[dict]:
    """Time the copy ceiling, then each (name, technique, fn) in order, in one run: GB/s,
    % of the copy bandwidth, time against `anchor` (an entry's name), speedup over the step
    before (the previous entry whose name has a ':'). Shared with the histogram ladder."""
    from kernelab.harness.timing import benchmark

    time = timer or (lambda fn: benchmark(fn, mode=mode, max_time_s=max_time_s))
    progress("timing the copy ceiling")
    ceiling = time(copy)
    copy_gbps = copy_bytes / (ceiling.median_ms * 1e-3) / 1e9
    rows = [_row("copy", "dst.copy_(src), the ceiling", ceiling, copy_bytes, copy_gbps)]
    previous = None
    for name, technique, fn in entries:
        progress(f"timing {name}")
        row = _row(name, technique, time(fn), bytes_moved, copy_gbps)
        if ":" in name:
            if previous is not None:
                row["speedup_vs_prev"] = previous["median_ms"] / row["median_ms"]
            previous = row
        rows.append(row)
    anchor_row = next((r for r in rows if r["step"] == anchor), None)
    for row in rows:
        if anchor_row is not None and row["step"] != "copy":
            row["speedup_vs_anchor"] = anchor_row["median_ms"] / row["median_ms"]
    return rows


def _row(name, technique, timing, bytes_moved, copy_gbps) -> dict:
    gbps = bytes_moved / (timing.median_ms * 1e-3) / 1e9
    return {
        "step": name,
        "technique": technique,
        "median_ms": timing.median_ms,
        "gbps": gbps,
        "pct_of_copy": 100.0 * gbps / copy_gbps,
        "speedup_vs_prev": None,
        "speedup_vs_anchor": None,
        "rel_noise": timing.rel_noise,
        "timing": timing,
    }


def public_row(row: dict) -> dict:
    """A timed row without its Timing object (what tables and JSON show)."""
    return {k: v for k, v in row.items() if k != "timing"}


def to_record(op: str, row: dict, dtype: str, cost):
    """One kernelab Record of one timed row (shared with the histogram ladder)."""
    from kernelab.environment import software_versions
    from kernelab.harness.ceilings import this_gpu
    from kernelab.harness.records import Record

    identity = this_gpu(f"kernelab ladder {op}")
    timing = row["timing"]
    return Record(
        op=op,
        implementation=row["step"],
        shape=dict(row["shape"]),
        dtype=dtype,
        mode=timing.mode,
        samples_ms=list(timing.samples_ms),
        stats=timing.summary.to_dict(),
        gpu=identity.name,
        gpu_id=identity.gpu_id,
        driver=identity.driver,
        versions=software_versions(),
        clocks=dict(getattr(timing, "clocks", {})),
        flops=0.0,
        bytes=cost.bytes,
        achieved_tflops=0.0,
        warnings=list(getattr(timing, "warnings", [])),
        extra={k: v for k, v in public_row(row).items() if k not in ("shape", "step")}
        | {"ladder": op},
    )


# --- profiling: every step's proof metric under Nsight Compute -------------------------------


def profile_steps(
    ladder: str,
    steps,
    launcher_args: list[str],
    kernel_for: Callable,
    *,
    progress: Callable[[str], None] = lambda _: None,
) -> list[dict]:
    """One ncu run over a child that launches each step once; per step its proof metric, the
    step before's value and whether it moved as the step claims. Shared with the histogram
    ladder (`ladder`: "transpose" or "histogram"; `kernel_for(step)`: its kernel name)."""
    from kernelab.profiling.ncu import run_ncu
    from kernelab.profiling.report import load

    # a "zero" proof is judged per shared-load instruction, so its count comes along
    zero = any(s.direction == "zero" for s in steps)
    metrics = sorted({s.proof for s in steps} | ({SHARED_LOADS} if zero else set()))
    out = Path(tempfile.mkdtemp(prefix=f"kernelab-{ladder}-")) / "ladder"
    command = [sys.executable, "-m", f"kernelab.ladders.{ladder}.ladder", *launcher_args]
    progress(f"profiling {len(steps)} steps under ncu")
    report, _, _ = run_ncu(
        command, out_path=out, kernel_regex=f"^{ladder}_", launch_count=None,
        sections=(), metrics=metrics, timeout_s=900,
    )  # fmt: skip
    kernels = {k.name: k for k in load(report)}
    rows, previous = [], None
    for step in steps:
        kernel = kernels.get(kernel_for(step))
        values = {name: kernel.metric(name) if kernel else None for name in metrics}
        value = values[step.proof]
        before = previous.get(step.proof) if previous else None
        loads = values.get(SHARED_LOADS) if step.direction == "zero" else None
        per_load = value / loads if value is not None and loads else None
        rows.append(
            {
                "step": step.name, "proof": step.proof, "value": value, "previous": before,
                "per_load": per_load, "direction": step.direction,
                "verdict": verdict(step.direction, before, value, per_load=per_load),
                "metrics": values, "report": str(report),
            }
        )  # fmt: skip
        previous = values
    return rows


def verdict(direction: str, before, value, *, per_load: float | None = None) -> str:
    """PASS/FAIL of a proof metric against the step before; MISSING without a value. A "zero"
    proof passes at 0, or at most ZERO_ALLOWANCE_PER_LOAD per shared-load instruction
    (`per_load`: the value over the step's shared loads)."""
    if value is None:
        return "MISSING"
    if direction == "reference":
        return "PASS"
    if direction == "zero":
        if value == 0:
            return "PASS"
        return "PASS" if per_load is not None and per_load <= ZERO_ALLOWANCE_PER_LOAD else "FAIL"
    if before is None:
        return "NO-PREV"
    return "PASS" if value < before else "FAIL"
