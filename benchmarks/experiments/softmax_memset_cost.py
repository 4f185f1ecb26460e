"""What one zeroed workspace costs a long-row softmax call: the library's call against the
same call with one more memset of the same size, in alternating pairs.

The split-row kernels (softmax.py's cooperative kernel, softmax_held.py) exchange partials
through words that must start with no turn's tag, so every call zeroes a workspace first
(torch.zeros: one small fill kernel before the softmax kernel, 12-135 KiB). At bf16 65K and
131K the tuned sweeps measure 3.994-3.997 TB/s (2 GiB moved, ~537 us a call): a fill that
costs 2-3 us of GPU time in the sequence would be 0.4-0.6 %, the whole miss. This measures
it before anything is built to avoid it.

    PYTHONPATH=src python3 benchmarks/experiments/softmax_memset_cost.py --out $OUT

Per shape: the paired median (candidate speed as % of the library call's) with its 95 %
interval, and the implied cost of one fill in microseconds; a lone fill timed cold too.
With --kept, also the library with its words kept between calls (turn_words.REUSE: no fill
at all) against the library with a fill per call, in alternating pairs (checked first).
Since session 14 the library keeps its words by default, so "the library" of the first
comparison has no fill of its own.

Session 13 (experiments/softmax_memset_cost_v1, bf16, H200): one more fill cost 1.75-2.25
us a call, 99.59-99.68 % of the library's speed (95 % intervals 99.46-99.91 %); a lone
fill 3.89 us cold. Session 14 (v2_kept, --kept, then off by default): kept words ran at 100.23 %
(65K), 100.74 % (131K) and 100.26 % (262K) of the call with its fill.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from kernelab.harness import paired, timing
from kernelab.ops import softmax
from kernelab.runtime import turn_words

# (rows, cols): 2 GiB moved at 65K-131K (the sweep's shapes), 1 GiB read at 262K
SHAPES = ((8192, 65536), (4096, 131072), (2048, 262144))
# int64 words of the largest workspace among these (cooperative c1024 at 65K-131K:
# 66 or 33 groups x 4 slots x 64 or 128 chunks); the held kernel's at 262K is 1,536
WORKSPACE_WORDS = 16896


def _with_words_kept(fn, kept: bool):
    def call():
        before, turn_words.REUSE = turn_words.REUSE, kept
        try:
            return fn()
        finally:
            turn_words.REUSE = before

    return call


def _kept_against_fill(library, x, expected_of) -> dict:
    """The library with its exchange words kept (no fill) against itself with a fill per call,
    in alternating pairs, after three kept calls on fresh data are checked."""
    kept = _with_words_kept(library, True)
    for _ in range(3):
        x.copy_(torch.randn_like(x))
        assert torch.allclose(kept().float(), expected_of(x.float(), dim=-1), rtol=2e-2, atol=1e-6)
    match = paired.compare(_with_words_kept(library, False), kept, mode="cold", max_time_s=6.0)
    low, high = match.pct_interval()
    pct = match.pct_of_reference
    print(f"    words kept: {pct:.2f} % ({low:.2f}-{high:.2f}) of the fill's speed", flush=True)
    return {"pct_kept_words": pct, "kept_interval_pct": [low, high]}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("."))
    parser.add_argument("--dtypes", default="bf16")
    parser.add_argument("--kept", action="store_true", help="also kept words against a fill")
    args = parser.parse_args(argv)
    dtypes = {"bf16": torch.bfloat16, "fp32": torch.float32}
    rows = []
    fill = timing.benchmark(
        lambda: torch.zeros(WORKSPACE_WORDS, device="cuda", dtype=torch.int64), mode="cold"
    )
    print(f"a lone fill of {WORKSPACE_WORDS * 8} bytes, cold: {fill.median_ms * 1e3:.2f} us")
    for name in args.dtypes.split(","):
        for n_rows, n_cols in SHAPES:
            x = torch.randn(n_rows, n_cols, device="cuda", dtype=dtypes[name])
            expected = torch.softmax(x.float(), dim=-1)
            got = softmax.softmax(x)  # tunes, and checks the library once more
            assert torch.allclose(got.float(), expected, rtol=2e-2, atol=1e-6)
            del expected, got

            def library(x=x):
                return softmax.softmax(x)

            def with_one_more_fill(x=x):
                torch.zeros(WORKSPACE_WORDS, device="cuda", dtype=torch.int64)
                return softmax.softmax(x)

            match = paired.compare(library, with_one_more_fill, mode="cold", max_time_s=6.0)
            reference_ms = match.reference_median_ms
            pct = match.pct_of_reference
            low, high = match.pct_interval()
            cost_us = (100.0 / pct - 1.0) * reference_ms * 1e3
            moved = 2 * x.numel() * x.element_size()
            row = {
                "dtype": name, "rows": n_rows, "cols": n_cols, "pairs": len(match.ratios),
                "library_ms": reference_ms, "library_tbps": moved / reference_ms / 1e9,
                "pct_with_one_more_fill": pct, "interval_pct": [low, high],
                "one_fill_us": cost_us, "throttled": match.throttled,
            }  # fmt: skip
            rows.append(row)
            print(
                f"{name} {n_rows}x{n_cols}: library {row['library_tbps']:.3f} TB/s; one more "
                f"fill {pct:.2f} % ({low:.2f}-{high:.2f}) of its speed: {cost_us:.2f} us a fill",
                flush=True,
            )
            if args.kept:
                row.update(_kept_against_fill(library, x, expected_of=torch.softmax))
            del x
    args.out.mkdir(parents=True, exist_ok=True)
    record = {"lone_fill_ms": fill.median_ms, "rows": rows}
    (args.out / "softmax_memset_cost.json").write_text(json.dumps(record, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
