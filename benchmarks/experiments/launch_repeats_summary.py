"""Median host cost over repeated runs of `pytorch_targets.py --parts launch`, from their
printed tables (the device tool brings back few files, so repeats are kept as printed).

Each table line reads: kernel, shape, dtype, ours wall (ours host), baseline, its wall (host),
verdict; a line "== DIRECT=<v> ..." starts a run, and a file named launch-direct<v>*.txt
(tma_direct_on_gpu.sh) or launch-<n>-direct<v>.txt (direct_launch_on_gpu.sh,
closing_targets_on_gpu.sh) is one run with that value; launch-<n>-compiled1.txt is one with the
compiled replay on (KERNELAB_COMPILED_REPLAY=1), listed as path "c1". Prints, per path and
kernel, the runs, and the median and worst of (ours - torch) in host us and in wall us.

    python3 benchmarks/experiments/launch_repeats_summary.py FILE [FILE ...]
"""

from __future__ import annotations

import re
import sys
from collections import defaultdict
from pathlib import Path
from statistics import median

ROW = re.compile(
    r"^(?P<kernel>\S+)\s+(?P<shape>\S+)\s+(?P<dtype>\S+)\s+(?P<wall>[\d.]+) \(\s*(?P<host>[\d.]+)\)"
    r"\s+\S+\s+(?P<base_wall>[\d.]+) \(\s*(?P<base_host>[\d.]+)\)"
)
RUN = re.compile(r"^== DIRECT=(?P<direct>[01])")


def runs(text: str, direct: str | None = None) -> dict[tuple, list[tuple[float, float]]]:
    """(direct, kernel, shape) -> [(host over torch, wall over torch), ...] in file order."""
    found = defaultdict(list)
    for line in text.splitlines():
        if m := RUN.match(line):
            direct = m["direct"]
        elif direct is not None and (m := ROW.match(line)):
            host = float(m["host"]) - float(m["base_host"])
            wall = float(m["wall"]) - float(m["base_wall"])
            found[(direct, m["kernel"], m["shape"])].append((host, wall))
    return found


def main(paths: list[str]) -> int:
    found = defaultdict(list)
    for path in paths:
        named = re.match(r"launch-(?:\d+-)?(direct|compiled)([01])", Path(path).name)
        path_label = named and ("c" if named[1] == "compiled" else "") + named[2]
        for key, values in runs(Path(path).read_text(), path_label).items():
            found[key] += values
    print(f"{'path':6} {'kernel':18} {'shape':15} {'runs':>4} {'host over torch: median / worst':>32}"
          f" {'wall over: median':>18}")  # fmt: skip
    for (direct, kernel, shape), values in sorted(found.items()):
        hosts, walls = [h for h, _ in values], [w for _, w in values]
        print(f"{direct:6} {kernel:18} {shape:15} {len(values):4} "
              f"{median(hosts):+20.1f} / {max(hosts):+6.1f} {median(walls):+18.1f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
