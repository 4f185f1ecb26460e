"""Measure the scan ladder's targets against the copy, torch.cumsum and CUB.

The records and a summary go under --out (default $OUT, else benchmarks/results/<card>/scan).

Run on a GPU:  PYTHONPATH=src python3 benchmarks/scan_ladder.py [--quick]

Targets (issue 49), for fp32 and int32 inclusive scans at n >= 2^26: the single pass
(scan:04) reaches >= 90 % of the copy bandwidth measured in the same run, is at least as fast
as torch.cumsum, and is within 5 % of CUB (its time <= 1.05 x CUB's; CUB through cuda.compute
or CuPy: where neither imports the CUB target is reported as not measured, never as passed).
Every step is checked (exact for int32) before it is timed; the summary says per target
PASS, FAIL or NOT MEASURED with the figures it rests on.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from kernelab.errors import KernelabError
from kernelab.output import note

TARGET_PCT_OF_COPY = 90.0
TARGET_VS_CUB = 1.05  # the single pass's time at most 5 % above CUB's
TARGET_STEP = "scan:05"  # the top single-pass step (wide look-back)
SIZES = [1 << 26, 1 << 28]
DTYPES = ("fp32", "int32")


def verdicts(rows: list[dict], n: int) -> dict:
    """The targets at n from one dtype's timed rows: PASS/FAIL per target, None where the
    figure it needs was not measured (no CUB, or TARGET_STEP failed its check)."""
    at = {r["step"]: r for r in rows if r["shape"] == {"n": n}}
    step, torch_row, cub = at.get(TARGET_STEP), at.get("torch.cumsum"), at.get("cub")
    copy = step and step["pct_of_copy"] >= TARGET_PCT_OF_COPY
    vs_torch = step and torch_row and step["median_ms"] <= torch_row["median_ms"]
    vs_cub = None
    if step and cub:
        vs_cub = step["median_ms"] <= TARGET_VS_CUB * cub["median_ms"]
    return {
        "pct_of_copy": step and step["pct_of_copy"],
        "speedup_vs_torch": step and step["speedup_vs_anchor"],
        "time_vs_cub": step and cub and step["median_ms"] / cub["median_ms"],
        "copy_target": bool(copy) if step else None,
        "torch_target": bool(vs_torch) if step else None,
        "cub_target": vs_cub,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None,
                        help="folder for the records and summary (default $OUT, else "
                        "benchmarks/results/<card>/scan in a source checkout, else "
                        "./kernelab-results/<gpu>/scan)")  # fmt: skip
    parser.add_argument("--quick", action="store_true", help="n = 2^26 only")
    parser.add_argument("--max-time", type=float, default=1.0, help="seconds per timing")
    args = parser.parse_args(argv)
    try:
        import torch

        if not torch.cuda.is_available():
            raise KernelabError("this benchmark needs a CUDA GPU")
        from kernelab.harness.ceilings import this_gpu
        from kernelab.harness.records import default_results_dir, save_records
        from kernelab.ladders.scan import ladder

        identity = this_gpu("benchmarks/scan_ladder.py")
        out = args.out or default_results_dir(identity.key, "scan")
        out.mkdir(parents=True, exist_ok=True)
        sizes = SIZES[: 1 if args.quick else None]
        steps = ladder.parse_steps(None)
        records, summary = [], []
        for dtype in DTYPES:
            checks = ladder.check_steps(steps, (dtype,), progress=note)
            good = [s for s in steps if all(c["ok"] for c in checks if c["step"] == s.name)]
            rows, found, notes = ladder.time_ladder(
                good, sizes, dtype, max_time_s=args.max_time, progress=note
            )
            records += found
            for n in sizes:
                summary.append({"dtype": dtype, "n": n, **verdicts(rows, n), "checks": checks,
                                "rows": [r for r in rows if r["shape"] == {"n": n}],
                                "notes": notes})  # fmt: skip
        save_records(records, out / "scan_ladder.records.json")
        (out / "scan_ladder.summary.json").write_text(
            json.dumps({"gpu": identity.name, "targets": summary}, indent=1, default=str)
        )
        word = {True: "PASS", False: "FAIL", None: "NOT MEASURED"}
        for entry in summary:
            head = f"{TARGET_STEP} {entry['dtype']} n={entry['n']}"
            print(f"{word[entry['copy_target']]}  {head}: >= {TARGET_PCT_OF_COPY:g} % of copy "
                  f"({entry['pct_of_copy'] or 0:.1f} %)")  # fmt: skip
            print(f"{word[entry['torch_target']]}  {head}: >= torch.cumsum "
                  f"({entry['speedup_vs_torch'] or 0:.2f}x)")  # fmt: skip
            print(f"{word[entry['cub_target']]}  {head}: within 5 % of CUB "
                  f"(time {entry['time_vs_cub'] or 0:.3f}x CUB's)")  # fmt: skip
        note(f"wrote {out}")
    except KernelabError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
