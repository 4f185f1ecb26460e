"""What the primitive ladders share (transpose, histogram, scan, and reduce's timing): the
compile report (no GPU), timing beside a copy of the same bytes in the same run, a record per
timed row, and a profile of every step's proof metric under Nsight Compute with its verdict
against the step before.

The copy ceiling is measured beside the steps: dst.copy_(src) over the bytes a step moves one
way, cold, so "% of copy" compares two timings of one run on one GPU. Where a ladder only
reads (the histogram, the reduction) the measured read-only ceiling (read_ceiling: the
ceilings cache, else probes.bandwidth.hbm_read now) gives "% of read" beside it.

Each call is timed as a PyTorch user meets it (time_call): the harness's device time (cold
L2, adaptive stopping), and beside it, optionally, the median of triton.testing.do_bench and
the host's cost per call (harness.launch_cost: N back-to-back calls ending in one
synchronize; wall_us is that loop's time over N, host_us the time to issue one call).
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

__all__ = [
    "DO_BENCH", "SHARED_LOADS", "ZERO_ALLOWANCE_PER_LOAD", "compile_report", "do_bench_sampler",
    "profile_steps", "public_row", "read_ceiling", "resolve_extras", "time_call", "timed_rows",
    "to_record", "verdict",
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


# triton.testing.do_bench's own defaults (ms of warm-up and of repetitions), as the decode
# benchmarks call it; it flushes the L2 before every call, like the harness's cold mode.
DO_BENCH = {"warmup": 25, "rep": 100}


def do_bench_sampler() -> Callable | None:
    """fn -> the do_bench samples of fn (ms, every repetition), or None where Triton does not
    import (the do_bench median is then absent from the rows, never invented)."""
    try:
        import triton.testing
    except ImportError:
        return None

    def sample(fn) -> list[float]:
        return list(triton.testing.do_bench(fn, return_mode="all", **DO_BENCH))

    return sample


def _host_cost(fn, device_ms: float) -> dict:
    from kernelab.harness.launch_cost import measure_host_cost

    return measure_host_cost(fn, device_ms).to_dict()


def time_call(fn: Callable, time: Callable, *, do_bench=None, host_cost=None) -> tuple:
    """(timing, extra) of one call: `time(fn)` is the harness's Timing (median_ms, rel_noise,
    ...); extra holds, where asked, "do_bench_median_ms" and "do_bench_samples" (the median
    and count of `do_bench(fn)`'s samples) and "host_cost" (`host_cost(fn, median_ms)`: calls,
    host_us, wall_us, device_us, launch_bound). do_bench, host_cost: None or False leave the
    figure out; the ladders pass the real ones (resolve_extras) or stand-ins in tests."""
    import statistics

    timing = time(fn)
    extra: dict = {}
    if do_bench:
        samples = list(do_bench(fn))
        extra["do_bench_median_ms"] = statistics.median(samples) if samples else None
        extra["do_bench_samples"] = len(samples)
    if host_cost:
        extra["host_cost"] = dict(host_cost(fn, timing.median_ms))
    return timing, extra


def resolve_extras(timer, do_bench, host_cost) -> tuple:
    """(do_bench, host_cost) to time with: None means the real one when the harness times
    (no stand-in `timer`), nothing beside a stand-in; False means off; a callable is used as
    given. The real do_bench is absent where Triton does not import."""
    real = timer is None
    if do_bench is None:
        do_bench = do_bench_sampler() if real else False
    if host_cost is None:
        host_cost = _host_cost if real else False
    return do_bench, host_cost


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
    read_bytes_per_s: float | None = None,
    do_bench: Callable | bool | None = None,
    host_cost: Callable | bool | None = None,
) -> list[dict]:
    """Time the copy ceiling, then each (name, technique, fn) in order, in one run: GB/s,
    % of the copy bandwidth, time against `anchor` (an entry's name), speedup over the step
    before (the previous entry whose name has a ':'). Shared with the histogram and scan
    ladders.

    read_bytes_per_s: the measured read-only ceiling (read_ceiling); with it every row also
    has "pct_of_read" (its GB/s over that roof) and "read_ceiling_gbps", else None there.
    do_bench, host_cost: see time_call and resolve_extras; each row carries what they give."""
    from kernelab.harness.timing import benchmark

    time = timer or (lambda fn: benchmark(fn, mode=mode, max_time_s=max_time_s))
    do_bench, host_cost = resolve_extras(timer, do_bench, host_cost)

    def measure(fn):
        return time_call(fn, time, do_bench=do_bench, host_cost=host_cost)

    progress("timing the copy ceiling")
    ceiling, extra = measure(copy)
    copy_gbps = copy_bytes / (ceiling.median_ms * 1e-3) / 1e9
    rows = [_row("copy", "dst.copy_(src), the ceiling", ceiling, copy_bytes, copy_gbps,
                 read_bytes_per_s) | extra]  # fmt: skip
    previous = None
    for name, technique, fn in entries:
        progress(f"timing {name}")
        timing, extra = measure(fn)
        row = _row(name, technique, timing, bytes_moved, copy_gbps, read_bytes_per_s) | extra
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


def _row(name, technique, timing, bytes_moved, copy_gbps, read_bytes_per_s=None) -> dict:
    gbps = bytes_moved / (timing.median_ms * 1e-3) / 1e9
    read_gbps = read_bytes_per_s / 1e9 if read_bytes_per_s else None
    return {
        "step": name,
        "technique": technique,
        "median_ms": timing.median_ms,
        "gbps": gbps,
        "pct_of_copy": 100.0 * gbps / copy_gbps,
        "pct_of_read": 100.0 * gbps / read_gbps if read_gbps else None,
        "read_ceiling_gbps": read_gbps,
        "speedup_vs_prev": None,
        "speedup_vs_anchor": None,
        "rel_noise": timing.rel_noise,
        "timing": timing,
    }


def read_ceiling(
    command: str, progress: Callable[[str], None] = lambda _: None
) -> tuple[float | None, str]:
    """(read-only bandwidth in bytes/s, where it comes from) on this GPU: the ceilings cache
    when it holds a read figure, else measured now (kernelab.probes.bandwidth.hbm_read over
    4 GiB) and added to the cache when there is one. `command` names the caller in the GPU's
    identity (e.g. "kernelab ladder histogram"). Shared by the reduce and histogram ladders."""
    from kernelab.harness.ceilings import (
        add_read_ceiling,
        cache_path,
        cached_for,
        read_rate,
        save_measured,
        this_gpu,
    )
    from kernelab.probes.bandwidth import hbm_read

    identity = this_gpu(command)
    measured = cached_for(identity)
    rate = read_rate(measured)
    if rate is not None:
        return rate, f"cached ({cache_path(identity)})"
    if measured is not None:
        add_read_ceiling(measured, hbm_read)
        save_measured(measured, cache_path(identity))
        return read_rate(measured), f"measured now, added to {cache_path(identity)}"
    progress("measuring the read-only ceiling (no cached ceilings; `kernelab ceilings` caches all)")
    nbytes, timing = hbm_read(4 * 1024**3, max_time_s=2.0)
    return nbytes / (timing.median_ms * 1e-3), "measured now (not cached)"


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
