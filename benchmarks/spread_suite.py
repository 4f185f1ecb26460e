"""Suites and sweeps over N GPUs through Ray, against one GPU without it (docs/spread.md).

In one call, on a machine with N GPUs:

  suite   the held KernelBench fixture suite (tests/fixtures/eval/kernelbench), its problems
          copied --copies times under new names so that every GPU has work, judged three
          ways: locally on one GPU (run_suite, as `kernelab eval --suite`), through Ray on
          one GPU, through Ray on N GPUs;
  sweep   `kernelab bench KERNEL` over --sizes, the same three ways.

Targets, each checked in the record:
  scaling    tasks per second on N GPUs through Ray >= 0.9 * N * one GPU's locally
  overhead   Ray on one GPU takes <= 5 % longer than the local run of the same work
  parity     every verdict the same, problem by problem (status for status), in all three

  PYTHONPATH=src python3 benchmarks/spread_suite.py [--gpus N] [--copies C] [--dry-run]

Writes spread_suite.json under $OUT, else under benchmarks/results/<card>/spread/ of the GPUs
measured (./kernelab-results/cpu/spread/ for --dry-run, and ./kernelab-results/<gpu>/spread/
outside a source checkout). --dry-run needs neither a GPU nor Ray: it builds the copied
suite, plans the tasks and writes the plan with the targets it would check.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SUITE = ROOT / "tests" / "fixtures" / "eval" / "kernelbench"
SCALING_GOAL = 0.9  # N GPUs give at least this share of N times one GPU's throughput
OVERHEAD_GOAL_PCT = 5.0  # Ray on one GPU costs at most this much over the local path
SWEEP = ("torch.softmax", "bf16", "1Kx1K,2Kx2K,4Kx4K,8Kx8K,16Kx4K,4Kx16K,32Kx1K,1Kx32K")


def replicate_suite(source: Path, dest: Path, copies: int) -> Path:
    """The KernelBench suite in `source` copied `copies` times into `dest`, each problem
    foo.py as foo_cI.py with its solutions under solutions/foo_cI/ (the naming rule of
    kernelab.evaluate.suite), so that there are `copies` times as many distinct tasks."""
    dest.mkdir(parents=True, exist_ok=True)
    for problem in sorted(source.glob("*.py")):
        if "_solution" in problem.stem:
            continue
        for i in range(copies):
            name = f"{problem.stem}_c{i}"
            shutil.copy(problem, dest / f"{name}.py")
            solutions = source / "solutions" / problem.stem
            if solutions.is_dir():
                shutil.copytree(solutions, dest / "solutions" / name)
    return dest


def verdicts(result: dict) -> dict:
    """(problem, solution path inside the suite) -> status."""
    out = {}
    for row in result["rows"]:
        parts = Path(row["solution"]).parts
        out[(row["problem"], "/".join(parts[-3:]))] = row["status"]
    return out


def mismatches(reference: dict, other: dict) -> list[str]:
    keys = sorted(set(reference) | set(other))
    return [
        f"{problem} {solution}: {reference.get((problem, solution))} vs "
        f"{other.get((problem, solution))}"
        for problem, solution in keys
        if reference.get((problem, solution)) != other.get((problem, solution))
    ]


def check_targets(gpus: int, tasks: int, seconds: dict, parity: list[str]) -> dict:
    """The three targets from the wall times (local, ray1, rayN) of one piece of work."""
    local, ray1, ray_n = seconds["local"], seconds["ray1"], seconds["rayN"]
    speedup = local / ray_n
    overhead = 100.0 * (ray1 - local) / local
    return {
        "tasks": tasks,
        "seconds": seconds,
        "tasks_per_s": {k: tasks / v for k, v in seconds.items()},
        "scaling": {
            "goal": f">= {SCALING_GOAL} * {gpus} x one GPU",
            "speedup": speedup,
            "efficiency": speedup / gpus,
            "met": speedup >= SCALING_GOAL * gpus,
        },
        "overhead": {
            "goal": f"<= {OVERHEAD_GOAL_PCT} %",
            "pct": overhead,
            "met": overhead <= OVERHEAD_GOAL_PCT,
        },
        "parity": {"mismatches": parity, "met": not parity},
    }


def _timed(fn):
    start = time.perf_counter()
    value = fn()
    return value, time.perf_counter() - start


def _quiet(fn):
    with contextlib.redirect_stdout(io.StringIO()):
        return fn()


def run_suite_three_ways(suite: Path, warm: Path, gpus: int, folder: Path) -> dict:
    from kernelab.evaluate.suite import run_suite
    from kernelab.evaluate.verdict import Options
    from kernelab.spread.suites import spread_suite

    settings = {"device": "cuda", "scale": 1.0, "timeout": 300.0,
                "options": Options(seed=7, max_time_s=0.2).validate()}  # fmt: skip
    # one untimed copy first: torch.compile's on-disk cache is then as warm for the local
    # run as for the two after it, so none of them is charged the first compilation
    run_suite(warm, **settings)
    local, t_local = _timed(lambda: run_suite(suite, **settings))
    common = {**settings, "address": None, "show_progress": False}
    ray1, t_ray1 = _timed(lambda: spread_suite(suite, gpus=1, folder=folder / "s1", **common))
    ray_n, t_ray_n = _timed(lambda: spread_suite(suite, gpus=gpus, folder=folder / "sN", **common))
    reference = verdicts(local)
    parity = mismatches(reference, verdicts(ray1)) + mismatches(reference, verdicts(ray_n))
    report = check_targets(
        gpus, len(local["rows"]), {"local": t_local, "ray1": t_ray1, "rayN": t_ray_n}, parity
    )
    report["summary"] = {"local": local["summary"], "ray1": ray1["summary"],
                         "rayN": ray_n["summary"]}  # fmt: skip
    return report


def run_sweep_three_ways(gpus: int, folder: Path) -> dict:
    from kernelab.cli import main
    from kernelab.spec import registry
    from kernelab.spec.reference import get_op
    from kernelab.spread.sweeps import spread_sweep

    kernel, dtype, sizes = SWEEP
    impl = registry.get(kernel)
    from kernelab.commands.bench import parse_sizes

    shapes = parse_sizes(impl.op, get_op(impl.op).shape_keys, sizes)
    args = ["bench", kernel, "--sizes", sizes, "--dtype", dtype, "--no-baselines",
            "--max-time", "0.5", "--json"]  # fmt: skip
    code, t_local = _timed(lambda: _quiet(lambda: main(args)))
    common = {"baselines": [], "dtype": dtype, "mode": "cold", "min_samples": 10,
              "max_time": 0.5, "device": "cuda", "address": None, "deadline_s": 600,
              "show_progress": False}  # fmt: skip
    ray1, t_ray1 = _timed(
        lambda: spread_sweep(kernel, shapes, gpus=1, folder=folder / "w1", **common)
    )
    ray_n, t_ray_n = _timed(
        lambda: spread_sweep(kernel, shapes, gpus=gpus, folder=folder / "wN", **common)
    )
    failed = [
        f"{name}: {row['shape']}"
        for name, rows in (("ray1", ray1["rows"]), ("rayN", ray_n["rows"]))
        for row in rows
        if not row["check_ok"]
    ]
    if code != 0:
        failed.append(f"local: exit {code}")
    return check_targets(
        gpus, len(shapes), {"local": t_local, "ray1": t_ray1, "rayN": t_ray_n}, failed
    )


def plan(suite: Path, gpus: int) -> dict:
    """What a run would do, without a GPU or Ray: the tasks and the targets."""
    from kernelab.spread.suites import plan_suite

    found, tasks = plan_suite(suite)
    return {
        "problems": len(found),
        "tasks": len(tasks),
        "tasks_per_gpu": len(tasks) / gpus,
        "sweep": {"kernel": SWEEP[0], "dtype": SWEEP[1], "sizes": SWEEP[2].split(",")},
        "targets": {
            "scaling": f"tasks/s on {gpus} GPUs via Ray >= {SCALING_GOAL} * {gpus} x local",
            "overhead": f"Ray on 1 GPU <= {OVERHEAD_GOAL_PCT} % over local",
            "parity": "every verdict identical, problem by problem",
        },
    }


def default_out(gpu_name: str | None) -> Path:
    """spread_suite.json under $OUT, else in the spread/ folder of the card measured (the
    GPU's name as torch reports it; None for a dry run)."""
    from kernelab.hardware.detect import match_catalog
    from kernelab.harness.cache import safe_name
    from kernelab.harness.records import default_results_dir

    spec = match_catalog(gpu_name) if gpu_name else None
    key = spec.id if spec else safe_name(gpu_name) if gpu_name else None
    return default_results_dir(key, "spread") / "spread_suite.json"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=None, help="GPUs (default: every one)")
    parser.add_argument("--copies", type=int, default=None, help="suite copies (default: N)")
    parser.add_argument("--dry-run", action="store_true", help="plan only: no GPU, no Ray")
    parser.add_argument("--out", type=Path, default=None,
                        help="the file to write (default: spread_suite.json under $OUT, else "
                        "benchmarks/results/<card>/spread in a source checkout, else "
                        "./kernelab-results/<gpu or cpu>/spread)")  # fmt: skip
    args = parser.parse_args(argv)
    gpus = args.gpus
    if gpus is None:
        gpus = 2 if args.dry_run else _visible_gpus()
    if gpus < 1:
        print("spread_suite: needs at least one GPU (or --dry-run)", file=sys.stderr)
        return 2
    copies = args.copies or gpus
    with tempfile.TemporaryDirectory(prefix="spread-suite-") as scratch:
        suite = replicate_suite(SUITE, Path(scratch) / "suite", copies)
        record = {"gpus": gpus, "copies": copies, "plan": plan(suite, gpus)}
        if args.dry_run:
            record["dry_run"] = True
        else:
            import ray
            import torch

            record["gpu"] = torch.cuda.get_device_name(0)
            ray.init(num_gpus=gpus, include_dashboard=False, log_to_driver=False)
            warm = replicate_suite(SUITE, Path(scratch) / "warm", 1)
            record["suite"] = run_suite_three_ways(suite, warm, gpus, Path(scratch) / "tasks")
            record["sweep"] = run_sweep_three_ways(gpus, Path(scratch) / "tasks")
            ray.shutdown()
    if args.out is None:
        args.out = default_out(record.get("gpu"))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=1, default=str) + "\n")
    for part in ("suite", "sweep"):
        if part in record:
            r = record[part]
            print(
                f"{part}: {r['tasks']} tasks; local {r['seconds']['local']:.1f} s, Ray 1 GPU "
                f"{r['seconds']['ray1']:.1f} s ({r['overhead']['pct']:+.1f} %), Ray {gpus} GPUs "
                f"{r['seconds']['rayN']:.1f} s ({r['scaling']['speedup']:.2f}x); scaling "
                f"{'met' if r['scaling']['met'] else 'MISSED'}, overhead "
                f"{'met' if r['overhead']['met'] else 'MISSED'}, parity "
                f"{'met' if r['parity']['met'] else 'MISSED'}"
            )
    print(f"record: {args.out}")
    return 0


def _visible_gpus() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


if __name__ == "__main__":
    sys.exit(main())
