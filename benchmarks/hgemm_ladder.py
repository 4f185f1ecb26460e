"""The Hopper bf16 GEMM ladder on a real GPU: check every step, then time it beside cuBLAS.

    PYTHONPATH=src python3 benchmarks/hgemm_ladder.py --out "$OUT"        # the default set
    PYTHONPATH=src python3 benchmarks/hgemm_ladder.py --steps all         # every step
    PYTHONPATH=src python3 benchmarks/hgemm_ladder.py --steps 03,04,05    # a subset
    PYTHONPATH=src python3 benchmarks/hgemm_ladder.py --no-time           # correctness only
    PYTHONPATH=src python3 benchmarks/hgemm_ladder.py --prebuild          # no GPU: compile

1. Compile report: registers, shared memory, spills and the SASS claims of every step.
2. Correctness of every step through the registry and kernelab.harness.check at the
   hgemm.CHECK_SHAPES (the awkward shapes tests/ladders/hgemm/test_hgemm.py uses too), bf16. A step that is
   wrong anywhere (or crashes) is reported and not timed; later steps still run.
3. Timing, in this one process, of cuBLAS bf16 (torch.mm), every correct step, and the B
   transpose the launcher performs for steps 02-03 (so it can be told apart; timed only when
   one of them is selected), at each size, in
   the cold (L2 flushed) and graph (back-to-back, CUDA-graph replay) modes of
   kernelab.harness.timing. "% of cuBLAS" compares times in the same mode. cuBLAS is timed
   again after the steps ("torch.mm (again)", --no-bracket to skip): the card heats and
   its power cap lowers the clocks as the run goes on, and that row shows by how much.
records.json (one Record per timing) and summary.json (compile report, checks, rows) go to
--out (default: $OUT, else benchmarks/results/<card>/hgemm of this GPU). Exit status 1 if any
step is wrong.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT / "src") not in sys.path:
    sys.path.insert(0, str(ROOT / "src"))

from kernelab.errors import KernelabError  # noqa: E402
from kernelab.ladders.hgemm import (  # noqa: E402
    DEFAULT_BENCHMARK_STEPS,
    STEPS,
    ladder,  # noqa: E402
)


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def selected_steps(spec: str) -> list:
    """ "" or "default" (DEFAULT_BENCHMARK_STEPS: 09 is a measured loser and left out),
    "all", or a list ladder.parse_steps reads ("03,4,hgemm:05", "5-9")."""
    if spec.strip() in ("", "default"):
        return [s for s in STEPS if s.number in DEFAULT_BENCHMARK_STEPS]
    return ladder.parse_steps(spec)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out", type=Path, default=None,
        help="folder for records.json and summary.json (default $OUT, else "
        "benchmarks/results/<card>/hgemm in a source checkout, else "
        "./kernelab-results/<gpu>/hgemm)",
    )  # fmt: skip
    parser.add_argument("--sizes", default="2048,4096,8192")
    parser.add_argument(
        "--steps", default="default", help="e.g. 03,04,05, or all (default: 03-08, 10, 11)"
    )
    parser.add_argument("--modes", default="cold,graph", help="timing modes: cold, hot, graph")
    parser.add_argument("--max-time", type=float, default=1.0, help="seconds per timing")
    parser.add_argument("--no-time", action="store_true", help="check only")
    parser.add_argument(
        "--no-bracket", action="store_true", help="do not time cuBLAS again after the steps"
    )
    parser.add_argument("--prebuild", action="store_true", help="compile every step, then stop")
    parser.add_argument(
        "--rounds", type=int, default=0,
        help="then N interleaved rounds (cuBLAS, every step, cuBLAS) per size, cold",
    )  # fmt: skip
    parser.add_argument(
        "--paired", type=int, default=0,
        help="then N pairs of (cuBLAS call, step call) per step and size (harness.paired)",
    )  # fmt: skip
    parser.add_argument(
        "--paired-modes", default="cold", help="modes of the pairs: cold and/or hot",
    )  # fmt: skip
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    try:
        steps = selected_steps(args.steps)
        modes = ladder.parse_modes(args.modes)
    except KernelabError as exc:
        log(f"hgemm_ladder: {exc}")
        return 2

    log("compiling (cached after the first run)")
    summary: dict = {"compile": ladder.compile_report(steps, progress=log)}
    if args.prebuild:
        return 0
    import torch

    if not torch.cuda.is_available():
        log("no CUDA GPU: stopping after the compile step")
        return 2
    if args.out is None:
        from kernelab.harness.ceilings import this_gpu
        from kernelab.harness.records import default_results_dir

        args.out = default_results_dir(this_gpu("hgemm_ladder.py").key, "hgemm")
    summary.update(gpu=torch.cuda.get_device_name(), torch=torch.__version__, sizes=sizes)
    summary["steps"] = [s.name for s in steps]

    log("checking every selected step")
    summary["checks"] = ladder.check_steps(steps, progress=log)
    good = ladder.correct_steps(steps, summary["checks"])
    summary["grids"] = ladder.persistent_grids(good, sizes, progress=log)
    records = []
    if not args.no_time:
        rows, records = ladder.time_ladder(
            good, sizes, modes, args.max_time, progress=log, bracket=not args.no_bracket
        )
        summary["timing"] = rows
        print(ladder.format_table(rows, sizes, modes))
        print("\npersistent grids (blocks): " + json.dumps(summary["grids"]))
    if args.rounds:
        summary["rounds"] = [
            row
            for size in sizes
            for row in ladder.time_rounds(good, size, args.rounds, max_time_s=0.3, progress=log)
        ]
        print("\ninterleaved rounds, cold: % of the faster cuBLAS timing around each round")
        print(ladder.format_rounds(summary["rounds"]))
    if args.paired:
        summary["paired"] = [
            row
            for mode in args.paired_modes.split(",")
            for size in sizes
            for row in ladder.time_paired(good, size, args.paired, mode=mode, progress=log)
        ]
        print("\npaired: median over pairs of cuBLAS time / step time")
        print(ladder.format_paired(summary["paired"]))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "summary.json").write_text(json.dumps(summary, indent=2, default=str) + "\n")
    if records:
        from kernelab.harness.records import save_records

        save_records(records, args.out / "records.json")
    failed = [s.name for s in steps if s not in good]
    if failed:
        print(f"WRONG ANSWERS: {', '.join(failed)}")
    print(f"written to {args.out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
