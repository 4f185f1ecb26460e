"""Measure the reduction ladder's targets on this GPU and write the records under --out.

Targets (issue 49): the final step (reduce:10) at >= 95 % of the measured read-only ceiling
for inputs of 64 MiB and more, and at least as fast as torch.sum and CUB from 2^20 to 2^30
elements. Every step is checked first (a wrong step is not timed), then the anchors and the
steps are timed in the same run, cold L2, in fp32, bf16 and fp16.

Run on a GPU:  PYTHONPATH=src python3 benchmarks/reduce_ladder.py --out $OUT/reduce
writes records.json (one record per measurement), table.json (the ladder's rows) and
targets.json (each target, the figures it was judged on, met or not).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

DEFAULT_SIZES = "2^20,2^22,2^24,2^26,2^28,2^30"
TARGET_PCT_OF_READ = 95.0
TARGET_MIN_BYTES = 64 * 1024**2


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for the JSON files")
    parser.add_argument("--sizes", default=DEFAULT_SIZES, help="element counts, e.g. 2^20,2^26")
    parser.add_argument("--dtypes", default="fp32,bf16,fp16")
    parser.add_argument("--steps", default="all", help='e.g. "7-10" (default all)')
    parser.add_argument("--max-time", type=float, default=1.0, help="seconds per timing")
    return parser.parse_args(argv)


def judge_targets(rows: list[dict], final: str = "reduce:10") -> list[dict]:
    """Each target per (n, dtype): the final step's % of the read ceiling (inputs >= 64 MiB)
    and its time against torch.sum and CUB (2^20 <= n <= 2^30)."""
    from kernelab.roofline.costs import dtype_bytes

    targets = []
    by_key: dict[tuple, dict[str, dict]] = {}
    for row in rows:
        by_key.setdefault((row["n"], row["dtype"]), {})[row["step"]] = row
    for (n, dtype), found in sorted(by_key.items()):
        mine = found.get(final)
        if mine is None:
            continue
        if n * dtype_bytes(dtype) >= TARGET_MIN_BYTES and mine["pct_of_read_ceiling"] is not None:
            targets.append({"target": f">= {TARGET_PCT_OF_READ:g} % of the read ceiling",
                            "n": n, "dtype": dtype, "value": mine["pct_of_read_ceiling"],
                            "met": mine["pct_of_read_ceiling"] >= TARGET_PCT_OF_READ})  # fmt: skip
        if 2**20 <= n <= 2**30:
            for anchor in ("torch.sum", "cub"):
                if anchor in found:
                    ratio = found[anchor]["median_ms"] / mine["median_ms"]
                    targets.append({"target": f"at least as fast as {anchor}", "n": n,
                                    "dtype": dtype, "value": ratio, "met": ratio >= 1.0})  # fmt: skip
    return targets


def main(argv=None) -> int:
    args = parse_args(argv)
    from kernelab.commands.ladder import parse_counts, parse_dtypes
    from kernelab.errors import KernelabError
    from kernelab.harness.records import save_records
    from kernelab.ladders.reduce import ladder
    from kernelab.output import note

    try:
        sizes, dtypes = parse_counts(args.sizes), parse_dtypes(args.dtypes)
        steps = ladder.parse_steps(args.steps)
        checks = ladder.check_steps(steps, [], dtypes, progress=note)
        bad = {c["step"] for c in checks if not c["ok"]}
        steps = [s for s in steps if s.name not in bad]
        ceiling, source = ladder.read_ceiling(progress=note)
        measurements, records, cub_line = ladder.time_ladder(
            steps, sizes, dtypes, max_time_s=args.max_time, progress=note
        )
    except KernelabError as exc:
        print(f"kernelab: {exc}", file=sys.stderr)
        return 2
    rows = ladder.table_rows(measurements, ceiling)
    targets = judge_targets(rows)
    args.out.mkdir(parents=True, exist_ok=True)
    save_records(records, args.out / "records.json")
    table = {"read_ceiling_bytes_per_s": ceiling, "read_ceiling_source": source,
             "cub": cub_line, "wrong_steps": sorted(bad), "checks": checks, "rows": rows}  # fmt: skip
    (args.out / "table.json").write_text(json.dumps(table, indent=1) + "\n")
    (args.out / "targets.json").write_text(json.dumps(targets, indent=1) + "\n")
    for t in targets:
        print(f"{'met ' if t['met'] else 'MISS'} {t['target']}: n={t['n']} {t['dtype']} "
              f"{t['value']:.3g}")  # fmt: skip
    print(cub_line)
    return 0 if not bad else 1


if __name__ == "__main__":
    sys.exit(main())
