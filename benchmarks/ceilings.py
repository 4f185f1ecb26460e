"""Measure this GPU's ceilings and write them where the lab reads them.

Run on the H200:  PYTHONPATH=src python3 benchmarks/ceilings.py
writes benchmarks/results/h200/ceilings.json (and the user's cache). Point kernelab at the
committed file with KERNELAB_CEILINGS=benchmarks/results/h200/ceilings.json.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from kernelab.harness.ceilings import cache_path, measure_ceilings, save_measured, this_gpu
from kernelab.output import note
from kernelab.probes.bandwidth import hbm_read

DEFAULT_OUT = Path(__file__).parent / "results" / "h200" / "ceilings.json"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--quick", action="store_true", help="4096^3 only, shorter runs")
    args = parser.parse_args()
    measured = measure_ceilings(quick=args.quick, read_probe=hbm_read)
    for path in (args.out, cache_path(this_gpu())):
        save_measured(measured, path)
        note(f"wrote {path}")
    for name, c in measured.ceilings.items():
        scale = "TB/s" if c.unit == "bytes/s" else "TFLOP/s"
        ratio = f"{100 * c.ratio:.1f} % of datasheet" if c.ratio else "no datasheet figure"
        print(f"{name:>5}  {c.rate / 1e12:8.2f} {scale:<8} at {c.shape}  ({ratio})")


if __name__ == "__main__":
    main()
