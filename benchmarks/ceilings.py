"""Measure this GPU's ceilings and write them where the lab reads them.

Run on a GPU:  PYTHONPATH=src python3 benchmarks/ceilings.py
writes ceilings.json under $OUT, else under this GPU's card folder (benchmarks/results/h200/
on the H200, h100/ on an H100), and the user's cache. Point kernelab at the committed file
with KERNELAB_CEILINGS=benchmarks/results/h200/ceilings.json.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from kernelab.harness.ceilings import cache_path, measure_ceilings, save_measured, this_gpu
from kernelab.harness.records import default_results_dir
from kernelab.output import note
from kernelab.probes.bandwidth import hbm_read


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None,
                        help="the file to write (default: ceilings.json under $OUT, else "
                        "benchmarks/results/<card>/ in a source checkout, else "
                        "./kernelab-results/<gpu>/)")  # fmt: skip
    parser.add_argument("--quick", action="store_true", help="4096^3 only, shorter runs")
    args = parser.parse_args()
    measured = measure_ceilings(quick=args.quick, read_probe=hbm_read)
    identity = this_gpu()
    out = args.out or default_results_dir(identity.key) / "ceilings.json"
    for path in (out, cache_path(identity)):
        save_measured(measured, path)
        note(f"wrote {path}")
    for name, c in measured.ceilings.items():
        scale = "TB/s" if c.unit == "bytes/s" else "TFLOP/s"
        ratio = f"{100 * c.ratio:.1f} % of datasheet" if c.ratio else "no datasheet figure"
        print(f"{name:>5}  {c.rate / 1e12:8.2f} {scale:<8} at {c.shape}  ({ratio})")


if __name__ == "__main__":
    main()
