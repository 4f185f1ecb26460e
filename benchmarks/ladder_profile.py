"""The SGEMM ladder verified under Nsight Compute, and the timer checked against ncu.

Run on the H200 (about 2-3 minutes):
    PYTHONPATH=src python3 benchmarks/ladder_profile.py --out "$OUT"
Writes into --out (default: $OUT, else this GPU's card folder, benchmarks/results/<card>/):
    ladder_verify.json          per step: the claimed metric, previous and new value, the
                                expected direction, PASS/FAIL (`kernelab ladder sgemm --profile`)
    ladder_verify_records.json  one kernelab Record per step (mode "ncu": the kernel time)
    sgemm_ladder_verify.ncu-rep.xz  the report, so that anyone can re-verify it without a GPU:
                                kernelab ladder sgemm --profile --import <it>
    crosscheck.json             torch.mm timed cold by the harness against ncu's
                                gpu__time_duration of the same calls, per dtype and size
Every step runs at one size (default 4096^3, the naive step ~0.3 s per replay pass), so raw
counts compare directly. bf16 at 8192^3 is in the cross-check to show what a power-capped
back-to-back loop does to the timer's figure against ncu's isolated launches.
"""

from __future__ import annotations

import argparse
import json
import lzma
import os
import shutil
import tempfile
from pathlib import Path

from kernelab.errors import KernelabError
from kernelab.output import note, to_jsonable

CROSSCHECKS = "bf16:4096,fp32:4096,bf16:8192"
NCU_HOME = Path("/usr/local/cuda/bin/ncu")


def _write(path: Path, data) -> None:
    path.write_text(json.dumps(to_jsonable(data), indent=2) + "\n")
    note(f"wrote {path}")


def _compress(report: Path) -> Path:
    """report.ncu-rep -> report.ncu-rep.xz (a tenth of the size; kernelab reads both)."""
    packed = report.with_name(report.name + ".xz")
    with open(report, "rb") as src, lzma.open(packed, "wb", preset=6) as dst:
        shutil.copyfileobj(src, dst)
    report.unlink()
    return packed


def verify_ladder(out: Path, size: int, steps: str | None) -> dict:
    from kernelab.harness.records import save_records
    from kernelab.ladders.sgemm.ladder import parse_steps, verify_ladder

    report = out / "sgemm_ladder_verify.ncu-rep"
    result, records = verify_ladder(parse_steps(steps), size, report_path=report, progress=note)
    result["report"] = str(_compress(report))
    result["records"] = str(save_records(records, out / "ladder_verify_records.json"))
    _write(out / "ladder_verify.json", result)
    for step in result["steps"]:
        failed = [
            c["quantity"] for c in step["checks"] if c["required"] and not c["verdict"] == "PASS"
        ]
        speed = step["speedup_vs_prev"]
        print(
            f"{step['step']}  {step['verdict']:<10} {step['duration_ms']:9.3f} ms"
            f"  x{speed if speed else float('nan'):5.2f} (expected {step['expected_speedup']})"
            + (f"  not met: {'; '.join(failed)}" if failed else "")
        )
    return result


def cross_check(out: Path, configs: str) -> list[dict]:
    from kernelab.profiling.crosscheck import crosscheck

    results = []
    with tempfile.TemporaryDirectory() as reports:
        for config in (c.strip() for c in configs.split(",") if c.strip()):
            dtype, _, size = config.partition(":")
            try:
                check = crosscheck(
                    dtype,
                    int(size),
                    report_path=Path(reports) / f"mm_{dtype}_{size}.ncu-rep",
                    progress=note,
                )
            except (KernelabError, ValueError) as exc:
                results.append({"dtype": dtype, "size": size, "error": str(exc)})
                print(f"torch.mm {config}: FAILED: {exc}")
                continue
            data = check.to_dict()
            data["report"] = None  # a temporary file: the durations are in this record
            results.append(data)
            print(
                f"torch.mm {dtype} {size}^3: timer {check.timer_median_ms:.4f} ms, ncu "
                f"{check.ncu_median_ms:.4f} ms, ratio {check.ratio:.3f} "
                f"({'agree' if check.agree else 'DISAGREE'} within {check.tolerance:.0%}); "
                f"SM clock timer {check.timer_sm_mhz} MHz, ncu {check.ncu_sm_mhz} MHz"
            )
            for line in check.notes:
                print(f"    {line}")
    _write(out / "crosscheck.json", {"checks": results})
    return results


def default_out() -> Path:
    """$OUT, else this GPU's card folder (kernelab-results/cpu without a GPU)."""
    from kernelab.hardware.detect import detect_gpu
    from kernelab.harness.cache import safe_name
    from kernelab.harness.records import default_results_dir

    gpu = detect_gpu()  # never raises: None without a GPU
    key = None if gpu is None else gpu.spec.id if gpu.spec else safe_name(gpu.name)
    return default_results_dir(key)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None,
                        help="folder for the files (default $OUT, else benchmarks/results/<card> "
                        "in a source checkout, else ./kernelab-results/<gpu>)")  # fmt: skip
    parser.add_argument("--size", type=int, default=4096, help="one square size for every step")
    parser.add_argument("--steps", default=None, help='ladder steps, e.g. "1-12" (default all)')
    parser.add_argument("--crosscheck", default=CROSSCHECKS, help='"dtype:size,..." or ""')
    parser.add_argument("--skip-ladder", action="store_true")
    args = parser.parse_args()
    if shutil.which("ncu") is None and "KERNELAB_NCU" not in os.environ and NCU_HOME.is_file():
        os.environ["KERNELAB_NCU"] = str(NCU_HOME)
    args.out = args.out or default_out()
    args.out.mkdir(parents=True, exist_ok=True)
    failures = 0
    if not args.skip_ladder:
        try:
            verify_ladder(args.out, args.size, args.steps)
        except KernelabError as exc:
            print(f"ladder verification: FAILED: {exc}")
            _write(args.out / "ladder_verify.json", {"error": str(exc)})
            failures += 1
    if args.crosscheck:
        failures += sum("error" in r for r in cross_check(args.out, args.crosscheck))
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
