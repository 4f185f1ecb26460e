"""Measure where the data lives on this GPU and write the hierarchy record.

Run on the H200:  PYTHONPATH=src python3 benchmarks/hierarchy.py --out $OUT/hierarchy.json
(about 30 s; without --out: hierarchy.json under $OUT, else in this GPU's card folder,
benchmarks/results/<card>/). Commit the file as benchmarks/results/h200/hierarchy.json; the
pipeline lens reads it with KERNELAB_HIERARCHY=benchmarks/results/h200/hierarchy.json, or
from the cache after `--cache` (left off by default, so a test run's cache stays as it was).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from kernelab.errors import KernelabError
from kernelab.hardware.catalog import CATALOG
from kernelab.harness.cache import safe_name
from kernelab.harness.records import default_results_dir
from kernelab.lenses.hierarchy import record_path, save_record
from kernelab.output import console, note
from kernelab.probes.hierarchy import measure_hierarchy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None,
                        help="the file to write (default: hierarchy.json under $OUT, else "
                        "benchmarks/results/<card>/ in a source checkout, else "
                        "./kernelab-results/<gpu>/)")  # fmt: skip
    parser.add_argument("--quick", action="store_true", help="shorter timings, 1 GiB copies")
    parser.add_argument("--cache", action="store_true", help="also save it in the user's cache")
    args = parser.parse_args()
    try:
        record = measure_hierarchy(quick=args.quick)
    except KernelabError as exc:
        sys.exit(f"hierarchy: {exc}")
    if args.out is None:  # the card the record was measured on
        key = record.gpu_id or safe_name(record.gpu)
        args.out = default_results_dir(key) / "hierarchy.json"
    paths = [args.out]
    if args.cache:
        paths.append(record_path(record.gpu_id or record.gpu, record.driver))
    for path in paths:
        save_record(record, path)
        note(f"wrote {path}")

    from kernelab.commands.hierarchy import render_record

    spec = CATALOG.get(record.gpu_id) if record.gpu_id else None
    render_record(record, spec, str(args.out))(console)


if __name__ == "__main__":
    main()
