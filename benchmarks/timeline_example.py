"""The inference example on the GPU: decode at batch 1, prefill at a large batch, and decode
captured in a CUDA graph, each as a timeline; Nsight Compute's diagnosis of prefill's top
kernel; and the host wall-clock time per step of each, measured without the profiler.

    PATH=/usr/local/cuda/bin:$PATH PYTHONPATH=src python3 benchmarks/timeline_example.py --out "$OUT"

Writes timeline_example.json (the three summaries: top kernels, classes, busy time and gaps,
verdict, roofline placements; the drill; the wall-clock times; versions) and
timeline_example.md (the findings in a few lines) under --out (default: $OUT, else
benchmarks/results/<card>/timeline, where the report reads it, for the card the traces name).
The traces themselves are not kept: a few MB each.

It also checks what the example is meant to show and exits 1 when the GPU disagrees:
decode's GEMMs memory-bound, prefill's compute-bound, the CUDA graph busier than eager
decode and faster per step, and prefill's top kernel diagnosed compute-bound.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from kernelab.output import note, to_jsonable

MODES = ("decode", "prefill", "decode-graph")


def _default_out(timelines: dict) -> Path:
    """$OUT, else the timeline/ folder of the card the traces were recorded on: read from the
    traces, so that this process does not initialise CUDA before the drill."""
    from kernelab.hardware.detect import match_catalog
    from kernelab.harness.cache import safe_name
    from kernelab.harness.records import default_results_dir

    summaries = [t.summary for t in timelines.values()]
    key = next((s.gpu_id for s in summaries if s.gpu_id), None)
    name = next((s.device for s in summaries if s.device), None)
    if key is None and name:
        spec = match_catalog(name)
        key = spec.id if spec else safe_name(name)
    return default_results_dir(key, "timeline")


def _workload(mode: str) -> list[str]:
    return ["python", "-m", "kernelab.timeline.example", "--mode", mode, "--iterations", "1000"]


def _wall_clock(steps: int) -> dict:
    """Host wall-clock ms per step of each mode, in this process, without the profiler."""
    from kernelab.timeline.example import make_workload, wall_ms_per_step

    times = {}
    for mode in MODES:
        step, config = make_workload(mode)
        for _ in range(3):
            step()
        times[mode] = {"ms_per_step": wall_ms_per_step(step, steps=steps), "config": config}
        del step
    return times


def _gemm_bounds(summary) -> set[str]:
    return {p.placement["bound"] for p in summary.placements if p.cost_op == "gemm"}


def _findings(timelines: dict, wall: dict, drill) -> tuple[list[str], list[str]]:
    """(lines for the report, failed expectations)."""
    lines, misses = [], []
    for mode, timeline in timelines.items():
        s = timeline.summary
        busy = s.busy
        classes = ", ".join(
            f"{c} {v['share_pct']:.0f} %"
            for c, v in sorted(s.classes.items(), key=lambda kv: -kv[1]["time_us"])
        )
        lines.append(
            f"- {mode}: {wall[mode]['ms_per_step']:.3f} ms per step (wall clock, no profiler); "
            f"under the profiler busy {busy.busy_pct:.1f} %, {busy.gap_count} gaps > 2 us "
            f"(largest {busy.gap_largest_us:.1f} us), median kernel {busy.median_us:.1f} us; "
            f"verdict {s.verdict.kind}; GPU time by class: {classes}"
        )
        for p in s.placements[:3]:
            placed = p.placement
            lines.append(
                f"  - {p.op} {p.cost_op} {p.shape}: {p.gpu_us_per_call:.1f} us per call, "
                f"{placed['bound']}-bound, {placed['sol_pct']:.0f} % of speed of light "
                f"({placed['achieved_tflops']:.1f} TFLOP/s, {placed['achieved_gbps']:.0f} GB/s)"
            )
    speedup = wall["decode"]["ms_per_step"] / wall["decode-graph"]["ms_per_step"]
    lines.append(f"- CUDA graph at batch 1: {speedup:.2f}x faster per decode step than eager")

    decode, prefill, graph = (timelines[m].summary for m in MODES)
    if _gemm_bounds(decode) != {"memory"}:
        misses.append(f"decode GEMMs should all be memory-bound, got {_gemm_bounds(decode)}")
    if _gemm_bounds(prefill) != {"compute"}:
        misses.append(f"prefill GEMMs should all be compute-bound, got {_gemm_bounds(prefill)}")
    if not graph.busy.busy_pct > decode.busy.busy_pct:
        misses.append("the CUDA graph should keep the GPU busier than eager decode")
    if not speedup > 1.0:
        misses.append(f"the CUDA graph should be faster per step than eager ({speedup:.2f}x)")
    for result in drill:
        if result.error:
            misses.append(f"drill failed: {result.error}")
            continue
        diagnosis = result.summary["diagnosis"]
        lines.append(
            f"- drill (prefill top kernel {result.kernel[:60]}): {diagnosis['bottleneck']}"
            f"/{diagnosis['unit']}: {diagnosis['summary']}"
        )
        if diagnosis["bottleneck"] != "compute":
            misses.append(f"prefill's top kernel diagnosed {diagnosis['bottleneck']}, not compute")
    return lines, misses


def _write(args, timelines: dict, wall: dict, drilled: list) -> tuple[list[str], list[str]]:
    """Write timeline_example.json and .md under --out; (report lines, failed expectations)."""
    from kernelab.environment import software_versions

    lines, misses = _findings(timelines, wall, drilled)
    record = {
        "versions": software_versions(),
        "steps": args.steps,
        "warmup": args.warmup,
        "wall_clock": wall,
        "timelines": {mode: t.to_dict() for mode, t in timelines.items()},
        "drill": [d.to_dict() for d in drilled],
        "findings": lines,
        "misses": misses,
    }
    (args.out / "timeline_example.json").write_text(
        json.dumps(to_jsonable(record), indent=1) + "\n"
    )
    report = ["# The inference example on this GPU", "", *lines, ""]
    report += [f"MISS: {m}" for m in misses] or ["every expectation held"]
    (args.out / "timeline_example.md").write_text("\n".join(report) + "\n")
    return report, misses


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None,
                        help="folder for the files (default $OUT, else "
                        "benchmarks/results/<card>/timeline in a source checkout, else "
                        "./kernelab-results/<gpu>/timeline)")  # fmt: skip
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--drill", type=int, default=1)
    args = parser.parse_args()

    from kernelab.timeline.capture import profile_script
    from kernelab.timeline.drill import drill

    work = Path(tempfile.mkdtemp(prefix="kernelab-timeline-"))
    timelines = {}
    for mode in MODES:
        timelines[mode] = profile_script(
            _workload(mode), out_dir=work / mode, warmup=args.warmup, steps=args.steps
        )
        note(f"{mode}: {timelines[mode].summary.verdict.kind}")
    args.out = args.out or _default_out(timelines)
    args.out.mkdir(parents=True, exist_ok=True)
    # The timelines are saved before the drill: a drill that kills this process (it did once
    # on the H200) must not take them with it. CUDA is first initialised in this process
    # after the drill (the wall clock), as it was when the drill last passed its test.
    (args.out / "timeline_example.partial.json").write_text(
        json.dumps(to_jsonable({m: t.to_dict() for m, t in timelines.items()}), indent=1)
    )
    drilled = drill(
        _workload("prefill"), timelines["prefill"], args.drill, out_dir=work / "drill",
        warmup=args.warmup,
    )  # fmt: skip
    wall = _wall_clock(steps=50)
    report, misses = _write(args, timelines, wall, drilled)
    (args.out / "timeline_example.partial.json").unlink()
    print("\n".join(report))
    return 1 if misses else 0


if __name__ == "__main__":
    sys.exit(main())
