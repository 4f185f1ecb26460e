"""The reduction ladder's engine: compile report, checks, timing with the anchors, the table,
and the proving counters from Nsight Compute.

The table (one per dtype and size): time, GB/s (n x itemsize bytes read per call), % of the
measured read-only ceiling (kernelab.harness.ceilings' "read": a reduction reads and never
writes, so the copy roof is the wrong one), the speedup over the step before and the counter
that proves the step's fix (steps.Step.metric, read from ncu with --profile). Anchors timed in
the same run: torch.sum (fp32 accumulation) and CUB through cuda.compute or CuPy when one of
them imports (`pip install kernelab[cub]`), else one line saying it is absent. Beside the
harness's median each measurement and record carries the triton.testing.do_bench median and
the host cost per call (ladders.engine.time_call).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence

from kernelab.errors import KernelabError
from kernelab.ladders.reduce.launch import build_step
from kernelab.ladders.reduce.steps import DTYPES, LAUNCHES, STEPS, Step, get_step, parse_steps
from kernelab.runtime.cuda.sass import find_tool, opcode_counts
from kernelab.spec.reference import get_op

__all__ = [
    "DTYPES",
    "STEPS",
    "check_steps",
    "compile_report",
    "cub_anchor",
    "get_step",
    "parse_steps",
    "profile_steps",
    "read_ceiling",
    "table_rows",
    "time_ladder",
]

TORCH_ANCHOR = "torch.sum"
CUB_ANCHOR = "cub"
NO_CUB = "CUB anchor absent: neither cuda.compute (cuda-cccl) nor cupy imports; pip install 'kernelab[cub]'"
# Awkward sizes every step is checked at before any timing (primes, 1, one past a block).
CHECK_SIZES = (1, 2, 31, 33, 257, 1023, 100003, 1 << 20)


def compile_report(
    steps: Sequence[Step], dtype: str = "fp32", progress: Callable[[str], None] = lambda _: None
) -> list[dict]:
    """What ptxas and the SASS say about each step's first-pass kernel: registers, shared
    memory, spills, and the load width and shuffles it uses. Needs nvcc (or a warm cache)."""
    rows = []
    for step in steps:
        progress(f"compiling {step.name} ({step.file}, {dtype})")
        built = build_step(step, dtype)
        report = built.report(step.kernel)
        sass = {}
        if find_tool("cuobjdump"):
            counts = opcode_counts(built.cubin, step.kernel)
            sass = {
                "ldg_128": sum(
                    n for op, n in counts.items() if op.startswith("LDG") and ".128" in op
                ),
                "ldg": sum(
                    n for op, n in counts.items() if op.startswith("LDG") and ".128" not in op
                ),
                "shfl": sum(n for op, n in counts.items() if op.startswith("SHFL")),
                "bar": sum(n for op, n in counts.items() if op.startswith("BAR")),
            }
        rows.append(
            {
                "step": step.name,
                "technique": step.technique,
                "dtype": dtype,
                "arch": built.arch,
                "registers": report.registers,
                "static_smem_bytes": report.shared_bytes,
                "spill_store_bytes": report.spill_store_bytes,
                "spill_load_bytes": report.spill_load_bytes,
                "stack_frame_bytes": report.stack_frame_bytes,
                "sass": sass,
                "cubin": str(built.cubin),
                "cached": built.cached,
            }
        )
    return rows


def check_steps(
    steps: Sequence[Step],
    sizes: Sequence[int],
    dtypes: Sequence[str],
    progress: Callable[[str], None] = lambda _: None,
) -> list[dict]:
    """check_implementation for every step at CHECK_SIZES and the timed sizes, every dtype."""
    from kernelab.harness.check import check_implementation
    from kernelab.spec.registry import get

    rows = []
    for step in steps:
        fn = get(step.name).build()
        for dtype in dtypes:
            for n in sorted(set(CHECK_SIZES) | set(sizes)):
                progress(f"checking {step.name} at n={n} {dtype}")
                report = check_implementation(fn, "reduce_sum", {"n": n}, dtype, trials=2)
                rows.append({"step": step.name, "n": n, "dtype": dtype, "ok": report.ok,
                             "error": report.error, "message": report.message})  # fmt: skip
    return rows


def read_ceiling(progress: Callable[[str], None] = lambda _: None) -> tuple[float | None, str]:
    """(read-only bandwidth in bytes/s, where it comes from) on this GPU: the ceilings cache
    when it holds a read figure, else measured now (kernelab.probes.bandwidth.hbm_read) and
    added to the cache when there is one (ladders.engine.read_ceiling, which the histogram
    ladder shares)."""
    from kernelab.ladders.engine import read_ceiling as engine_read_ceiling

    return engine_read_ceiling("kernelab ladder reduce", progress)


def cub_anchor() -> tuple[Callable | None, str]:
    """(fn(x) -> 0-d fp32 sum through CUB, what it is) or (None, NO_CUB)."""
    try:
        import cuda.compute as cuda_compute  # cuda-cccl's Python algorithms
    except ImportError:
        cuda_compute = None
    if cuda_compute is not None and hasattr(cuda_compute, "reduce_into"):
        import numpy as np
        import torch

        def cub_sum(x):
            # The accumulator takes the initial value's type: fp32 for every input dtype.
            out = torch.empty(1, dtype=torch.float32, device=x.device)
            init = np.zeros(1, dtype=np.float32)
            # keyword-only since cuda-cccl 0.7
            cuda_compute.reduce_into(d_in=x, d_out=out, num_items=x.numel(),
                                     op=cuda_compute.OpKind.PLUS, h_init=init)  # fmt: skip
            return out.view(())

        return cub_sum, "CUB DeviceReduce through cuda.compute.reduce_into"
    try:
        import cupy
    except ImportError:
        return None, NO_CUB

    def cupy_sum(x):
        import torch

        if x.dtype == torch.bfloat16:  # CuPy reads a bf16 array as an opaque numpy.void
            raise KernelabError("CuPy has no bfloat16: its CUB sum takes fp32 and fp16 only")
        # CuPy's sum goes through CUB (CUPY_ACCELERATORS=cub); fp32 accumulation via dtype.
        result = cupy.asarray(x).sum(dtype=cupy.float32)
        return torch.as_tensor(result, device=x.device)

    return cupy_sum, "CUB through CuPy's sum (set CUPY_ACCELERATORS=cub)"


def table_rows(measurements: Sequence[dict], read_bytes_per_s: float | None) -> list[dict]:
    """The ladder's table from measurements {step, n, dtype, median_ms[, counter,
    do_bench_median_ms, host_cost]}, in order: GB/s from n x itemsize bytes read, % of the
    read ceiling, the speedup over the step before (steps only, in ladder order per n and
    dtype; anchors get none); the do_bench median and the host cost per call pass through
    (None where they were not measured)."""
    from kernelab.roofline.costs import dtype_bytes

    rows, previous = [], {}
    for m in measurements:
        n, dtype, ms = int(m["n"]), m["dtype"], float(m["median_ms"])
        if ms <= 0:
            raise KernelabError(f"{m['step']}: a time must be positive, got {ms} ms")
        bytes_read = n * dtype_bytes(dtype)
        rate = bytes_read / (ms * 1e-3)
        is_step = str(m["step"]).startswith("reduce:")
        key = (n, dtype)
        before = previous.get(key) if is_step else None
        rows.append(
            {
                "step": m["step"],
                "n": n,
                "dtype": dtype,
                "median_ms": ms,
                "gb_per_s": rate / 1e9,
                "pct_of_read_ceiling": 100 * rate / read_bytes_per_s if read_bytes_per_s else None,
                "speedup_vs_prev": before["median_ms"] / ms if before else None,
                "expected_speedup": get_step(m["step"]).expected_speedup if is_step else None,
                "counter": m.get("counter"),
                "do_bench_median_ms": m.get("do_bench_median_ms"),
                "host_cost": m.get("host_cost"),
            }
        )
        if is_step:
            previous[key] = rows[-1]
    return rows


def time_ladder(
    steps: Sequence[Step],
    sizes: Sequence[int],
    dtypes: Sequence[str],
    *,
    mode: str = "cold",
    max_time_s: float = 2.0,
    progress: Callable[[str], None] = lambda _: None,
    timer: Callable | None = None,
    do_bench: Callable | bool | None = None,
    host_cost: Callable | bool | None = None,
) -> tuple[list[dict], list, str]:
    """Time the anchors and every step at every size and dtype in one run; the measurements
    (table_rows' input), the records, and the CUB anchor's line.

    Beside the harness's median each measurement (and its record's extra) carries the median
    of triton.testing.do_bench and the host cost per call (ladders.engine.time_call; N
    back-to-back calls ending in one synchronize). do_bench, host_cost: None for the real ones
    (do_bench absent where Triton does not import), False to leave one out, or a stand-in;
    timer: a stand-in for the harness's benchmark (tests), which turns the real extras off
    unless they are given."""
    import torch

    from kernelab.environment import software_versions
    from kernelab.harness.ceilings import this_gpu
    from kernelab.harness.timing import benchmark
    from kernelab.ladders.engine import resolve_extras, time_call
    from kernelab.spec.registry import get

    identity, versions = this_gpu("kernelab ladder reduce"), software_versions()
    from kernelab.harness.check import check_implementation

    def harness(fn):
        return benchmark(fn, mode=mode, max_time_s=max_time_s)

    time = timer or harness
    do_bench, host_cost = resolve_extras(timer, do_bench, host_cost)
    cub_fn, cub_line = cub_anchor()
    # An anchor is timed only where it is right, like the steps: per dtype, so that one the
    # anchor's API lacks (CuPy has no bf16) leaves the others timed.
    cub_wrong: dict[str, str] = {}
    if cub_fn is not None:
        for dtype in dtypes:
            try:
                report = check_implementation(cub_fn, "reduce_sum", {"n": 100003}, dtype, trials=1)
                wrong = None if report.ok else report.message
            except Exception as exc:  # an API it does not support (a dtype, a keyword)
                first = str(exc).strip().splitlines()[0][:160] if str(exc).strip() else ""
                wrong = f"{type(exc).__name__}: {first}"
            if wrong is not None:
                cub_wrong[dtype] = wrong
        if cub_wrong:
            cub_line += "; not timed for " + "; ".join(
                f"{dtype} ({why})" for dtype, why in cub_wrong.items()
            )
    steps_built = [(step.name, get(step.name).build()) for step in steps]
    measurements, records = [], []
    for dtype in dtypes:
        candidates = [(TORCH_ANCHOR, get(TORCH_ANCHOR).build())]
        if cub_fn is not None and dtype not in cub_wrong:
            candidates.append((CUB_ANCHOR, cub_fn))
        candidates += steps_built
        for n in sizes:
            (x,) = get_op("reduce_sum").make_inputs({"n": n}, dtype, seed=0, device="cuda")
            cost = get_op("reduce_sum").cost({"n": n}, dtype)
            for name, fn in candidates:
                progress(f"timing {name} at n={n} {dtype}")
                timing, extra = time_call(lambda fn=fn, x=x: fn(x), time, do_bench=do_bench,
                                          host_cost=host_cost)  # fmt: skip
                measurements.append({"step": name, "n": n, "dtype": dtype,
                                     "median_ms": timing.median_ms, **extra})  # fmt: skip
                records.append(to_record(name, n, dtype, timing, cost, identity, versions,
                                         extra=extra))  # fmt: skip
            del x
            torch.cuda.empty_cache()
    return measurements, records, cub_line


def to_record(name: str, n: int, dtype: str, timing, cost, identity, versions: dict,
              *, extra: dict | None = None):  # fmt: skip
    """A kernelab Record of one timing (the harness's Timing or a stand-in with median_ms,
    rel_noise, samples_ms and mode); `extra`: what time_call measured beside it (the
    do_bench median and count, the host cost per call), kept in the record's extra."""
    from kernelab.harness.records import Record

    summary = getattr(timing, "summary", None)
    stats = summary.to_dict() if summary is not None else {
        "median": timing.median_ms, "rel_noise": timing.rel_noise, "n": len(timing.samples_ms)
    }  # fmt: skip
    return Record(
        op="reduce_sum",
        implementation=name,
        shape={"n": n},
        dtype=dtype,
        mode=timing.mode,
        samples_ms=list(timing.samples_ms),
        stats=stats,
        gpu=identity.name,
        gpu_id=identity.gpu_id,
        driver=identity.driver,
        versions=versions,
        clocks=dict(getattr(timing, "clocks", {})),
        flops=cost.flops,
        bytes=cost.bytes,
        achieved_gbps=cost.bytes / (timing.median_ms * 1e-3) / 1e9,
        warnings=list(getattr(timing, "warnings", [])),
        extra={"ladder": "reduce", **(extra or {})},
    )


# --- the proving counters under Nsight Compute ----------------------------------------------

PROFILE_SECTIONS = (
    "SpeedOfLight",
    "LaunchStats",
    "Occupancy",
    "SourceCounters",
    "MemoryWorkloadAnalysis",
)


def launcher_command(steps: Sequence[Step], n: int, dtype: str) -> list[str]:
    """The program ncu runs: every step once inside kernelab's profiling NVTX range."""
    return [sys.executable, "-m", "kernelab.ladders.reduce.ladder", "--n", str(n),
            "--dtype", dtype, "--steps", ",".join(str(s.number) for s in steps)]  # fmt: skip


def counters_from_kernels(kernels: Sequence, steps: Sequence[Step]) -> dict[str, dict]:
    """Per step: its proving counter from the first-pass kernel and how many launches it
    made (a two-pass step launches its _partials kernel too)."""
    found: dict[str, dict] = {}
    for step in steps:
        own = [k for k in kernels if k.name.split("(", 1)[0].strip() in
               (step.kernel, step.partials_kernel)]  # fmt: skip
        first = next((k for k in own if k.name.split("(", 1)[0].strip() == step.kernel), None)
        if first is None:
            continue
        value = len(own) if step.metric == LAUNCHES else first.metrics.get(step.metric)
        found[step.name] = {"metric": step.metric, "label": step.metric_label,
                            "value": value, "launches": len(own),
                            "duration_ns": first.duration_ns}  # fmt: skip
    return found


def profile_steps(
    steps: Sequence[Step], n: int, dtype: str, progress: Callable[[str], None] = lambda _: None
) -> dict[str, dict]:
    """One launch of every step at n elements under ncu: the proving counters. Needs a GPU
    and ncu."""
    from kernelab.profiling.runner import PROFILE_RANGE
    from kernelab.profiling.session import default_report_path, run_command

    for step in steps:
        progress(f"building {step.name}")
        build_step(step, dtype)
    metrics = tuple(dict.fromkeys(s.metric for s in steps if s.metric != LAUNCHES))
    run = run_command(
        launcher_command(steps, n, dtype),
        nvtx_range=PROFILE_RANGE + "/",
        launch_count=None,
        sections=PROFILE_SECTIONS,
        metrics=metrics,
        out_path=default_report_path(f"reduce_ladder_{n}_{dtype}"),
        timeout_s=900.0,
    )
    return counters_from_kernels(run.kernels, steps)


def main(argv: list[str] | None = None) -> int:
    """Run each step once inside the profiling range (what ncu profiles)."""
    import argparse

    from kernelab.profiling import runner
    from kernelab.profiling.runner import PROFILE_RANGE

    parser = argparse.ArgumentParser(prog="python -m kernelab.ladders.reduce.ladder")
    parser.add_argument("--n", type=int, required=True)
    parser.add_argument("--dtype", default="fp32")
    parser.add_argument("--steps", default=None)
    args = parser.parse_args(argv)
    try:
        for step in parse_steps(args.steps):
            runner.run(step.name, {"n": args.n}, args.dtype, warmup=2, range_name=PROFILE_RANGE)
    except KernelabError as exc:
        print(f"kernelab: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
