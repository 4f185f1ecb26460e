"""What the judge's wall (kernelab.evaluate.wall) adds to one solution's run, measured on
this machine and written as one JSON document.

    PYTHONPATH=src python3 benchmarks/wall_cost.py [--out DIR] [--runs 5] [--gpu-nodes]

A run of `python -I -S -c pass` started directly is set against the same program started as
the judge starts a worker: its plan (read-only roots, limits, the worker's environment and,
as root, a dedicated uid), a scratch folder handed to that uid, the launcher with its
namespaces, mounts, limits and uid switch, then the sweep of the uid's processes and the
scratch folder's removal. The cost is min(walled) - min(direct) over --runs pairs: the
fastest of each side, since other load on the machine can only add to a sample.

Target: the wall adds at most 1 s per solution. The full wall needs root (CI and the device
machines run as root); run as another user, the document says which steps were refused.
--gpu-nodes plans the worker as for a CUDA problem (the GPU's device nodes kept open to it).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

TARGET_S = 1.0  # the most the wall may add to one solution's run
RUNS = 5
PROGRAM = [sys.executable, "-I", "-S", "-c", "pass"]


def parse(argv):
    parser = argparse.ArgumentParser(
        description="Measure what the judge's wall adds to one solution's run.",
        epilog=f"Target: at most {TARGET_S:g} s per solution.",
    )
    parser.add_argument("--out", default=None,
                        help="folder for the JSON document (default $OUT, else "
                        "benchmarks/results/<card>/judge in a source checkout, else "
                        "./kernelab-results/<gpu or cpu>/judge)")  # fmt: skip
    parser.add_argument("--runs", type=int, default=RUNS,
                        help=f"pairs of runs, direct and walled (default {RUNS})")  # fmt: skip
    parser.add_argument("--gpu-nodes", action="store_true",
                        help="plan the worker as for a CUDA problem")  # fmt: skip
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error(f"--runs must be at least 1, got {args.runs}")
    return args


def run_direct() -> float:
    begin = time.perf_counter()
    subprocess.run(PROGRAM, check=True)
    return time.perf_counter() - begin


def run_walled(on_gpu: bool) -> tuple[float, dict]:
    """Seconds from the judge's plan to the scratch folder's removal, and what the wall
    applied and refused (the launcher's report)."""
    from kernelab.evaluate import wall

    begin = time.perf_counter()
    report, done = wall.run_behind(PROGRAM, read_only=[sys.prefix, sys.base_prefix],
                                   on_gpu=on_gpu)  # fmt: skip
    elapsed = time.perf_counter() - begin
    if done.returncode != 0:
        raise RuntimeError(f"the walled program failed ({done.returncode}): {done.stderr[-400:]}")
    return elapsed, report


def measure(runs: int, on_gpu: bool) -> dict:
    direct, walled, report = [], [], {}
    for _ in range(runs):
        direct.append(run_direct())
        seconds, report = run_walled(on_gpu)
        walled.append(seconds)
    cost = min(walled) - min(direct)
    return {
        "program": " ".join(PROGRAM[1:]),
        "runs": runs,
        "on_gpu": on_gpu,
        "as_root": os.geteuid() == 0,
        "direct_s": direct,
        "walled_s": walled,
        "direct_median_s": statistics.median(direct),
        "walled_median_s": statistics.median(walled),
        "cost_s": cost,
        "target_s": TARGET_S,
        "met": cost <= TARGET_S,
        "applied": report.get("applied", []),
        "refused": report.get("refused", []),
    }


def default_out() -> Path:
    """$OUT, else the judge/ folder of this machine's card (kernelab-results/cpu/judge
    without a GPU): the wall's cost is the host's, filed beside the judge's other figures."""
    from kernelab.hardware.detect import detect_gpu
    from kernelab.harness.cache import safe_name
    from kernelab.harness.records import default_results_dir

    gpu = detect_gpu()  # never raises: None without a GPU (or without torch and NVML)
    key = None if gpu is None else gpu.spec.id if gpu.spec else safe_name(gpu.name)
    return default_results_dir(key, "judge")


def main(argv=None) -> int:
    args = parse(argv)
    from kernelab.environment import software_versions

    result = measure(args.runs, args.gpu_nodes)
    document = {"benchmark": "wall_cost", "host": os.uname().nodename, "cpus": os.cpu_count(),
                "versions": software_versions(), **result}  # fmt: skip
    out = Path(args.out) if args.out else default_out()
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"wall_cost_{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps(document, indent=1, default=str))
    verdict = "met" if result["met"] else "NOT met"
    print(
        f"wall cost per solution: {1e3 * result['cost_s']:.0f} ms (fastest of {args.runs}: "
        f"direct {1e3 * min(result['direct_s']):.0f} ms, walled "
        f"{1e3 * min(result['walled_s']):.0f} ms); target <= {TARGET_S:g} s {verdict}; "
        f"{len(result['applied'])} steps applied, {len(result['refused'])} refused -> {path}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
