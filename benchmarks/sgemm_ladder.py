"""The SGEMM ladder's tile search on a real GPU, and its compile-ahead for a machine without nvcc.

    PYTHONPATH=src python3 benchmarks/sgemm_ladder.py --tune --out "$OUT"   # tile search
    PYTHONPATH=src python3 benchmarks/sgemm_ladder.py --prebuild            # no GPU: compile

Checking and timing the ladder is `kernelab ladder sgemm` (`--out records.json --plot
ladder.png`; `kernelab lab` runs the same engine, kernelab.ladders.sgemm.ladder). This script
does the two things that command does not:

--tune: every tile candidate of the tunable steps at a "large" (4096^3) and a "small"
  (1024^3) shape, each checked first by kernelab.harness.check (a wrong candidate is never
  timed), then timed cold by kernelab.harness.timing; the winners go to this GPU's tuning
  file in the kernelab cache (used from then on) and to tuned_h200.json in --out (default:
  $OUT, else benchmarks/results/<card>; copy it to src/kernelab/ladders/sgemm/ to commit them
  as the H200's winners).
--prebuild: compile every step and every candidate (with KERNELAB_CACHE pointing into the
  working tree, that cache can be carried to a GPU machine without nvcc).
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
from kernelab.ladders.sgemm.launch import build_step  # noqa: E402
from kernelab.ladders.sgemm.steps import parse_steps  # noqa: E402

TUNE_SHAPES = [(4096, 4096, 4096), (1024, 1024, 1024)]  # a "large" and a "small" class
CHECK_SHAPES = [(127, 257, 31), (300, 130, 70)]  # edges of every tile, unaligned rows


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def prebuild(steps) -> None:
    for step in steps:
        for defines in step.candidates or [None]:
            report = build_step(step, defines).report(step.kernel)
            spills = report.spill_store_bytes + report.spill_load_bytes
            log(f"{step.name} {defines or ''}: {report.registers} registers, {spills} spill bytes")


def tune(steps, max_time_s: float, out_dir: Path) -> dict:
    from kernelab.harness.check import check_implementation
    from kernelab.harness.timing import benchmark
    from kernelab.ladders.sgemm.ladder import tune as tune_step

    def check(candidate) -> bool:
        shapes = ({"m": m, "n": n, "k": k} for m, n, k in CHECK_SHAPES)
        return all(check_implementation(candidate, "gemm", s, "fp32").ok for s in shapes)

    def time_ms(fn) -> float:
        return benchmark(fn, mode="cold", min_samples=10, max_time_s=max_time_s).median_ms

    winners: dict = {}
    gpu = None
    for step in (s for s in steps if s.tunable):
        for m, n, k in TUNE_SHAPES:
            log(f"tuning {step.name} at {m}x{n}x{k}: {len(step.candidates)} candidates")
            result = tune_step(step, m, n, k, time_ms=time_ms, check=check)
            for r in result["results"]:
                speed = f"{r['gflops']:,.0f} GFLOP/s" if r["ms"] else "REJECTED (wrong answer)"
                log(f"  {r['defines']}: {speed}")
            log(f"  winner ({result['shape_class']}): {result['winner']}")
            gpu = result["gpu"]
            winners.setdefault(f"{step.number:02d}", {})[result["shape_class"]] = {
                "defines": result["winner"],
                "shape": [m, n, k],
                "gflops": max(r["gflops"] or 0 for r in result["results"]),
            }
    committed = {
        "gpu": gpu,
        "measured": True,
        "source": "benchmarks/sgemm_ladder.py --tune",
        "winners": winners,
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "tuned_h200.json").write_text(json.dumps(committed, indent=2) + "\n")
    return committed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out", type=Path, default=None,
        help="folder for tuned_h200.json (default $OUT, else benchmarks/results/<card> in a "
        "source checkout, else ./kernelab-results/<gpu>)",
    )  # fmt: skip
    parser.add_argument("--steps", default=None, help='e.g. "8,10-13" (default: all)')
    parser.add_argument("--max-time", type=float, default=1.5, help="seconds per candidate")
    parser.add_argument("--tune", action="store_true", help="time the tunable steps' candidates")
    parser.add_argument("--prebuild", action="store_true", help="compile every candidate")
    args = parser.parse_args()
    if not (args.tune or args.prebuild):
        parser.error("give --tune or --prebuild (timing the ladder is `kernelab ladder sgemm`)")
    try:
        steps = parse_steps(args.steps)
        prebuild(steps)
        if args.tune:
            import torch

            if not torch.cuda.is_available():
                raise KernelabError("--tune needs a CUDA GPU")
            if args.out is None:
                from kernelab.harness.ceilings import this_gpu
                from kernelab.harness.records import default_results_dir

                args.out = default_results_dir(this_gpu("sgemm_ladder.py").key)
            tune(steps, args.max_time, args.out)
            log(f"tuned_h200.json written to {args.out}")
    except KernelabError as exc:
        log(f"sgemm_ladder: {exc}")
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
