"""Where step 19's stream-K pays: its fix-up against the idle time it wins, shape by shape.

Step 19 shares the last partial round of tiles out as K-tiles. Round-robin, that round takes
k_tiles K-tile times; shared, left x k_tiles / clusters; the difference ("saved", in K-tile
times per cluster) is what sharing can win, and the fix-up (partial sums through global memory,
flag waits) is what it costs. Its first GPU run (session 27, H100) lost 5.6 % at 4096^3 (7.8
saved) and won 2.4 % at 8192^3 (62 saved). This times the shapes between, so the rule in
stream_k_split.cuh (MIN_SAVED_K_TILES) rests on measurements:

  for each shape, step 19 built with STREAM_K_MIN_SAVED_K_TILES=0 (shares wherever the rest of
  the split allows) and step 19 as the launcher runs it, each against step 18 in cold pairs
  (kernelab.harness.paired: one call of each, back to back, alternating order), after both
  are checked against a float64 torch product.

  python3 benchmarks/experiments/stream_k_calibrate.py --prebuild   # here: the device has no nvcc
  python3 benchmarks/experiments/stream_k_calibrate.py [--pairs 200] [--out DIR]   # on the GPU
  ncu ... python3 benchmarks/experiments/stream_k_calibrate.py --ncu-target 4096x4096x4096

Prints a table (paired % of step 18: above 100 means step 19 is faster) and writes
stream_k_calibrate.json into --out.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

from kernelab.ladders import hgemm as package  # noqa: E402
from kernelab.ladders.hgemm.steps import get_step, stream_k_work  # noqa: E402
from kernelab.runtime.cuda.build import build  # noqa: E402

# 66 clusters (an H100's 132 SMs in pairs) of 256 x 256 cluster tiles, K-tiles of 64: saved
# K-tile times 7.8, 15.5, 15.5, 26, 31, 31, 62
SHAPES = [
    (4096, 4096, 4096),
    (4096, 4096, 8192),
    (8192, 8192, 2048),
    (6144, 6144, 6144),
    (4096, 4096, 16384),
    (8192, 8192, 4096),
    (8192, 8192, 8192),
]
# Builds of step 19 beside the default, by the defines they set, each under its own key in
# the launcher's caches and without the launcher's fallback to step 18 (whole_tile_step), so
# the kernel's own split decides. (Session 27 also timed builds since gone from stream_k.cuh:
# dropping read partial sums from L2, an L2 prefetch of them, and the read-back as loads into
# registers instead of copies through shared memory; docs/notes/hgemm.md, step 19.)
VARIANTS = {"forced": (1019, {"STREAM_K_MIN_SAVED_K_TILES": 0})}
# --diagnose: the forced build without the partial sums' stores, or without their loads
# (stream_k.cuh, STREAM_K_DIAGNOSE): wrong results by design, timed without a check, so the
# difference to "forced" is what the stores or the loads cost.
DIAGNOSTIC_VARIANTS = {
    "forced_no_stores": (1021, {"STREAM_K_MIN_SAVED_K_TILES": 0, "STREAM_K_DIAGNOSE": 1}),
    "forced_no_loads": (1022, {"STREAM_K_MIN_SAVED_K_TILES": 0, "STREAM_K_DIAGNOSE": 2}),
}


def variant_steps(diagnose: bool = False) -> dict:
    """The VARIANTS (and with `diagnose` the DIAGNOSTIC_VARIANTS) as Steps the launcher runs,
    built here (or found in the cache)."""
    step = get_step(19)
    steps = {}
    chosen = {**VARIANTS, **(DIAGNOSTIC_VARIANTS if diagnose else {})}
    for name, (number, defines) in chosen.items():
        package._built[number] = build(f"{package.SOURCE_DIR}/{step.file}", arch=package.ARCH,
                                       defines=defines)  # fmt: skip
        report = next(iter(package._built[number].reports.values()))
        print(f"{name}: {report.registers} registers, {report.spill_store_bytes} spill bytes")
        steps[name] = replace(step, number=number, whole_tile_step=None)
    return steps


def saved_k_tiles(m: int, n: int, k: int, clusters: int) -> dict:
    tiles, k_tiles = stream_k_work(m, n, k)
    rounds, left = divmod(tiles, clusters)
    return {
        "cluster_tiles": tiles, "k_tiles": k_tiles, "clusters": clusters, "rounds": rounds,
        "left": left, "saved_k_tiles": k_tiles * (clusters - left) / clusters if left else 0.0,
    }  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--prebuild", action="store_true", help="compile the builds and stop")
    parser.add_argument("--pairs", type=int, default=200)
    parser.add_argument("--out", default=".")
    parser.add_argument("--diagnose", action="store_true",
                        help="also time the builds without the partial sums' stores or loads "
                             "(wrong results by design: not checked)")  # fmt: skip
    parser.add_argument("--ncu-target", metavar="MxNxK",
                        help="only run step 18, the variants and step 19 twice each at one "
                             "shape (what an ncu run profiles) and stop")  # fmt: skip
    args = parser.parse_args()

    step18, step19, variants = get_step(18), get_step(19), variant_steps(args.diagnose)
    package.build_step(step18)
    package.build_step(step19)
    if args.prebuild:
        return 0

    import torch

    from kernelab.harness.check import compare as check
    from kernelab.harness.paired import compare

    if args.ncu_target:
        m, n, k = map(int, args.ncu_target.split("x"))
        a = torch.randn(m, k, device="cuda").to(torch.bfloat16)
        b = torch.randn(k, n, device="cuda").to(torch.bfloat16)
        for step in (step18, *variants.values(), step19):
            for _ in range(2):
                package.hgemm(step, a, b)
        torch.cuda.synchronize()
        return 0

    grid = package.persistent_launch(step19, package.build_step(step19), 4096, 4096, 4096,
                                     torch.device("cuda")).grid[0]  # fmt: skip
    clusters = grid // step19.cluster
    rows = []
    for m, n, k in SHAPES:
        a = torch.randn(m, k, device="cuda").to(torch.bfloat16)
        b = torch.randn(k, n, device="cuda").to(torch.bfloat16)
        ref = a.double() @ b.double()
        row = {"shape": [m, n, k], **saved_k_tiles(m, n, k, clusters)}
        calls = {
            name: lambda step=step, a=a, b=b: package.hgemm(step, a, b)
            for name, step in {**variants, "default": step19}.items()
        }
        for name, call in calls.items():
            if name in DIAGNOSTIC_VARIANTS:
                call()  # wrong by design: timed, never checked
                result = None
            else:
                result = check(call(), ref, dtype="bf16")
            if result is not None and not result.ok:
                print(f"{m}x{n}x{k} {name}: WRONG ({result}); not timed", flush=True)
                row[name] = {"correct": False}
                continue
            paired = compare(lambda a=a, b=b: package.hgemm(step18, a, b), call, mode="cold",
                             pairs=args.pairs, max_time_s=20.0).to_dict()  # fmt: skip
            row[name] = {"correct": result is not None, **paired}
        del ref
        rows.append(row)
        cells = []
        for name in calls:
            p = row[name]
            if "pct_ci95" in p:
                low, high = p["pct_ci95"]
                cells.append(f"{name} {p['pct_of_reference']:6.2f} ({low:.2f}-{high:.2f})")
        print(
            f"{m}x{n}x{k}: saved {row['saved_k_tiles']:5.1f} K-tiles "
            f"(left {row['left']}/{clusters}); % of step 18: " + ", ".join(cells),
            flush=True,
        )

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    card = torch.cuda.get_device_name()
    (out / "stream_k_calibrate.json").write_text(json.dumps({"card": card, "rows": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
