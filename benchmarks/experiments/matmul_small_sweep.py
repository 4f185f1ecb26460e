"""triton.matmul at small sizes (bf16): every candidate's device time against torch.mm, paired.

Session 28 (H100). At 1024^3 the tuned call reads 92 % of torch.mm on kernelab's cold timer
and 86-99 % under do_bench (issue 30's goal there: >= 90 %). matmul_1024_configs.py timed
the candidates with do_bench, where a forced config= call is host-bound; this one times device
work only: kernelab's paired harness (cold, alternating calls, a spin kernel ahead of them), so
a forced call's launch path does not count. Besides the tuned set it tries tiles, stage counts,
warp counts and warp specialization the tuner does not have, and the split-K configurations.
Every candidate is checked against a float32 product first; a wrong or failing one is named
and skipped.

  PYTHONPATH=src python3 benchmarks/experiments/matmul_small_sweep.py --out $OUT [--sizes 1024]
"""

import argparse
import json
import time
from pathlib import Path

import torch

from kernelab.harness.paired import compare
from kernelab.ops import matmul as mm

# BM, BN, BK, warps, stages, warp specialization: tiles the tuner does not try at 1024^3
EXTRA = [
    (64, 128, 128, 4, 4, True),
    (64, 128, 128, 8, 4, False),
    (128, 64, 128, 8, 4, False),
    (64, 128, 64, 4, 6, False),
    (64, 128, 64, 4, 8, False),
    (128, 64, 64, 4, 6, False),
    (128, 64, 64, 4, 8, False),
    (64, 64, 128, 4, 6, False),
    (64, 64, 64, 4, 8, False),
]
# session 28's first sweep (H100, 1024^3): also 64x128x128 w4 s2 / w8 s3 / w4 s3 ws,
# 128x64x128 w4 s3, 64x64x128 w4 s3 / s4, 64x64x256 w4 s3, 128x128x128 w8 s3, 64x256x64
# w4 / w8 s4: all at 71-93 % (results/h100/session28/matmul-small/sweep-1.json)


def label(c: dict) -> str:
    flags = " ws" if c.get("WARP_SPECIALIZE") else ""
    flags += " split" if c.get("EPILOGUE_SPLIT") else ""
    flags += f" splitk{c['SPLIT_K']}" if c.get("SPLIT_K", 1) > 1 else ""
    return f"{c['BM']}x{c['BN']}x{c['BK']} w{c['num_warps']} s{c['num_stages']}{flags}"


def candidates(n: int, programs: int, split_k: bool = True) -> list[tuple[str, dict]]:
    tuned_set = mm.candidates_for(n, n, programs, mm.tma_candidates(2))
    found = [(label(c), c) for c in tuned_set]
    for bm, bn, bk, w, s, ws in EXTRA:
        c = mm._candidate(bm, bn, bk, w, s, ws=ws)
        found.append(("+ " + label(c), c))
    found += [("+ " + label(c), c) for c in mm.split_k_candidates(2) if split_k]
    return found


def sweep(n: int, programs: int, pairs: int, split_k: bool) -> list[dict]:
    a = torch.randn(n, n, device="cuda").to(torch.bfloat16)
    b = torch.randn(n, n, device="cuda").to(torch.bfloat16)
    ref = a.float() @ b.float()
    calls = [("tuned", lambda: mm.matmul(a, b))]
    calls.append(("tuned plain", lambda: mm.matmul(a, b, path="plain")))
    calls += [
        (name, lambda c=c: mm.matmul(a, b, config=c))
        for name, c in candidates(n, programs, split_k)
    ]
    rows = []
    for name, call in calls:
        started = time.perf_counter()
        try:
            out = call().float()
            torch.cuda.synchronize()
        except Exception as exc:  # a candidate that does not fit or compile: say so, go on
            print(f"{n:5} {name:34} failed: {type(exc).__name__}: {str(exc)[:70]}", flush=True)
            rows.append({"n": n, "name": name, "failed": f"{type(exc).__name__}: {exc}"[:300]})
            continue
        err = ((out - ref).abs().max() / ref.abs().max()).item()
        if not torch.isfinite(out).all() or err > 2e-2:
            print(f"{n:5} {name:34} WRONG (max rel err {err:.3g})", flush=True)
            rows.append({"n": n, "name": name, "wrong": err})
            continue
        timing = compare(lambda: torch.mm(a, b), call, pairs=pairs)
        low, high = timing.pct_interval()
        row = {
            "n": n,
            "name": name,
            "pct_of_torch": timing.pct_of_reference,
            "ci": [low, high],
            "torch_median_ms": timing.reference_median_ms,
            "pairs": len(timing.ratios),
            "max_rel_err": err,
            "seconds": time.perf_counter() - started,
        }
        rows.append(row)
        print(f"{n:5} {name:34} {row['pct_of_torch']:6.1f} % (CI {low:.1f}-{high:.1f}) "
              f"torch {row['torch_median_ms'] * 1e3:.2f} us", flush=True)  # fmt: skip
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, default=Path("."))
    parser.add_argument("--sizes", default="1024")
    parser.add_argument("--pairs", type=int, default=200)
    parser.add_argument("--no-split-k", action="store_true", help="leave the split-K configs out")
    args = parser.parse_args()
    programs = torch.cuda.get_device_properties(0).multi_processor_count
    rows = []
    for n in [int(s) for s in args.sizes.split(",")]:
        rows += sweep(n, programs, args.pairs, not args.no_split_k)
        (args.out / "matmul_small_sweep.json").write_text(json.dumps(rows, indent=1))
    print("\ntuner's choices:", *mm.tuned_choices(), sep="\n  ")
    print("\nbest by size:")
    for n in sorted({r["n"] for r in rows}):
        timed = sorted((r for r in rows if r["n"] == n and "pct_of_torch" in r),
                       key=lambda r: -r["pct_of_torch"])  # fmt: skip
        for r in timed[:8]:
            print(f"  {n:5} {r['pct_of_torch']:6.1f} %  {r['name']}")


if __name__ == "__main__":
    main()
