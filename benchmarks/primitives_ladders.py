"""Measure the transpose and histogram ladders' targets against torch (and CUB through CuPy
where it imports) and write the records and a summary under --out (default $OUT, else
benchmarks/results/<card>/primitives).

Run on a GPU:  PYTHONPATH=src python3 benchmarks/primitives_ladders.py [--quick]

Targets (issue 49): transpose best step >= 90 % of the copy bandwidth at 8192x8192 and
>= torch (fp32 and bf16); histogram uniform >= 80 % of the read ceiling (the measured
read-only bandwidth, kernelab's read probe; % of copy beside it) and >= 5x torch.bincount;
the skewed case (every value in one bin) and the MoE routing case (top-k expert ids) stated
beside it. Every step is checked exactly before it is timed; the summary says per target
PASS or FAIL with the figures it rests on.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from kernelab.errors import KernelabError
from kernelab.output import note

TRANSPOSE_TARGET_PCT = 90.0
HISTOGRAM_TARGET_PCT = 80.0
HISTOGRAM_TARGET_VS_TORCH = 5.0
TRANSPOSE_SHAPES = [(8192, 8192), (4097, 8191)]
HISTOGRAM_SIZES = [1 << 26, 1 << 28]
HISTOGRAM_BINS = (8, 64, 256)  # MoE experts (int32) and, at 256, the byte histogram (uint8)


def _best(rows, shape_key, **match):
    chosen = [r for r in rows if ":" in r["step"] and r["shape"] == shape_key
              and all(r.get(k) == v for k, v in match.items())]  # fmt: skip
    return max(chosen, key=lambda r: r["gbps"]) if chosen else None


def _transpose(args, records, summary):
    from kernelab.ladders.transpose import ladder

    steps = ladder.parse_steps(None)
    for dtype in ("fp32", "bf16"):
        checks = ladder.check_steps(steps, (dtype,), progress=note)
        good = [s for s in steps if all(c["ok"] for c in checks if c["step"] == s.name)]
        rows, found = ladder.time_ladder(good, TRANSPOSE_SHAPES[: 1 if args.quick else None],
                                         dtype, max_time_s=args.max_time, progress=note)  # fmt: skip
        records += found
        best = _best(rows, {"rows": 8192, "cols": 8192})
        torch_row = next(r for r in rows if r["step"] == ladder.ANCHOR
                         and r["shape"] == {"rows": 8192, "cols": 8192})  # fmt: skip
        summary.append({
            "target": f"transpose {dtype} 8192x8192: best step >= {TRANSPOSE_TARGET_PCT:g} % "
                      "of copy and >= torch",
            "best": best and best["step"], "pct_of_copy": best and best["pct_of_copy"],
            "vs_torch": best and torch_row["median_ms"] / best["median_ms"],
            "pass": bool(best) and best["pct_of_copy"] >= TRANSPOSE_TARGET_PCT
            and best["median_ms"] <= torch_row["median_ms"],
            "checks": checks, "rows": rows, "notes": [ladder.NO_CUB],
        })  # fmt: skip


def _histogram(args, records, summary):
    from kernelab.ladders.engine import read_ceiling
    from kernelab.ladders.histogram import ladder

    steps = ladder.parse_steps(None)
    sizes = HISTOGRAM_SIZES[: 1 if args.quick else None]
    read = read_ceiling("benchmarks/primitives_ladders.py", note)  # measured once for all
    for dtype, bins_list in (("int32", HISTOGRAM_BINS), ("uint8", (256,))):
        checks = ladder.check_steps(steps, (dtype,), progress=note)
        good = [s for s in steps if all(c["ok"] for c in checks if c["step"] == s.name)]
        for bins in bins_list:
            rows, found, notes = ladder.time_ladder(
                good, sizes, bins, dtype, distributions=ladder.DISTRIBUTIONS,
                max_time_s=args.max_time, progress=note, read=read,
            )  # fmt: skip
            records += found
            for n in sizes:
                shape = {"n": n, "bins": bins}
                best = _best(rows, shape, distribution="uniform")
                skewed = _best(rows, shape, distribution="skewed")
                moe = _best(rows, shape, distribution="moe")
                # judged against the read ceiling; against copy only where none was measured
                pct = best and (best.get("pct_of_read") if best.get("pct_of_read") is not None
                                else best["pct_of_copy"])  # fmt: skip
                against = "read" if best and best.get("pct_of_read") is not None else "copy"
                torch_row = next(r for r in rows if r["step"] == ladder.ANCHOR
                                 and r["shape"] == shape and r["distribution"] == "uniform")  # fmt: skip
                vs_torch = best and torch_row["median_ms"] / best["median_ms"]
                summary.append({
                    "target": f"histogram {dtype} n={n} bins={bins} uniform: >= "
                              f"{HISTOGRAM_TARGET_PCT:g} % of the read ceiling, >= "
                              f"{HISTOGRAM_TARGET_VS_TORCH:g}x torch.bincount",
                    "best": best and best["step"], "pct_of_copy": best and best["pct_of_copy"],
                    "pct_of_read": best and best.get("pct_of_read"),
                    "read_ceiling_gbps": best and best.get("read_ceiling_gbps"),
                    "judged_against": against, "vs_torch": vs_torch,
                    "pass": bool(best) and pct >= HISTOGRAM_TARGET_PCT
                    and vs_torch >= HISTOGRAM_TARGET_VS_TORCH,
                    "skewed_best": skewed and skewed["step"],
                    "skewed_pct_of_copy": skewed and skewed["pct_of_copy"],
                    "moe_best": moe and moe["step"],
                    "moe_pct_of_copy": moe and moe["pct_of_copy"],
                    "checks": checks, "rows": [r for r in rows if r["shape"] == shape],
                    "notes": notes,
                })  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None,
                        help="folder for the records and summary (default $OUT, else "
                        "benchmarks/results/<card>/primitives in a source checkout, else "
                        "./kernelab-results/<gpu>/primitives)")  # fmt: skip
    parser.add_argument("--ladder", choices=("transpose", "histogram", "both"), default="both")
    parser.add_argument("--quick", action="store_true", help="the first size of each only")
    parser.add_argument("--max-time", type=float, default=1.0, help="seconds per timing")
    args = parser.parse_args(argv)
    try:
        import torch

        if not torch.cuda.is_available():
            raise KernelabError("this benchmark needs a CUDA GPU")
        from kernelab.harness.ceilings import this_gpu
        from kernelab.harness.records import default_results_dir, save_records

        identity = this_gpu("benchmarks/primitives_ladders.py")
        out = args.out or default_results_dir(identity.key, "primitives")
        out.mkdir(parents=True, exist_ok=True)
        records, summary = [], []
        if args.ladder in ("transpose", "both"):
            _transpose(args, records, summary)
        if args.ladder in ("histogram", "both"):
            _histogram(args, records, summary)
        save_records(records, out / "primitives_ladders.records.json")
        (out / "primitives_ladders.summary.json").write_text(
            json.dumps({"gpu": identity.name, "targets": summary}, indent=1, default=str)
        )
        for entry in summary:
            verdict = "PASS" if entry["pass"] else "FAIL"
            print(f"{verdict}  {entry['target']}: best {entry['best']} "
                  f"{entry['pct_of_copy'] or 0:.1f} % of copy, {entry['vs_torch'] or 0:.2f}x torch")  # fmt: skip
            if entry.get("pct_of_read") is not None:
                print(f"      {entry['pct_of_read']:.1f} % of the read ceiling "
                      f"({entry['read_ceiling_gbps']:.0f} GB/s)")  # fmt: skip
            if "skewed_best" in entry:
                print(f"      skewed (one bin): best {entry['skewed_best']} "
                      f"{entry['skewed_pct_of_copy'] or 0:.1f} % of copy")  # fmt: skip
            if entry.get("moe_best"):
                print(f"      MoE routing (top-k ids): best {entry['moe_best']} "
                      f"{entry['moe_pct_of_copy'] or 0:.1f} % of copy")  # fmt: skip
        note(f"wrote {out}")
    except KernelabError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
