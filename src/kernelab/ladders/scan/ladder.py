"""Run the scan ladder: the compile report (no GPU), checks of every step (int32 and
integer-valued fp32 exact, N(0, 1) + 1 fp32 within op scan's tolerance, inclusive and
exclusive), and timing beside torch.cumsum, CUB (through cuda.compute or CuPy, where one
imports) and a copy of the same bytes in the same run. The timing engine is the transpose
ladder's (transpose/ladder.py: timed_rows, to_record).

The ceiling: a scan reads n x 4 bytes and writes n x 4, exactly a copy's traffic, so
dst.copy_(x) over the same bytes is measured beside it and "% of copy" compares two timings
of one run on one GPU. The issue's target for step 4: >= 90 % of the copy at >= 2^26
elements, at least torch.cumsum's speed, within 5 % of CUB.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable

from kernelab.errors import KernelabError
from kernelab.ladders.engine import timed_rows, to_record
from kernelab.ladders.scan.launch import build_step, scan
from kernelab.ladders.scan.steps import DTYPES, ITEM_CANDIDATES, Step, parse_steps
from kernelab.spec.primitives import scan_tolerance
from kernelab.spec.reference import get_op

__all__ = [
    "check_steps", "compile_scan", "cub_anchor", "parse_steps", "profile_steps", "step_totals",
    "time_ladder",
]  # fmt: skip

ANCHOR = "torch.cumsum"
CUB = "cub"  # the anchor's implementation name in records, as the reduction ladder's
NO_CUB = "CUB: not measured (neither cuda.compute nor cupy imports; pip install 'kernelab[cub]')"
# Awkward sizes (1, around a warp, around a tile of 2048, a prime, several levels of step
# 1's recursion) and one past 2^22, where step 3's tile-sum scan loops over chunks.
CHECK_N = (1, 2, 31, 33, 1023, 1025, 2047, 2049, 100003, 1 << 20, (1 << 22) + 3)


def compile_scan(steps, progress: Callable[[str], None] = lambda _: None) -> list[dict]:
    """What ptxas says about every kernel of each step, per dtype: registers, shared memory,
    spills. Needs nvcc (or a warm cache), no GPU."""
    rows = []
    for step in steps:
        progress(f"compiling {step.name} ({step.file})")
        built = build_step(step)
        for dtype in DTYPES:
            for kernel in step.kernels:
                report = built.report(step.kernel_for(dtype, kernel))
                rows.append(
                    {
                        "step": step.name,
                        "kernel": kernel,
                        "dtype": dtype,
                        "technique": step.technique,
                        "proof": step.proof,
                        "arch": built.arch,
                        "registers": report.registers,
                        "static_smem_bytes": report.shared_bytes,
                        "spill_store_bytes": report.spill_store_bytes,
                        "spill_load_bytes": report.spill_load_bytes,
                        "cubin": str(built.cubin),
                    }
                )
    return rows


def integral_fp32(n: int, *, device="cuda", seed: int = 1):
    """fp32 small integers in [-8, 8]: every prefix of up to 2^20 of them is below 2^24 and
    exact in fp32, so any order of adds gives the reference bit for bit."""
    import torch

    generator = torch.Generator(device=device)
    generator.manual_seed(seed)
    return torch.randint(-8, 9, (n,), generator=generator, device=device).to(torch.float32)


def check_one(step: Step, x, exclusive: bool, items: int | None = None) -> bool:
    """One call against the reference: exact for int32 and integer-valued fp32 (prefixes
    below 2^24), else within op scan's relative norm bound."""
    import torch

    got = scan(step, x, exclusive, items=items)
    ref = get_op("scan").reference(x, exclusive)
    if x.dtype == torch.int32:
        return bool(torch.equal(got, ref))
    exact = bool((x == x.round()).all()) and float(x.abs().sum()) < 2**24
    if exact:
        return bool(torch.equal(got.double(), ref))
    error = float((got.double() - ref).norm() / ref.norm().clamp_min(1e-300))
    return error <= scan_tolerance(x.numel(), "fp32")


def check_steps(
    steps: list[Step], dtypes=DTYPES, progress: Callable[[str], None] = lambda _: None
) -> list[dict]:
    """Every step on the GPU at CHECK_N, inclusive and exclusive, against the reference."""
    import torch

    spec = get_op("scan")
    rows = []
    for step in steps:
        for dtype in dtypes:
            progress(f"checking {step.name} {dtype}")
            bad = []
            for n in CHECK_N:
                inputs = [spec.make_inputs({"n": n}, dtype, seed=n, device="cuda")[0]]
                if dtype == "fp32" and n <= 1 << 20:
                    inputs.append(integral_fp32(n, seed=n))
                for x in inputs:
                    for exclusive in (False, True):
                        if not check_one(step, x, exclusive):
                            kind = "exclusive" if exclusive else "inclusive"
                            bad.append(f"n={n} {kind}")
            torch.cuda.synchronize()
            rows.append({"step": step.name, "dtype": dtype, "ok": not bad, "wrong_at": bad})
    return rows


def cub_anchor(dtype: str):
    """(fn(x) -> inclusive prefix sums through CUB, what it is) or (None, why not).

    cuda.compute (cuda-cccl) first: its scan object is built once per input and its
    temporary storage allocated once, so the timed call is the scan alone. Then CuPy's
    cumsum with the CUB accelerator. Each is probed on 33 elements before it is trusted.
    """
    import torch

    probe = torch.arange(1, 34, device="cuda").to(torch.float32 if dtype == "fp32" else torch.int32)
    want = torch.cumsum(probe, 0, dtype=probe.dtype)
    failures = []
    for make in (_cuda_compute_scan, _cupy_scan):
        try:
            fn, what = make(dtype)
        except ImportError:
            continue
        except Exception as exc:  # a build for another CUDA, an API of another version
            failures.append(f"{make.__name__} failed: {type(exc).__name__}")
            continue
        try:
            if torch.equal(fn(probe), want):
                return fn, what
            failures.append(f"{what} gave a wrong answer on 33 elements")
        except Exception as exc:
            failures.append(f"{what} failed: {type(exc).__name__}")
    if failures:
        return None, f"CUB: not measured ({'; '.join(failures)})"
    return None, NO_CUB


def _cuda_compute_scan(dtype: str):
    import cuda.compute as cuda_compute
    import numpy as np
    import torch

    init = np.zeros(1, dtype=np.float32 if dtype == "fp32" else np.int32)
    prepared: dict = {}

    def cub_scan(x):
        out = torch.empty_like(x)
        key = (x.numel(), x.dtype)
        if key not in prepared:
            scanner = cuda_compute.make_inclusive_scan(x, out, cuda_compute.OpKind.PLUS, init)
            size = scanner(None, x, out, x.numel(), init)
            prepared[key] = (scanner, torch.empty(max(size, 1), dtype=torch.uint8, device=x.device))
        scanner, temp = prepared[key]
        scanner(temp, x, out, x.numel(), init)
        return out

    return cub_scan, "CUB DeviceScan through cuda.compute.make_inclusive_scan"


def _cupy_scan(dtype: str):
    os.environ.setdefault("CUPY_ACCELERATORS", "cub")
    import cupy

    def cupy_scan(x):
        import torch

        array = cupy.from_dlpack(x)
        return torch.from_dlpack(cupy.cumsum(array, dtype=array.dtype))

    return cupy_scan, "CUB through CuPy's cumsum (CUPY_ACCELERATORS=cub)"


def time_ladder(
    steps: list[Step],
    sizes: list[int],
    dtype: str,
    *,
    mode: str = "cold",
    max_time_s: float = 2.0,
    progress: Callable[[str], None] = lambda _: None,
    do_bench: Callable | bool | None = None,
    host_cost: Callable | bool | None = None,
    candidates: bool = False,
) -> tuple[list[dict], list, list[str]]:
    """Inclusive scans: every step beside torch.cumsum (and CUB where it imports) and the copy
    ceiling at each n; (rows, records, notes). Each row (and its record's extra) carries,
    beside the harness's median, the do_bench median and the host cost per call
    (engine.timed_rows; do_bench, host_cost: None for the real ones, False to leave one
    out). `candidates`: a tunable step (step 5) is also timed at every other
    ITEM_CANDIDATES value, as rows named like "scan:05 items=24"."""
    import torch

    spec = get_op("scan")
    cub, what = cub_anchor(dtype)
    notes = [f"CUB: {what}"] if cub is not None else [what]
    rows, records = [], []
    for n in sizes:
        (x, _) = spec.make_inputs({"n": n}, dtype, seed=1, device="cuda")
        dst = torch.empty_like(x)
        cost = spec.cost({"n": n}, dtype)
        entries = [(ANCHOR, "torch.cumsum(x, 0, dtype=x.dtype)",
                    lambda x=x: torch.cumsum(x, 0, dtype=x.dtype))]  # fmt: skip
        if cub is not None:
            entries.append((CUB, what, lambda x=x: cub(x)))
        entries += [(s.name, s.technique, lambda s=s, x=x: scan(s, x)) for s in steps]
        if candidates:
            entries += candidate_entries(steps, x)
        found = timed_rows(
            entries, bytes_moved=cost.bytes, copy=lambda d=dst, x=x: d.copy_(x),
            copy_bytes=cost.bytes, anchor=ANCHOR, mode=mode, max_time_s=max_time_s,
            progress=lambda text, n=n: progress(f"{text} at n={n} {dtype}"),
            do_bench=do_bench, host_cost=host_cost,
        )  # fmt: skip
        cub_row = next((r for r in found if r["step"] == CUB), None)
        for row in found:
            row["shape"] = {"n": n}
            row["speedup_vs_cub"] = (
                cub_row["median_ms"] / row["median_ms"]
                if cub_row is not None and row["step"] != "copy"
                else None
            )
            records.append(to_record("scan", row, dtype, cost))
        rows += [{k: v for k, v in row.items() if k != "timing"} for row in found]
    return rows, records, notes


def candidate_entries(steps: list[Step], x) -> list[tuple]:
    """(name, technique, fn) for each tunable step at every ITEM_CANDIDATES value other than
    the one its source is written with: the tile choice, timed beside the ladder."""
    entries = []
    for step in steps:
        if not step.items_define:
            continue
        for items in ITEM_CANDIDATES:
            if step.tile_for(items) == step.tile:
                continue
            what = f"{step.technique}; {items} elements a thread"
            entries.append((f"{step.name} items={items}", what,
                            lambda s=step, x=x, k=items: scan(s, x, items=k)))  # fmt: skip
    return entries


# --- profiling: every step's proof metric under Nsight Compute -------------------------------


def step_totals(steps, kernels, dtype: str, metrics) -> list[dict]:
    """Per step, each metric summed over every profiled launch of the step's kernels for
    `dtype` (a step is all its launches: step 1's levels, step 3's three kernels), None where
    none of them was profiled or a launch lacks the metric; its proof's verdict against the
    step before (transpose.ladder.verdict)."""
    from kernelab.ladders.engine import verdict

    rows, previous = [], None
    for step in steps:
        names = {step.kernel_for(dtype, kernel) for kernel in step.kernels}
        launches = [k for k in kernels if k.name in names]
        values = {}
        for metric in metrics:
            found = [k.metric(metric) for k in launches]
            values[metric] = sum(found) if found and None not in found else None
        value = values[step.proof]
        before = previous.get(step.proof) if previous else None
        rows.append(
            {
                "step": step.name, "proof": step.proof, "value": value, "previous": before,
                "direction": step.direction, "verdict": verdict(step.direction, before, value),
                "launches": len(launches), "metrics": values,
            }
        )  # fmt: skip
        previous = values
    return rows


def profile_steps(
    steps: list[Step], n: int, dtype: str, progress: Callable[[str], None] = lambda _: None
) -> list[dict]:
    """One ncu run over a child that scans once with each chosen step (inclusive)."""
    import tempfile
    from pathlib import Path

    from kernelab.profiling.ncu import run_ncu
    from kernelab.profiling.report import load

    metrics = sorted({s.proof for s in steps})
    out = Path(tempfile.mkdtemp(prefix="kernelab-scan-")) / "ladder"
    command = [sys.executable, "-m", "kernelab.ladders.scan.ladder", "--n", str(n),
               "--dtype", dtype, "--steps", ",".join(str(s.number) for s in steps)]  # fmt: skip
    progress(f"profiling {len(steps)} steps under ncu")
    report, _, _ = run_ncu(
        command, out_path=out, kernel_regex="^scan_", launch_count=None, sections=(),
        metrics=metrics, timeout_s=900,
    )  # fmt: skip
    rows = step_totals(steps, load(report), dtype, metrics)
    for row in rows:
        row["report"] = str(report)
    return rows


# --- a launcher (ncu, nsys): each chosen step once -------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kernelab.ladders.scan.ladder")
    parser.add_argument("--n", type=int, default=1 << 26)
    parser.add_argument("--dtype", default="fp32", choices=DTYPES)
    parser.add_argument("--exclusive", action="store_true")
    parser.add_argument("--steps", default=None)
    parser.add_argument(
        "--time-candidates",
        action="store_true",
        help="time every step and step 5's tile candidates (no launcher run)",
    )
    args = parser.parse_args(argv)
    if args.time_candidates:
        return _time_candidates(args)
    try:
        import torch

        (x, _) = get_op("scan").make_inputs({"n": args.n}, args.dtype, seed=1, device="cuda")
        for step in parse_steps(args.steps):
            scan(step, x, args.exclusive)
        torch.cuda.synchronize()
    except KernelabError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


def _time_candidates(args) -> int:
    """Each chosen step and step 5's tile candidates beside the copy, torch and CUB at one n,
    checked first: one device call settles the open tile choice."""
    try:
        steps = parse_steps(args.steps)
        for row in check_steps(steps, (args.dtype,)):
            if not row["ok"]:
                print(f"error: {row['step']} {args.dtype} wrong at {row['wrong_at']}")
                return 1
        spec = get_op("scan")
        for step in (s for s in steps if s.items_define):
            for items in ITEM_CANDIDATES:
                for n in CHECK_N:
                    x = spec.make_inputs({"n": n}, args.dtype, seed=n, device="cuda")[0]
                    if not check_one(step, x, False, items):
                        print(f"error: {step.name} items={items} {args.dtype} wrong at n={n}")
                        return 1
        rows, _, notes = time_ladder(steps, [args.n], args.dtype, candidates=True)
    except KernelabError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for row in rows:
        pct = row.get("pct_of_copy")
        print(f"{row['step']:<24} {row['median_ms']:.4f} ms  "
              f"{'' if pct is None else f'{pct:5.1f} % of copy'}")  # fmt: skip
    for note in notes:
        print(note)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
