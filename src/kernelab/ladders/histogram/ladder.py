"""Run the histogram ladder: the compile report (no GPU), exact checks of every step, timing
beside torch.bincount (and CUB through CuPy where it imports) and a copy of the values'
bytes in the same run, for uniform and skewed (every value in one bin) data; the proof
metrics under Nsight Compute. The engine is the transpose ladder's (transpose/ladder.py).

The ceiling: a histogram reads n x itemsize bytes and writes a few counts, so its roof is a
pure read. What is measured beside it is dst.copy_(src) over the values' bytes, counted as
read + write; a pure read may run a few percent above that copy rate.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable

from kernelab.errors import KernelabError
from kernelab.ladders.engine import compile_report, timed_rows, to_record
from kernelab.ladders.histogram.launch import build_step, histogram
from kernelab.ladders.histogram.steps import DTYPES, Step, parse_steps
from kernelab.spec.reference import get_op

__all__ = ["check_steps", "compile_histogram", "parse_steps", "time_ladder"]

ANCHOR = "torch.bincount"
CUB = "cupy.bincount (CUB)"
DISTRIBUTIONS = ("uniform", "skewed")
CHECK_N = (1, 7, 31, 33, 100003, 1 << 20)
CHECK_BINS = (8, 64, 256, 4096)


def compile_histogram(steps, progress=lambda _: None) -> list[dict]:
    return compile_report(steps, DTYPES, build_step, progress)


def make_values(n: int, bins: int, dtype: str, distribution: str, *, device="cuda", seed=1):
    """Uniform ids in [0, top), or skewed: every value in bin top // 2, where top is bins, or
    for uint8 at most 256 (a byte's values: with 256 bins, every one of them). Out-of-range ids
    come from the op's inputs (spec.reference)."""
    import torch

    torch_dtype = torch.int32 if dtype == "int32" else torch.uint8
    top = min(bins, 256) if dtype == "uint8" else bins
    if distribution == "skewed":
        return torch.full((n,), top // 2, dtype=torch_dtype, device=device)
    if distribution != "uniform":
        raise KernelabError(f"unknown distribution '{distribution}'; use uniform or skewed")
    generator = torch.Generator(device=device)
    generator.manual_seed(seed)
    return torch.randint(0, top, (n,), generator=generator, device=device).to(torch_dtype)


def check_steps(
    steps: list[Step], dtypes=DTYPES, progress: Callable[[str], None] = lambda _: None
) -> list[dict]:
    """Every step against the exact counts (overflow slot included) on the GPU, over sizes,
    bin counts, both distributions and the op's inputs with out-of-range ids."""
    import torch

    from kernelab.spec.primitives import histogram_counts

    rows = []
    for step in steps:
        for dtype in dtypes:
            progress(f"checking {step.name} {dtype}")
            bad = []
            for n in CHECK_N:
                for bins in CHECK_BINS:
                    for distribution in DISTRIBUTIONS:
                        values = make_values(n, bins, dtype, distribution, seed=n + bins)
                        got = histogram(step, values, bins)
                        if not torch.equal(got, histogram_counts(values, bins)):
                            bad.append(f"n={n} bins={bins} {distribution}")
                    values, _ = get_op("histogram").make_inputs(
                        {"n": n, "bins": bins}, dtype, seed=n, device="cuda"
                    )
                    if not torch.equal(histogram(step, values, bins),
                                       histogram_counts(values, bins)):  # fmt: skip
                        bad.append(f"n={n} bins={bins} out-of-range ids")
            torch.cuda.synchronize()
            rows.append({"step": step.name, "dtype": dtype, "ok": not bad, "wrong_at": bad})
    return rows


def cub_anchor():
    """(fn(values, bins) through CuPy's CUB-accelerated bincount, None) or (None, why not)."""
    os.environ.setdefault("CUPY_ACCELERATORS", "cub")
    try:
        import cupy
    except Exception as exc:  # ImportError, or a CuPy built for another CUDA
        return None, f"CUB: not measured (cupy does not import: {type(exc).__name__})"

    def run(values, bins):
        return cupy.bincount(cupy.from_dlpack(values), minlength=bins)

    return run, None


def time_ladder(
    steps: list[Step],
    sizes: list[int],
    bins: int,
    dtype: str,
    *,
    distributions=DISTRIBUTIONS,
    mode: str = "cold",
    max_time_s: float = 2.0,
    progress: Callable[[str], None] = lambda _: None,
) -> tuple[list[dict], list, list[str]]:
    """Every step beside torch.bincount (and CUB where CuPy imports) and the copy ceiling at
    each n and distribution; (rows, records, notes). torch.bincount runs as users call it
    (in-range ids, minlength=bins); the steps also fill the overflow slot."""
    import torch

    spec = get_op("histogram")
    cub, why_no_cub = cub_anchor()
    notes = [why_no_cub] if why_no_cub else []
    if cub is not None:
        try:  # CuPy imports but may not take these values (a CuPy built for another CUDA)
            cub(make_values(33, bins, dtype, "uniform"), bins)
        except Exception as exc:
            cub, notes = None, [f"CUB: not measured (cupy.bincount failed: {type(exc).__name__})"]
    rows, records = [], []
    for n in sizes:
        cost = spec.cost({"n": n, "bins": bins}, dtype)
        for distribution in distributions:
            values = make_values(n, bins, dtype, distribution)
            dst = torch.empty_like(values)
            entries = [(ANCHOR, "torch.bincount(values, minlength=bins)",
                        lambda v=values: torch.bincount(v, minlength=bins))]  # fmt: skip
            if cub is not None:
                entries.append(
                    (CUB, "cupy.bincount, CUB accelerator", lambda v=values: cub(v, bins))
                )
            entries += [
                (s.name, s.technique, lambda s=s, v=values: histogram(s, v, bins)) for s in steps
            ]
            found = timed_rows(
                entries, bytes_moved=cost.bytes, copy=lambda d=dst, v=values: d.copy_(v),
                copy_bytes=2.0 * values.numel() * values.element_size(), anchor=ANCHOR,
                mode=mode, max_time_s=max_time_s,
                progress=lambda text, n=n, d=distribution: progress(f"{text} at n={n} {d}"),
            )  # fmt: skip
            for row in found:
                row["shape"] = {"n": n, "bins": bins}
                row["distribution"] = distribution
                records.append(to_record("histogram", row, dtype, cost))
            rows += [{k: v for k, v in row.items() if k != "timing"} for row in found]
    return rows, records, notes


# --- the launcher ncu runs: each chosen step once --------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kernelab.ladders.histogram.ladder")
    parser.add_argument("--n", type=int, default=1 << 26)
    parser.add_argument("--bins", type=int, default=256)
    parser.add_argument("--dtype", default="int32", choices=DTYPES)
    parser.add_argument("--distribution", default="uniform", choices=DISTRIBUTIONS)
    parser.add_argument("--steps", default=None)
    args = parser.parse_args(argv)
    try:
        import torch

        values = make_values(args.n, args.bins, args.dtype, args.distribution)
        for step in parse_steps(args.steps):
            histogram(step, values, args.bins)
        torch.cuda.synchronize()
    except KernelabError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
