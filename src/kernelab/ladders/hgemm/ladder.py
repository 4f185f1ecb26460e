"""Run the Hopper bf16 GEMM ladder: the compile report and each step's pipeline lens (no GPU
needed), then check every step, time every correct step beside cuBLAS bf16 in the same run
and turn the timings into rows and records; or profile every step once under Nsight Compute.

`kernelab ladder hgemm` (kernelab.commands.ladder_hgemm) and the lab's hgemm stage drive it:

    compile_report(steps, progress) -> [row]                  registers, smem, spills, SASS claims
    pipeline_lens(step, spec, *, blocks_per_sm, latencies)    Little's law at the step's tiles
    check_steps(steps, progress, shapes) -> {step: [check]}   hgemm.CHECK_SHAPES + timed sizes
    persistent_grids(steps, sizes, progress) -> {step: {size: blocks}}
    time_ladder(steps, sizes, modes, max_time_s, progress, bracket) -> (rows, records)
    time_rounds(steps, size, rounds, progress) -> [row]       interleaved rounds (--rounds)
    time_paired(steps, size, pairs, mode, progress) -> [row]  alternating pairs (--pairs)
    profile_steps(steps, size, progress) -> [per-step profile row]

Every "% of cuBLAS" compares two medians taken in the same process and the same timing mode
(cold: L2 flushed before each call; graph: back to back in a CUDA-graph replay; hot).
"""

from __future__ import annotations

import argparse
import math
import sys
import traceback
from collections.abc import Callable, Iterable, Sequence

from kernelab.environment import software_versions
from kernelab.errors import KernelabError, one_line_failures, unknown
from kernelab.harness.ceilings import this_gpu
from kernelab.harness.check import check_implementation
from kernelab.harness.paired import compare
from kernelab.harness.records import Record
from kernelab.harness.timing import MODES, benchmark
from kernelab.ladders.hgemm import (
    CHECK_SHAPES,
    STEPS,
    Step,
    build_step,
    get_step,
    persistent_launch,
    transposed_rows,
)
from kernelab.ladders.provider import select_steps
from kernelab.lenses.occupancy import occupancy
from kernelab.lenses.pipeline import bandwidth_from_in_flight, memory_pipeline, tensor_core_pipeline
from kernelab.profiling import runner
from kernelab.profiling.runner import PROFILE_RANGE
from kernelab.profiling.session import default_report_path, run_command
from kernelab.profiling.summary import summarize
from kernelab.roofline.costs import dtype_bytes
from kernelab.runtime.cuda.sass import find_tool, has, opcode_counts
from kernelab.spec.reference import get_op
from kernelab.spec.registry import get

CUBLAS = "torch.mm"
CUBLAS_AGAIN = "torch.mm (again)"  # cuBLAS timed once more after the steps: the run's drift
TRANSPOSE = "hgemm:transpose_b"  # the B -> B^T copy the launcher makes for steps 02-03, alone
DTYPE = "bf16"
DEFAULT_MODES = ("cold", "graph")
# Other languages' GEMMs timed as columns beside the steps when they can run here (the same
# algorithm in CuTe-DSL; Triton's tuned matmul): each is checked against the float64
# reference first; one that cannot build or fails is left out with one progress line.
OTHER_COLUMNS = ("cute.gemm", "triton.matmul")
PROFILE_WARMUP = 1  # one unprofiled call first: nvcc cache load, module load, cluster probe

Progress = Callable[[str], None]


def _quiet(_: str) -> None:
    pass


# --- choosing steps and modes ----------------------------------------------------------------


def parse_steps(spec: str | None) -> list[Step]:
    """None, "" or "all" -> every step; else "06", "3,4,hgemm:05" or "5-9", in ladder order."""

    return select_steps(spec, STEPS, get_step)


def parse_modes(given: Iterable[str] | str | None) -> list[str]:
    """Timing modes from a repeated option and/or comma lists; default cold and graph."""

    parts = [given] if isinstance(given, str) else list(given or ())
    modes: list[str] = []
    for part in (p.strip().lower() for text in parts for p in text.split(",")):
        if not part:
            continue
        if part not in MODES:
            raise unknown("timing mode", part, MODES)
        if part not in modes:
            modes.append(part)
    return modes or list(DEFAULT_MODES)


# --- without a GPU: what the compiler made and what the pipeline needs ----------------------


def compile_report(steps: Sequence[Step], progress: Progress = _quiet) -> list[dict]:
    """ptxas's registers, shared memory and spills of each step, and whether its SASS holds
    the instructions the step claims (needs cuobjdump: the Triton wheel carries one)."""

    can_read_sass = find_tool("cuobjdump") is not None
    rows = []
    for step in steps:
        progress(f"compiling {step.name} ({step.file})")
        built = build_step(step)
        report = built.report(step.kernel)
        counts = opcode_counts(built.cubin, step.kernel) if can_read_sass else {}
        launch = step.launch(4096, 4096, 4096)
        rows.append(
            {
                "step": step.name,
                "technique": step.technique,
                "arch": built.arch,
                "registers": report.registers,
                "threads": math.prod(launch.block),
                "static_smem_bytes": report.shared_bytes,
                "dynamic_smem_bytes": launch.shared_bytes,
                "spills": report.spills,
                "spill_store_bytes": report.spill_store_bytes,
                "spill_load_bytes": report.spill_load_bytes,
                "sass_claims": {c: has(counts, c) for c in step.sass_claims} if counts else {},
                "cubin": str(built.cubin),
                "cached": built.cached,
            }
        )
    return rows


def resident_blocks(compiled: dict, spec) -> int | None:
    """Blocks per SM the occupancy lens allows for one compile-report row (None if the launch
    does not fit or the GPU is not one the lens models)."""

    try:
        return occupancy(
            spec,
            threads_per_block=compiled["threads"],
            registers_per_thread=max(compiled["registers"], 1),
            smem_per_block_bytes=compiled["static_smem_bytes"],
            dynamic_smem_bytes=compiled["dynamic_smem_bytes"],
        ).blocks_per_sm
    except KernelabError:
        return None


def pipeline_lens(
    step: Step,
    spec,
    *,
    blocks_per_sm: int | None = None,
    latencies: dict[str, float] | None = None,
) -> dict:
    """The pipeline lens at one step's block tile, on `spec` (a GPUSpec).

    Memory side (Little's law): the bytes every SM must keep in flight to stream HBM at the
    datasheet rate across the HBM latency, against what the step keeps (its metadata's
    bytes in flight per block x resident blocks), and the share of the bandwidth that keeps.
    Tensor-core side: one stage of the block tile is 2*BM*BN*BK FLOPs; at the SM's MMA rate
    (shared by its resident blocks) it lasts compute_ns, so ceil(latency / compute_ns) + 1
    stages cover an HBM (or L2) load; and the bytes per stage over that time, on every SM,
    are the load rate the tiles demand at full MMA speed (less from L2 where the step
    multicasts part of each stage inside a cluster).

    blocks_per_sm: the step's metadata, else this argument, else 1 (the source is said).
    latencies: {"hbm": ns, "l2": ns} overrides; default the lens's measured or sourced ones.
    """
    pipe = step.pipeline
    missing = [k for k in ("stages", "bytes_in_flight_per_block") if k not in pipe]
    missing += [] if len(step.tiles.get("block", ())) == 3 else ["tiles.block [BM, BN, BK]"]
    if missing:
        raise KernelabError(f"{step.name}: no pipeline lens without {', '.join(missing)}")
    bm, bn, bk = step.tiles["block"]
    if "blocks_per_sm" in pipe:
        blocks, source = int(pipe["blocks_per_sm"]), "step metadata"
    elif blocks_per_sm is not None:
        blocks, source = int(blocks_per_sm), "occupancy of the compiled kernel"
    else:
        blocks, source = 1, "assumed (no metadata, no compile report)"
    hbm = memory_pipeline(spec, latencies=latencies)
    per_sm = pipe["bytes_in_flight_per_block"] * blocks
    kept_gbps = min(
        bandwidth_from_in_flight(spec, per_sm, hbm.latency.ns) / 1e9, hbm.bandwidth_gbps
    )
    tiles = dict(dtype=DTYPE, latencies=latencies, bm=bm, bn=bn, bk=bk, blocks_per_sm=blocks)
    from_hbm = tensor_core_pipeline(spec, level="hbm", **tiles)
    from_l2 = tensor_core_pipeline(spec, level="l2", **tiles)
    stage_bytes = from_hbm.bytes_per_stage
    l2_share = l2_bytes_per_stage(step) / stage_bytes
    lens = {
        "step": step.name,
        "gpu": spec.id,
        "block_tile": [bm, bn, bk],
        "stages": pipe["stages"],
        "blocks_per_sm": blocks,
        "blocks_per_sm_source": source,
        "bytes_per_stage": stage_bytes,
        "bytes_in_flight_per_sm": per_sm,
        "hbm_latency_ns": hbm.latency.ns,
        "l2_latency_ns": from_l2.latency.ns,
        "latency_source": hbm.latency.source,
        "hbm_in_flight_needed_per_sm": hbm.in_flight_per_sm_bytes,
        "in_flight_over_needed": per_sm / hbm.in_flight_per_sm_bytes,
        "hbm_bandwidth_kept_pct": 100.0 * kept_gbps / hbm.bandwidth_gbps,
        "stage_compute_ns": from_hbm.compute_ns_per_stage,
        "stages_needed_hbm": from_hbm.stages_needed,
        "stages_needed_l2": from_l2.stages_needed,
        "covers_hbm_latency": pipe["stages"] >= from_hbm.stages_needed,
        "load_tbps_demanded": from_hbm.load_tbps_demanded,
        "l2_load_tbps_demanded": from_hbm.load_tbps_demanded * l2_share,
    }
    lens["summary"] = _lens_sentence(lens)
    return lens


def l2_bytes_per_stage(step: Step) -> float:
    """Bytes one SM fetches from L2 per K-tile: the step's metadata when it states them; else
    its A tile plus its share of the B tile, which a cluster step multicasts: each of the
    cluster's CTAs loads 1/cluster of B and TMA delivers it to all of them."""
    if "l2_bytes_per_k_tile_per_sm" in step.pipeline:
        return float(step.pipeline["l2_bytes_per_k_tile_per_sm"])

    bm, bn, bk = step.tiles["block"]
    return (bm * bk + bk * bn / step.cluster) * dtype_bytes(DTYPE)


def _lens_sentence(lens: dict) -> str:
    bm, bn, bk = lens["block_tile"]
    cover = "covers" if lens["covers_hbm_latency"] else "does NOT cover"
    return (
        f"{lens['step']}: {lens['blocks_per_sm']} block(s)/SM keep "
        f"{lens['bytes_in_flight_per_sm'] / 1024:.0f} KiB in flight per SM, "
        f"{lens['in_flight_over_needed']:.1f}x the "
        f"{lens['hbm_in_flight_needed_per_sm'] / 1024:.1f} KiB Little's law needs "
        f"({lens['hbm_bandwidth_kept_pct']:.0f} % of HBM bandwidth); a {bm}x{bn}x{bk} stage "
        f"lasts {lens['stage_compute_ns']:.0f} ns at the MMA rate, so "
        f"{lens['stages_needed_hbm']} stages hide HBM and {lens['stages_needed_l2']} hide L2: "
        f"its {lens['stages']} {cover} HBM; at full MMA speed the tiles load "
        f"{lens['load_tbps_demanded']:.1f} TB/s ({lens['l2_load_tbps_demanded']:.1f} TB/s "
        "from L2)"
    )


def ladder_lenses(steps: Sequence[Step], spec, compiled: Sequence[dict] = ()) -> dict:
    """{step name: pipeline_lens} with resident blocks taken from the compile report where the
    step's metadata does not state them; {"step", "error"} for a step the lens cannot read."""
    by_step = {row["step"]: row for row in compiled}
    lenses = {}
    for step in steps:
        row = by_step.get(step.name)
        blocks = resident_blocks(row, spec) if row else None
        try:
            lenses[step.name] = pipeline_lens(step, spec, blocks_per_sm=blocks)
        except KernelabError as exc:
            lenses[step.name] = {"step": step.name, "error": str(exc)}
    return lenses


# --- on the GPU: correctness, grids, timing --------------------------------------------------


def check_shapes(sizes: Iterable[int] = ()) -> list[dict]:
    """hgemm.CHECK_SHAPES (the awkward ones) and every timed square size not among them."""
    shapes = [{"m": m, "n": n, "k": k} for m, n, k in CHECK_SHAPES]
    for size in sizes:
        square = {"m": size, "n": size, "k": size}
        if square not in shapes:
            shapes.append(square)
    return shapes


def check_steps(
    steps: Sequence[Step], progress: Progress = _quiet, shapes: Sequence[dict] | None = None
) -> dict[str, list[dict]]:
    """kernelab.harness.check at every shape (default check_shapes()), bf16, for every step.
    A launch error or fault is recorded as a failed check and the next step still runs."""

    shapes = list(shapes) if shapes is not None else check_shapes()
    checks: dict[str, list[dict]] = {}
    for step in steps:
        fn = get(step.name).build()
        results = []
        for shape in shapes:
            progress(f"checking {step.name} at {shape['m']}x{shape['n']}x{shape['k']}")
            try:
                report = check_implementation(fn, "gemm", shape, DTYPE, trials=2)
                results.append({"shape": shape, **report.to_dict()})
            except Exception as exc:  # a launch error or fault: record it, keep going
                results.append({"shape": shape, "ok": False, "message": f"{exc!r}"[:300]})
                progress(traceback.format_exc(limit=3))
                _say_if_context_broken(progress)
        checks[step.name] = results
        bad = [r["shape"] for r in results if not r["ok"]]
        progress(f"{step.name}: " + ("correct at every shape" if not bad else f"WRONG at {bad}"))
    return checks


def correct_steps(steps: Sequence[Step], checks: dict[str, list[dict]]) -> list[Step]:
    return [s for s in steps if checks.get(s.name) and all(r["ok"] for r in checks[s.name])]


def _say_if_context_broken(progress: Progress) -> None:
    """After an illegal-address fault the CUDA context is unusable; say so plainly."""
    import torch

    try:
        torch.cuda.synchronize()
    except Exception as exc:
        progress(f"the CUDA context is broken ({exc!r:.120}); later results are unreliable")


def persistent_grids(
    steps: Sequence[Step], sizes: Sequence[int], progress: Progress = _quiet
) -> dict[str, dict[int, int]]:
    """Blocks launched by each persistent step at each size: the SM count, or for a cluster
    step cluster size x the clusters the driver says fit at once (idle SMs show here)."""
    import torch

    grids = {}
    for step in (s for s in steps if s.persistent):
        built = build_step(step)
        device = torch.device("cuda")
        grids[step.name] = {
            size: persistent_launch(step, built, size, size, size, device).grid[0] for size in sizes
        }
        progress(f"{step.name}: grid {grids[step.name]} (cluster {step.cluster})")
    return grids


def time_ladder(
    steps: Sequence[Step],
    sizes: Sequence[int],
    modes: Sequence[str] = DEFAULT_MODES,
    max_time_s: float = 1.0,
    progress: Progress = _quiet,
    *,
    bracket: bool = False,
    other_columns: Sequence[str] = OTHER_COLUMNS,
) -> tuple[list[dict], list]:
    """Time cuBLAS bf16 (torch.mm), every step, the `other_columns` that can run here (the
    CuTe-DSL GEMM, ...) and, when a step transposes B (02-03), that
    transpose alone, at every square size in every mode, in this one process. With
    `bracket`, cuBLAS is timed again after the steps (row CUBLAS_AGAIN, its % against the
    first): the card heats and its power cap lowers the clocks as a run goes on, so a step
    should beat both cuBLAS timings around it, not only the first.

    A row: impl, size, mode (the harness's: "batch" when graph capture failed), median_ms,
    tflops (None for the transpose, which has gbps), pct_of_cublas (same size and mode),
    rel_noise, throttled. Returns (rows, records)."""
    import torch

    identity, versions = this_gpu("the hgemm ladder"), software_versions()
    candidates = [(CUBLAS, get(CUBLAS).build())] + [(s.name, get(s.name).build()) for s in steps]
    candidates += other_candidates(other_columns, progress)
    if any(s.b_layout == "nk" for s in steps):
        candidates.append((TRANSPOSE, lambda a, b: transposed_rows(b)))
    if bracket:
        candidates.append((CUBLAS_AGAIN, candidates[0][1]))
    rows, records = [], []
    for size in sizes:
        a = torch.randn(size, size, device="cuda").to(torch.bfloat16)
        b = torch.randn(size, size, device="cuda").to(torch.bfloat16)
        cost = get_op("gemm").cost({"m": size, "n": size, "k": size}, DTYPE)
        for mode in modes:
            cublas_ms = None
            for name, fn in candidates:
                progress(f"timing {name} at {size}^3, {mode}")
                timing = benchmark(
                    lambda fn=fn, a=a, b=b: fn(a, b), mode=mode, min_samples=10,
                    max_time_s=max_time_s,
                )  # fmt: skip
                cublas_ms = timing.median_ms if name == CUBLAS else cublas_ms
                row = _row(name, size, timing, cost.flops, cublas_ms)
                rows.append(row)
                records.append(to_record(name, size, timing, cost, identity, versions, row))
    return rows, records


def other_candidates(names: Sequence[str], progress: Progress = _quiet) -> list[tuple]:
    """(name, callable) for each implementation in `names` that builds here and passes its
    check at the ladder's check shapes; the others are named in one progress line each."""
    kept = []
    for name in names:
        try:
            fn = get(name).build()
        except KernelabError as exc:
            progress(f"{name}: not timed: {exc}")
            continue
        failed = []
        for m, n, k in CHECK_SHAPES:
            report = check_implementation(fn, "gemm", {"m": m, "n": n, "k": k}, DTYPE, trials=1)
            if not report.ok:
                failed.append(report.message)
        if failed:
            progress(f"{name}: not timed: failed its check: {failed[0]}")
            continue
        kept.append((name, fn))
    return kept


def _operands_and_cublas(size: int):
    """Fresh random bf16 operands of a size^3 GEMM on the GPU and cuBLAS's launcher."""
    import torch

    a = torch.randn(size, size, device="cuda").to(torch.bfloat16)
    b = torch.randn(size, size, device="cuda").to(torch.bfloat16)
    return a, b, get(CUBLAS).build()


def time_rounds(
    steps: Sequence[Step],
    size: int,
    rounds: int,
    mode: str = "cold",
    max_time_s: float = 0.3,
    progress: Progress = _quiet,
) -> list[dict]:
    """Steps against cuBLAS in interleaved rounds, for differences smaller than the card's
    drift: each round times cuBLAS, every step, then cuBLAS again, and rates each step
    against the faster of the two cuBLAS timings around it. A row per step: the median,
    lowest and highest of its per-round % of cuBLAS, and how many rounds it was ahead."""
    if rounds < 1:
        raise KernelabError(f"rounds must be at least 1, got {rounds}")

    a, b, cublas = _operands_and_cublas(size)
    built = [(s.name, get(s.name).build()) for s in steps]

    def median_ms(fn) -> Callable[[], float]:
        return lambda: (
            benchmark(lambda: fn(a, b), mode=mode, min_samples=10, max_time_s=max_time_s).median_ms
        )

    steps_ms = {name: median_ms(fn) for name, fn in built}
    return [
        _rounds_row(name, size, mode, values)
        for name, values in interleave(median_ms(cublas), steps_ms, rounds, progress).items()
    ]


def interleave(
    cublas_ms: Callable[[], float],
    steps_ms: dict[str, Callable[[], float]],
    rounds: int,
    progress: Progress = _quiet,
) -> dict[str, list[float]]:
    """Per step, its % of cuBLAS in each round: cuBLAS, every step, cuBLAS again, each step
    against the faster of the two cuBLAS timings around it (the callables return medians)."""
    pct: dict[str, list[float]] = {name: [] for name in steps_ms}
    for round_index in range(rounds):
        progress(f"round {round_index + 1}/{rounds}")
        before = cublas_ms()
        times = {name: time_it() for name, time_it in steps_ms.items()}
        faster = min(before, cublas_ms())
        for name, ms in times.items():
            pct[name].append(100.0 * faster / ms)
    return pct


def time_paired(
    steps: Sequence[Step],
    size: int,
    pairs: int,
    mode: str = "cold",
    max_time_s: float = 5.0,
    progress: Progress = _quiet,
) -> list[dict]:
    """Each step against cuBLAS call by call (kernelab.harness.paired): pairs of one cuBLAS
    call and one step call, alternating which goes first, each rated by reference time /
    step time. A row per step: the median pair as % of cuBLAS, its 95 % interval, the
    20-80 % band of single pairs, how many pairs the step won, and both medians in ms."""

    a, b, cublas = _operands_and_cublas(size)
    rows = []
    for step in steps:
        progress(f"pairing {step.name} with cuBLAS at {size}^3, {mode}")
        fn = get(step.name).build()
        result = compare(lambda: cublas(a, b), lambda fn=fn: fn(a, b), mode=mode, pairs=pairs,
                         max_time_s=max_time_s)  # fmt: skip
        rows.append(_paired_row(step.name, size, result.to_dict()))
    return rows


def _paired_row(name: str, size: int, paired: dict) -> dict:
    return {
        "impl": name, "size": size, "mode": paired["mode"], "pairs": paired["pairs"],
        "pct_median": paired["pct_of_reference"], "pct_ci95": paired["pct_ci95"],
        "pct_p20": paired["pct_p20"], "pct_p80": paired["pct_p80"],
        "pairs_ahead": paired["pairs_ahead"],
        "cublas_median_ms": paired["reference"]["median"],
        "step_median_ms": paired["candidate"]["median"],
        "throttled": paired["throttled"], "clocks": paired["clocks"],
        "reference_ms": paired["reference_ms"], "candidate_ms": paired["candidate_ms"],
    }  # fmt: skip


def format_paired(rows: Sequence[dict]) -> str:
    """The paired timings as a plain table: the median pair's % of cuBLAS and its interval."""
    lines = [
        f"{'step':<10}{'mode':>6}{'size':>7}{'median %':>10}{'95% CI':>16}{'p20-p80':>16}"
        f"{'ahead':>12}"
    ]
    for r in rows:
        low, high = r["pct_ci95"]
        lines.append(
            f"{r['impl']:<10}{r['mode']:>6}{r['size']:>7}{r['pct_median']:>10.1f}"
            f"{low:>8.1f}-{high:<7.1f}"
            f"{r['pct_p20']:>8.1f}-{r['pct_p80']:<7.1f}{r['pairs_ahead']:>6}/{r['pairs']}"
        )
    return "\n".join(lines)


def _rounds_row(name: str, size: int, mode: str, pct: list[float]) -> dict:
    import statistics

    return {
        "impl": name, "size": size, "mode": mode, "rounds": len(pct),
        "pct_median": statistics.median(pct), "pct_min": min(pct), "pct_max": max(pct),
        "rounds_ahead": sum(p >= 100.0 for p in pct), "pct_per_round": pct,
    }  # fmt: skip


def format_rounds(rows: Sequence[dict]) -> str:
    """The interleaved rounds as a plain table: % of the faster neighbouring cuBLAS timing."""
    lines = [f"{'step':<10}{'size':>7}{'median %':>10}{'min %':>8}{'max %':>8}{'ahead':>8}"]
    for r in rows:
        lines.append(
            f"{r['impl']:<10}{r['size']:>7}{r['pct_median']:>10.1f}{r['pct_min']:>8.1f}"
            f"{r['pct_max']:>8.1f}{r['rounds_ahead']:>5}/{r['rounds']}"
        )
    return "\n".join(lines)


def _row(name: str, size: int, timing, flops: float, cublas_ms: float) -> dict:
    row = {
        "impl": name,
        "size": size,
        "mode": timing.mode,
        "median_ms": timing.median_ms,
        "tflops": flops / (timing.median_ms * 1e-3) / 1e12,
        "pct_of_cublas": 100.0 * cublas_ms / timing.median_ms,
        "rel_noise": timing.rel_noise,
        "throttled": timing.throttled,
    }
    if name == TRANSPOSE:  # not a GEMM: one read and one write of K x N bf16
        row["tflops"], row["gbps"] = None, 4 * size * size / (timing.median_ms * 1e6)
    return row


def to_record(name: str, size: int, timing, cost, identity, versions: dict, row: dict):
    """One kernelab Record of one ladder timing (the harness's Timing)."""

    is_gemm = name != TRANSPOSE
    return Record(
        op="gemm" if is_gemm else "transpose",
        implementation=name,
        shape={"m": size, "n": size, "k": size},
        dtype=DTYPE,
        mode=timing.mode,
        samples_ms=list(timing.samples_ms),
        stats=timing.summary.to_dict(),
        gpu=identity.name,
        gpu_id=identity.gpu_id,
        driver=identity.driver,
        versions=versions,
        clocks=dict(timing.clocks),
        flops=cost.flops if is_gemm else 0.0,
        bytes=cost.bytes if is_gemm else 4.0 * size * size,
        achieved_tflops=row["tflops"],
        warnings=list(timing.warnings),
        extra={"ladder": "hgemm", "pct_of_cublas": row["pct_of_cublas"]},
    )


def same_mode(row: dict, mode: str) -> bool:
    """A graph-mode request whose capture failed comes back as "batch"."""
    return row["mode"] == mode or (mode == "graph" and row["mode"] == "batch")


def format_table(rows: Sequence[dict], sizes: Sequence[int], modes: Sequence[str]) -> str:
    """Plain-text TFLOP/s (% of cuBLAS) per implementation and size, one block per mode."""
    names = list(dict.fromkeys(r["impl"] for r in rows))
    lines = []
    for mode in modes:
        lines.append(f"\nbf16 GEMM ladder, {mode} mode: TFLOP/s (% of cuBLAS in the same mode)")
        lines.append(f"{'':<20}" + "".join(f"{s:>22}" for s in sizes))
        for name in names:
            cells = []
            for size in sizes:
                r = next(
                    (r for r in rows if (r["impl"], r["size"]) == (name, size) and same_mode(r, mode)),
                    None,
                )  # fmt: skip
                if r is None:
                    cells.append(f"{'-':>22}")
                elif r["tflops"] is None:
                    cells.append(f"{r['median_ms'] * 1e3:>9.1f} us {r['gbps']:>6.0f} GB/s")
                else:
                    cells.append(f"{r['tflops']:>12.1f} ({r['pct_of_cublas']:5.1f}%)")
            lines.append(f"{name:<20}" + "".join(cells))
    return "\n".join(lines)


# --- under Nsight Compute -----------------------------------------------------------------


def profile_steps(
    steps: Sequence[Step],
    size: int,
    progress: Progress = _quiet,
    *,
    out_path=None,
    timeout_s: float | None = 900.0,
) -> list[dict]:
    """Profile one launch of every step at size^3 in one ncu run (through
    kernelab.profiling.session) and return one row per step: see profile_rows."""

    if size <= 0:
        raise KernelabError(f"the profile size must be positive, got {size}")
    steps = list(steps)
    for step in steps:  # compile here: nvcc must not run under ncu, which follows children
        progress(f"building {step.name}")
        build_step(step)
    progress(f"profiling {len(steps)} step(s) at {size}^3 under ncu (one launch each)")
    run = run_command(
        launcher_command(steps, size),
        nvtx_range=PROFILE_RANGE + "/",
        launch_count=None,  # every kernel inside the ranges: a step's, and 02-03's transpose
        out_path=out_path or default_report_path(f"hgemm_ladder_{size}"),
        timeout_s=timeout_s,
    )
    rows = profile_rows(steps, run.kernels, size)
    for row in rows:
        row["report"] = str(run.report_path)
    return rows


def profile_rows(steps: Sequence[Step], kernels: Sequence, size: int) -> list[dict]:
    """Per step, from its kernel in an ncu report (matched by the kernel's name): ncu's kernel
    time and TFLOP/s, tensor pipe active %, wgmma issue %, the top stall, the diagnosed
    bottleneck, DRAM rate and L2 hit rate, the speedup over the previous profiled step, and
    beside them what the step claims (its expected speedup and its proof)."""

    cost = get_op("gemm").cost({"m": size, "n": size, "k": size}, DTYPE)
    rows, previous_ms = [], None
    for step in steps:
        kernel = next((k for k in kernels if _kernel_name(k) == step.kernel), None)
        row = {
            "step": step.name,
            "technique": step.technique,
            "kernel": step.kernel,
            "size": size,
            "expected_speedup": step.expected_speedup,
            "claimed_evidence": step.proof,
            "found": kernel is not None,
        }
        if kernel is None:
            rows.append(row)
            continue
        s = summarize(kernel, dtype=DTYPE, predicted=cost)
        ms = s.duration_ns / 1e6 if s.duration_ns else None
        top = s.stalls[0] if s.stalls else None
        row.update(
            duration_ms=ms,
            tflops=cost.flops / (ms * 1e-3) / 1e12 if ms else None,
            speedup_vs_prev=previous_ms / ms if previous_ms and ms else None,
            tensor_pct=s.tensor_pct,
            wgmma_pct=s.wgmma_pct,
            wgmma_instructions=s.wgmma_instructions,
            top_stall=top.reason if top else None,
            top_stall_meaning=top.meaning if top else None,
            top_stall_cycles_per_issue=top.cycles_per_issue if top else None,
            stalls=[st.to_dict() for st in s.stalls],
            bottleneck=s.diagnosis.bottleneck,
            unit=s.diagnosis.unit,
            dram_gbps=s.dram_gbps,
            l2_hit_pct=s.l2_hit_pct,
            registers=s.registers_per_thread,
            grid=list(s.grid) if s.grid else None,
            device=s.device,
        )
        previous_ms = ms or previous_ms
        rows.append(row)
    return rows


def _kernel_name(kernel) -> str:
    """An extern "C" kernel's plain name, whether or not ncu showed a parameter list."""
    return (kernel.name or kernel.demangled_name or "").split("(")[0].strip()


def launcher_command(steps: Sequence[Step], size: int) -> list[str]:
    """The program ncu runs: each step once more (after a warm-up) inside the NVTX range."""
    return [
        sys.executable,
        "-m",
        "kernelab.ladders.hgemm.ladder",
        "--size",
        str(size),
        "--steps",
        ",".join(f"{s.number:02d}" for s in steps),
    ]


def launch_steps(steps: Sequence[Step], size: int, warmup: int = PROFILE_WARMUP) -> None:
    shape = {"m": size, "n": size, "k": size}
    for step in steps:
        runner.run(step.name, shape, DTYPE, warmup=warmup, range_name=PROFILE_RANGE)


@one_line_failures
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kernelab.ladders.hgemm.ladder")
    parser.add_argument("--size", type=int, required=True)
    parser.add_argument("--steps", default=None, help='e.g. "06" or "5-9" (default: all)')
    parser.add_argument("--warmup", type=int, default=PROFILE_WARMUP)
    args = parser.parse_args(argv)
    if args.size <= 0:
        raise KernelabError(f"--size must be positive, got {args.size}")
    launch_steps(parse_steps(args.steps), args.size, args.warmup)
    return 0


if __name__ == "__main__":
    sys.exit(main())
