"""Run the SGEMM ladder: the compile report (no GPU needed), then check every step, time
every step and cuBLAS fp32 in the same run, and turn the timings into rows and records; or
profile every step once under Nsight Compute and verify the metric each step claims to
improve (the checks live in verify.py).

Every "% of cuBLAS" here is measured in one harness and one process, side by side, with
TF32 off: cuBLAS is the registry's "torch.mm" (full fp32).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from pathlib import Path

from kernelab.environment import software_versions
from kernelab.errors import KernelabError
from kernelab.harness.ceilings import catalog_id_for, this_gpu
from kernelab.harness.check import check_implementation
from kernelab.harness.gpu_clocks import driver_version
from kernelab.harness.records import Record
from kernelab.harness.stats import summarize
from kernelab.harness.timing import benchmark
from kernelab.ladders.sgemm import verify
from kernelab.ladders.sgemm.launch import build_step, sgemm
from kernelab.ladders.sgemm.steps import Step
from kernelab.ladders.sgemm.steps import parse_steps as parse_steps  # for the engine's callers
from kernelab.ladders.sgemm.tuning import reference_defines, store_winner
from kernelab.profiling.metrics import SM_CYCLES_PER_SECOND
from kernelab.profiling.report import load
from kernelab.runtime.cuda.sass import find_tool, sass_facts
from kernelab.spec.reference import get_op
from kernelab.spec.registry import get

CUBLAS = "torch.mm"
# Steps this slow take seconds per call at 8192^3 (naive: ~500 GFLOP/s -> 2.2 s); time them
# with fewer samples.
SLOW_STEPS = {1, 2, 3}


def compile_report(
    steps: list[Step], progress: Callable[[str], None] = lambda _: None
) -> list[dict]:
    """What ptxas and the SASS say about each step: registers, shared memory, spills, and the
    instruction facts the step's technique rests on. Needs nvcc (or a warm cache), no GPU.
    A tunable step is compiled with tuning.reference_defines, the tiles its H200 records ran
    (the tiles the registry's metadata and the tile lens describe too)."""
    rows = []
    for step in steps:
        progress(f"compiling {step.name} ({step.file})")
        defines = reference_defines(step)
        built = build_step(step, defines)
        report = built.report(step.kernel)
        launch = step.launch(4096, 4096, 4096, defines)
        facts = sass_facts(built.cubin, step.kernel) if find_tool("cuobjdump") else {}
        rows.append(
            {
                "step": step.name,
                "technique": step.technique,
                "arch": built.arch,
                "defines": defines,
                "tiles": step.tiles_with(defines),
                "registers": report.registers,
                "static_smem_bytes": report.shared_bytes,
                "dynamic_smem_bytes": launch.shared_bytes,
                "spill_store_bytes": report.spill_store_bytes,
                "spill_load_bytes": report.spill_load_bytes,
                "stack_frame_bytes": report.stack_frame_bytes,
                "threads": math.prod(launch.block),
                "sass": facts,
                "cubin": str(built.cubin),
                "cached": built.cached,
            }
        )
    return rows


def check_steps(
    steps: list[Step], shapes: list[dict], progress: Callable[[str], None] = lambda _: None
) -> list[dict]:
    """check_implementation for every step at every shape; one row each."""

    rows = []
    for step in steps:
        fn = get(step.name).build()
        for shape in shapes:
            progress(f"checking {step.name} at {_shape_text(shape)}")
            report = check_implementation(fn, "gemm", shape, "fp32")
            rows.append(
                {
                    "step": step.name,
                    "shape": shape,
                    "ok": report.ok,
                    "error": report.error,
                    "threshold": report.threshold,
                    "message": report.message,
                }
            )
    return rows


def _shape_text(shape: dict) -> str:
    return "x".join(str(shape[k]) for k in ("m", "n", "k"))


def time_ladder(
    steps: list[Step],
    sizes: list[int],
    *,
    mode: str = "cold",
    max_time_s: float = 2.0,
    progress: Callable[[str], None] = lambda _: None,
    timer: Callable | None = None,
    skip_slow_above: int | None = None,
) -> tuple[list[dict], list]:
    """Time cuBLAS fp32 and every step at every square size, in the same run.

    Returns (rows, records). A row: step, size, median_ms, gflops, pct_of_cublas,
    speedup_vs_prev (observed, against the previous *timed* step), expected_speedup,
    rel_noise. `timer(fn, min_samples)` overrides kernelab.harness.timing.benchmark.
    Steps in SLOW_STEPS are skipped at sizes above `skip_slow_above` when it is given.
    """
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    benchmark = timer or _harness_timer(mode, max_time_s)
    identity, versions = _identity()
    rows, records = [], []
    for size in sizes:
        a = torch.randn(size, size, device="cuda")
        b = torch.randn(size, size, device="cuda")
        cost = get_op("gemm").cost({"m": size, "n": size, "k": size}, "fp32")
        flops = cost.flops
        progress(f"timing cuBLAS fp32 at {size}^3")
        cublas_impl = get(CUBLAS)
        cublas_fn = cublas_impl.build()
        cublas = benchmark(lambda fn=cublas_fn, a=a, b=b: fn(a, b), 10)
        cublas_row = _row("cuBLAS", None, size, cublas, cost, cublas.median_ms)
        rows.append(cublas_row)
        records.append(to_record(CUBLAS, size, cublas, flops, identity, versions, cublas_row))
        previous = None
        for step in steps:
            if skip_slow_above is not None and step.number in SLOW_STEPS and size > skip_slow_above:
                progress(f"skipping {step.name} at {size}^3: seconds per call")
                continue
            progress(f"timing {step.name} ({step.slug}) at {size}^3")
            fn = get(step.name).build()
            timing = benchmark(
                lambda fn=fn, a=a, b=b: fn(a, b), 3 if step.number in SLOW_STEPS else 10
            )
            row = _row(step.name, step, size, timing, cost, cublas.median_ms)
            if previous is not None:
                row["speedup_vs_prev"] = previous["median_ms"] / row["median_ms"]
                row["prev_step"] = previous["step"]
            rows.append(row)
            records.append(to_record(step.name, size, timing, flops, identity, versions, row))
            previous = row
    return rows, records


def _harness_timer(mode: str, max_time_s: float):

    return lambda fn, min_samples: benchmark(
        fn, mode=mode, min_samples=min_samples, max_time_s=max_time_s
    )


def _identity():

    return this_gpu("kernelab ladder"), software_versions()


def _row(name: str, step: Step | None, size: int, timing, cost, cublas_ms: float) -> dict:
    return {
        "step": name,
        "technique": step.technique if step else "cuBLAS fp32 (torch.mm, TF32 off)",
        "size": size,
        "median_ms": timing.median_ms,
        "gflops": cost.flops / (timing.median_ms * 1e-3) / 1e9,
        "bytes": cost.bytes,
        "pct_of_cublas": 100.0 * cublas_ms / timing.median_ms,
        "expected_speedup": step.expected_speedup if step else None,
        "speedup_vs_prev": None,
        "rel_noise": timing.rel_noise,
        "throttled": getattr(timing, "throttled", False),
    }


def to_record(name: str, size: int, timing, flops: float, identity, versions: dict, row: dict):
    """A kernelab Record of one ladder timing (the harness's Timing or a stand-in with
    median_ms, rel_noise, samples_ms, mode)."""

    summary = getattr(timing, "summary", None)
    stats = summary.to_dict() if summary is not None else {
        "median": timing.median_ms, "rel_noise": timing.rel_noise, "n": len(timing.samples_ms)
    }  # fmt: skip

    return Record(
        op="gemm",
        implementation=name,
        shape={"m": size, "n": size, "k": size},
        dtype="fp32",
        mode=timing.mode,
        samples_ms=list(timing.samples_ms),
        stats=stats,
        gpu=identity.name,
        gpu_id=identity.gpu_id,
        driver=identity.driver,
        versions=versions,
        clocks=dict(getattr(timing, "clocks", {})),
        flops=flops,
        bytes=row["bytes"],
        achieved_tflops=row["gflops"] / 1e3,
        warnings=list(getattr(timing, "warnings", [])),
        extra={
            "ladder": "sgemm",
            "pct_of_cublas": row["pct_of_cublas"],
            "speedup_vs_prev": row["speedup_vs_prev"],
            "expected_speedup": row["expected_speedup"],
            "technique": row["technique"],
        },
    )


def plot(rows: list[dict], path: str | Path) -> Path:
    """One panel per size: GFLOP/s per step as bars, cuBLAS fp32 as a dashed line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = sorted({r["size"] for r in rows})
    fig, axes = plt.subplots(1, len(sizes), figsize=(4.5 * len(sizes), 4.2), squeeze=False)
    for ax, size in zip(axes[0], sizes, strict=True):
        steps = [r for r in rows if r["size"] == size and r["step"] != "cuBLAS"]
        cublas = next((r for r in rows if r["size"] == size and r["step"] == "cuBLAS"), None)
        labels = [r["step"].removeprefix("sgemm:") for r in steps]
        ax.bar(labels, [r["gflops"] / 1e3 for r in steps], color="#4c72b0")
        if cublas is not None:
            ax.axhline(cublas["gflops"] / 1e3, color="#c44e52", linestyle="--", label="cuBLAS fp32")
            ax.legend(loc="upper left", fontsize=8)
        ax.set_title(f"SGEMM {size}^3")
        ax.set_xlabel("ladder step")
        ax.set_ylabel("TFLOP/s")
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


# --- tuning: pick a tunable step's tiles by timing its candidates ---------------------------


def _with_defines(step: Step, defines: dict, a, b):
    return sgemm(step, a, b, defines=defines)


def tune(step: Step, m: int, n: int, k: int, *, time_ms, candidates=None, check=None) -> dict:
    """Time every candidate of `step` at m x n x k and store the fastest for its shape class.

    `time_ms(fn) -> float` times a zero-argument callable (median, cold L2); `check(f)`,
    given f(a, b) -> a @ b with the candidate's tiles, may reject it (False) before timing. Returns
    {"winner": defines, "results": [{"defines", "ms", "gflops"} ...], "shape_class", "gpu"}.
    """
    import torch

    a = torch.randn(m, k, device="cuda")
    b = torch.randn(k, n, device="cuda")
    c = torch.empty(m, n, device="cuda")
    results = []
    for defines in candidates or step.candidates:

        def run(d=defines):
            return sgemm(step, a, b, out=c, defines=d)

        candidate = functools.partial(_with_defines, step, defines)
        if check is not None and not check(candidate):
            results.append({"defines": defines, "ms": None, "gflops": None, "rejected": True})
            continue
        ms = time_ms(run)
        results.append({"defines": defines, "ms": ms, "gflops": 2.0 * m * n * k / ms / 1e6})
    timed = [r for r in results if r["ms"] is not None]
    if not timed:
        raise KernelabError(f"no candidate of {step.name} passed the check")
    best = min(timed, key=lambda r: r["ms"])
    cls, gpu = store_winner(step, m, n, k, best["defines"], best["ms"])
    return {"winner": best["defines"], "results": results, "shape_class": cls, "gpu": gpu}


# A "large" and a "small" shape class on an H200 (tuning.shape_class): the square sizes the
# tile search (`kernelab ladder sgemm --tune`) times when no --sizes are given.
TUNE_SIZES = (4096, 1024)
# Shapes every candidate must get right before it is timed: the edges of every tile and
# rows that no 16-byte load aligns.
TUNE_CHECK_SHAPES = ((127, 257, 31), (300, 130, 70))


def prebuild(steps: list[Step], progress: Callable[[str], None] = lambda _: None) -> list[dict]:
    """Compile every step and every tile candidate of a tunable step into the kernel cache (no
    GPU needed): a machine without nvcc then finds each cubin there (KERNELAB_CACHE). A row
    per build: step, defines, registers, spill bytes (stores + loads), cached."""
    rows = []
    for step in steps:
        for defines in step.candidates or ({},):
            progress(f"compiling {step.name} {defines or ''}".rstrip())
            built = build_step(step, defines)
            report = built.report(step.kernel)
            rows.append({
                "step": step.name, "defines": dict(defines), "registers": report.registers,
                "spill_bytes": report.spill_store_bytes + report.spill_load_bytes,
                "cached": built.cached,
            })  # fmt: skip
    return rows


def tune_ladder(
    steps: list[Step],
    sizes=TUNE_SIZES,
    *,
    max_time_s: float = 1.5,
    progress: Callable[[str], None] = lambda _: None,
) -> dict:
    """The tile search: every candidate of each tunable step in `steps` at each square size,
    checked first at TUNE_CHECK_SHAPES (a wrong candidate is never timed), then timed cold
    (`max_time_s` each). Each winner goes to this GPU's tuning file (tuning.store_winner), used
    from then on. Returns the winners in the committed file's form (tuned_h200.json) with
    "runs": every candidate's result per step and size."""
    tunable = tunable_steps(steps)

    def check(candidate) -> bool:
        shapes = ({"m": m, "n": n, "k": k} for m, n, k in TUNE_CHECK_SHAPES)
        return all(check_implementation(candidate, "gemm", s, "fp32").ok for s in shapes)

    def time_ms(fn) -> float:
        return benchmark(fn, mode="cold", min_samples=10, max_time_s=max_time_s).median_ms

    winners: dict = {}
    runs: list[dict] = []
    gpu = None
    for step in tunable:
        for size in sizes:
            progress(f"tuning {step.name} at {size}^3: {len(step.candidates)} candidates")
            result = tune(step, size, size, size, time_ms=time_ms, check=check)
            gpu = result["gpu"]
            best = max(r["gflops"] or 0 for r in result["results"])
            progress(f"  winner ({result['shape_class']}): {result['winner']}")
            runs.append({"step": step.name, "size": size, **result})
            winners.setdefault(f"{step.number:02d}", {})[result["shape_class"]] = {
                "defines": result["winner"], "shape": [size, size, size], "gflops": best,
            }  # fmt: skip
    return {
        "gpu": gpu,
        "measured": True,
        "source": "kernelab ladder sgemm --tune",
        "winners": winners,
        "runs": runs,
    }


def tunable_steps(steps: list[Step]) -> list[Step]:
    """The steps of `steps` that have tile candidates; one KernelabError line when none has."""
    tunable = [s for s in steps if s.tunable]
    if not tunable:
        known = ", ".join(s.name for s in parse_steps(None) if s.tunable)
        raise KernelabError(f"none of {', '.join(s.name for s in steps)} has tile candidates "
                            f"to tune; the tunable steps are {known}")  # fmt: skip
    return tunable


# --- verification with the profiler (`kernelab ladder sgemm --profile`) ----------------------


def verify_ladder(
    steps: list[Step],
    size: int,
    *,
    report_path=None,
    progress: Callable[[str], None] = lambda _: None,
) -> tuple[dict, list]:
    """Profile every step (and the step before each, for the comparison) once at size^3 under
    ncu and check each step's claimed metric against the previous step. Needs a GPU and ncu.
    Returns (the verification as a dict, one record per profiled step)."""
    profiled = verify.with_predecessors(steps)
    run, profiles = verify.profile_steps(profiled, size, out_path=report_path, progress=progress)
    kernels = {k.name: k for k in run.kernels}
    return _verification(steps, profiles, size, run.report_path, kernels, live=True)


def verify_report(
    path,
    steps: list[Step],
    size: int,
    *,
    progress: Callable[[str], None] = lambda _: None,
) -> tuple[dict, list]:
    """The same verification read from a saved ncu report (.ncu-rep or CSV page, .xz too) of
    the ladder's kernels at size^3; no GPU needed (the SASS checks need nvcc and cuobjdump)."""

    kernels = load(path)
    present = {s.number for s in map(verify.step_for_kernel, (k.name for k in kernels)) if s}
    if not any(s.number in present for s in steps):
        chosen = ", ".join(s.kernel for s in steps)
        raise KernelabError(f"{path}: no kernel of the chosen steps ({chosen}) in the report")
    in_report = [s for s in steps if s.number in present]
    profiles = verify.profiles_from_kernels(kernels, verify.sass_for(in_report, size, progress))
    return _verification(steps, profiles, size, path, {k.name: k for k in kernels}, live=False)


def _verification(steps, profiles, size, report, kernels: dict, *, live: bool):
    verdicts = verify.verify(profiles, steps)
    device = next((k.device for k in kernels.values() if k.device), None)
    result = {
        "ladder": "sgemm",
        "size": size,
        "gpu": device,
        "report": str(report),
        "steps": [v.to_dict() for v in verdicts],
        "counts": verify.summary(verdicts),
        "all_passed": bool(verdicts) and all(v.verdict == "PASS" for v in verdicts),
    }
    records = [
        _verification_record(v, kernels.get(v.kernel), size, device, report, live)
        for v in verdicts
        if v.duration_ms
    ]
    return result, records


def _verification_record(verdict, kernel, size: int, device, report, live: bool):
    """One Record per verified step: the ncu kernel time as its one sample (mode "ncu": caches
    flushed before the launch, clocks unlocked), the checks in `extra`."""

    cost = get_op("gemm").cost({"m": size, "n": size, "k": size}, "fp32")
    sm_hz = kernel.metric(SM_CYCLES_PER_SECOND) if kernel is not None else None
    driver = None
    if live:
        driver = driver_version()
    return Record(
        op="gemm",
        implementation=verdict.step.name,
        shape={"m": size, "n": size, "k": size},
        dtype="fp32",
        mode="ncu",
        samples_ms=[verdict.duration_ms],
        stats=summarize([verdict.duration_ms]).to_dict(),
        gpu=device or "",
        gpu_id=catalog_id_for(device) if device else None,
        driver=driver,
        versions=software_versions() if live else {},
        clocks={"sm_mhz_ncu": sm_hz / 1e6} if sm_hz else {},
        flops=cost.flops,
        bytes=cost.bytes,
        achieved_tflops=cost.flops / (verdict.duration_ms * 1e-3) / 1e12,
        extra={"ladder": "sgemm", "verification": verdict.to_dict(), "ncu_report": str(report)},
    )
