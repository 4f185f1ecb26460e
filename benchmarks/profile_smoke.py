"""Profile a few registered kernels under Nsight Compute, end to end, and diagnose them.

Run on the H200 (ncu on PATH, e.g. export PATH=/usr/local/cuda/bin:$PATH):
    PYTHONPATH=src python3 benchmarks/profile_smoke.py [--set full] [--only torch.mm]
Keeps each .ncu-rep and a JSON summary under --out-dir (default: $OUT, else this GPU's
benchmarks/results/<card>/profiles/), and prints one line per kernel: what it is bound by,
and what ncu measured to say so. Expected: torch.mm bf16 compute-bound on the Tensor pipe,
torch.mm fp32 on FMA, softmax memory-bound on DRAM.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from kernelab.errors import KernelabError
from kernelab.output import note, to_jsonable
from kernelab.profiling.metrics import FOCUSED_SECTIONS
from kernelab.profiling.session import run_implementation
from kernelab.profiling.summary import summarize

# (implementation, shape, dtype, the bottleneck/unit the diagnosis should find)
CASES = (
    ("torch.mm", {"m": 2048, "n": 2048, "k": 2048}, "bf16", ("compute", "Tensor")),
    ("torch.mm", {"m": 2048, "n": 2048, "k": 2048}, "fp32", ("compute", "FMA")),
    ("torch.softmax", {"rows": 32768, "cols": 4096}, "fp32", ("memory", "DRAM")),
)


def default_out_dir() -> Path:
    """$OUT, else the profiles/ folder of this GPU's card (kernelab-results/cpu without one)."""
    from kernelab.hardware.detect import detect_gpu
    from kernelab.harness.cache import safe_name
    from kernelab.harness.records import default_results_dir

    gpu = detect_gpu()  # never raises: None without a GPU
    key = None if gpu is None else gpu.spec.id if gpu.spec else safe_name(gpu.name)
    return default_results_dir(key, "profiles")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", dest="section_set", choices=("focused", "full"), default="focused")
    parser.add_argument("--only", help="profile only this implementation")
    parser.add_argument("--out-dir", type=Path, default=None,
                        help="folder for the reports and summaries (default $OUT, else "
                        "benchmarks/results/<card>/profiles in a source checkout, else "
                        "./kernelab-results/<gpu>/profiles)")  # fmt: skip
    args = parser.parse_args()
    args.out_dir = args.out_dir or default_out_dir()
    sections = "full" if args.section_set == "full" else FOCUSED_SECTIONS
    misses = 0
    for name, shape, dtype, expected in CASES:
        if args.only and name != args.only:
            continue
        stem = f"{name}_{'x'.join(str(v) for v in shape.values())}_{dtype}_{args.section_set}"
        try:
            run = run_implementation(
                name, shape, dtype, sections=sections, out_path=args.out_dir / f"{stem}.ncu-rep"
            )
        except KernelabError as exc:
            print(f"{name} {dtype}: FAILED: {exc}")
            misses += 1
            continue
        summaries = [summarize(k, predicted=run.predicted) for k in run.kernels]
        (args.out_dir / f"{stem}.json").write_text(
            json.dumps(to_jsonable([s.to_dict() for s in summaries]), indent=2) + "\n"
        )
        main_kernel = max(summaries, key=lambda s: s.duration_ns or 0.0)
        got = (main_kernel.diagnosis.bottleneck, main_kernel.diagnosis.unit)
        misses += got != expected
        sol = (main_kernel.roofline or {}).get("sol_pct")
        print(
            f"{name} {dtype} {shape}: {got[0]}/{got[1]} (expected {expected[0]}/{expected[1]}) "
            f"{main_kernel.name[:60]}  {main_kernel.duration_ns / 1e3:.1f} us  "
            f"SM {main_kernel.sm_pct:.0f}%  mem {main_kernel.memory_pct:.0f}%  "
            f"tensor {main_kernel.tensor_pct or 0:.0f}%  "
            f"SOL {'-' if sol is None else f'{sol:.0f}%'}"
        )
        note(f"  report: {run.report_path}")
    return 1 if misses else 0


if __name__ == "__main__":
    raise SystemExit(main())
