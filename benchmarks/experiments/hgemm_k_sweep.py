"""Where a Hopper GEMM step loses to cuBLAS: per-tile or per-K-tile? (session 4)

At M = N = 4096 the tile count is fixed (512 tiles of 128 x 256, 3.9 per SM), so the time
is about tiles per SM x (K / 64 x c + e): c per K-tile, e per tile (prologue, epilogue). This
times each step against cuBLAS in alternating pairs (kernelab.harness.paired) over K and
prints cuBLAS's and the step's median ms per K; a straight-line fit of ms against K gives
each one's slope (the K-tile cost) and intercept (the per-tile cost). A step that is ahead
at large K and behind at small K pays more per tile.

    python3 benchmarks/experiments/hgemm_k_sweep.py --steps 15,16 --ks 512,1024,2048,4096,8192
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
from pathlib import Path


def fit(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """Least-squares slope and intercept of ys against xs."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum(
        (x - mx) ** 2 for x in xs
    )
    return slope, my - slope * mx


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", default="15,16")
    parser.add_argument("--mn", type=int, default=4096)
    parser.add_argument("--ks", default="512,1024,2048,4096,8192")
    parser.add_argument("--pairs", type=int, default=200)
    parser.add_argument("--out", default=os.environ.get("OUT", "."))
    args = parser.parse_args()
    import torch

    from kernelab.harness.paired import compare
    from kernelab.spec.registry import get

    mn = args.mn
    ks = [int(k) for k in args.ks.split(",")]
    cublas = get("torch.mm").build()
    rows = []
    for number in args.steps.split(","):
        name = f"hgemm:{int(number):02d}"
        fn = get(name).build()
        for k in ks:
            a = torch.randn(mn, k, device="cuda").to(torch.bfloat16)
            b = torch.randn(k, mn, device="cuda").to(torch.bfloat16)
            # checked first: the step must agree with cuBLAS before it is timed
            want, got = cublas(a, b).float(), fn(a, b).float()
            error = ((got - want).abs().max() / want.abs().max()).item()
            if not error < 2e-2 or not torch.isfinite(got).all():
                print(f"{name} wrong at K={k}: relative max error {error}", file=sys.stderr)
                return 1
            r = compare(functools.partial(cublas, a, b), functools.partial(fn, a, b),
                        pairs=args.pairs)  # fmt: skip
            d = r.to_dict()
            rows.append({"step": name, "mn": mn, "k": k, "pct": d["pct_of_reference"],
                         "ci95": d["pct_ci95"], "cublas_ms": d["reference"]["median"],
                         "step_ms": d["candidate"]["median"]})  # fmt: skip
            print(f"{name} K={k:>6}: {d['pct_of_reference']:6.1f} % of cuBLAS "
                  f"({d['reference']['median']:.4f} ms vs {d['candidate']['median']:.4f} ms)")  # fmt: skip
    print("\nfit of median ms against K (slope in us per 1024 of K, intercept in us):")
    for name in dict.fromkeys(r["step"] for r in rows):
        mine = [r for r in rows if r["step"] == name]
        xs = [r["k"] / 1024 for r in mine]
        for who in ("cublas_ms", "step_ms"):
            slope, intercept = fit(xs, [1e3 * r[who] for r in mine])
            label = "cuBLAS" if who == "cublas_ms" else name
            print(f"  {label:<9} (beside {name}): slope {slope:7.2f}, intercept {intercept:6.2f}")
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "hgemm_k_sweep.json").write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
