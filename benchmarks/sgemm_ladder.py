"""The SGEMM ladder on a real GPU: correctness at awkward shapes, tile search, timing.

    PYTHONPATH=src python3 benchmarks/sgemm_ladder.py --out "$OUT"            # everything
    PYTHONPATH=src python3 benchmarks/sgemm_ladder.py --prebuild             # no GPU: compile
    PYTHONPATH=src python3 benchmarks/sgemm_ladder.py --tune --sizes 4096    # + tile search

1. Correctness of every step at (1,1,1), (127,257,31), (1000,1000,1000), (4097,33,129),
   (64,64,1), (2048,2048,2048), plus strided views: A with lda = K + 1 (rows not 16-byte
   aligned), B offset by one float, C a view with ldc = N + 2, alpha = 0.5, beta = -2.
   A step that fails anywhere is not timed.
2. With --tune: every tile candidate of the tunable steps (8 and 11) at a large and a small
   shape; prints the winners and writes tuned_h200.json into --out (copy it next to
   src/kernelab/ladders/sgemm/steps.py to commit the H200's winners).
3. Timing of cuBLAS fp32 (TF32 off) and every step at each size, in this one process, with
   kernelab.harness.timing (cold L2) or, if that module is missing, a torch.cuda.Event timer
   that flushes L2 before each call (labelled "fallback timer" in the output).
The table comes last; records.json, summary.json (and ladder.png) go to --out
(default: $OUT, else benchmarks/results/h200).

Without nvcc on the GPU machine, build here first (--prebuild with KERNELAB_CACHE pointing
into the working tree) and carry that cache directory along.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT / "src") not in sys.path:
    sys.path.insert(0, str(ROOT / "src"))

from kernelab.ladders.sgemm import STEPS, build_step, sgemm  # noqa: E402
from kernelab.ladders.sgemm.ladder import parse_steps  # noqa: E402

CHECK_SHAPES = [
    (1, 1, 1),
    (127, 257, 31),
    (1000, 1000, 1000),
    (4097, 33, 129),
    (64, 64, 1),
    (2048, 2048, 2048),
]
TUNE_SHAPES = [(4096, 4096, 4096), (1024, 1024, 1024)]  # a "large" and a "small" class


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def tolerance(k: int) -> float:
    # fp32 accumulation of k products, relative to sum |a||b|: about k * 2^-24 at worst.
    return 4 * k * 2.0**-24


def relative_error(out, ref64, scale64) -> float:
    import torch

    if not torch.isfinite(out).all():
        return float("inf")
    return ((out.double() - ref64).abs() / (scale64 + 1e-30)).max().item()


def check_step(step, shapes) -> list[dict]:
    import torch

    results = []
    for m, n, k in shapes:
        a = torch.randn(m, k, device="cuda")
        b = torch.randn(k, n, device="cuda")
        out = sgemm(step, a, b)
        error = relative_error(out, a.double() @ b.double(), a.abs().double() @ b.abs().double())
        results.append({"shape": [m, n, k], "error": error, "ok": error <= tolerance(k)})
    # Strided views: lda = K + 1 (unaligned rows), B offset by 4 bytes, C with ldc = N + 2.
    m, n, k = 300, 129, 77
    a = torch.randn(m, k + 1, device="cuda")[:, :k]
    b = torch.randn(k, n + 1, device="cuda")[:, 1:]
    c_full = torch.randn(m, n + 2, device="cuda")
    c = c_full[:, :n]
    c0, pad0 = c.clone(), c_full[:, n:].clone()
    sgemm(step, a, b, out=c, alpha=0.5, beta=-2.0)
    ref = 0.5 * (a.double() @ b.double()) - 2.0 * c0.double()
    scale = 0.5 * (a.abs().double() @ b.abs().double()) + 2.0 * c0.abs().double()
    error = relative_error(c, ref, scale)
    untouched = torch.equal(c_full[:, n:], pad0)
    results.append(
        {"shape": [m, n, k], "views": "lda=K+1, ldb=N+1 offset 1, ldc=N+2, alpha/beta",
         "error": error, "ok": error <= tolerance(k) and untouched}
    )  # fmt: skip
    torch.cuda.synchronize()
    return results


def make_timer(max_time_s: float):
    """(timer(fn, min_samples) -> object with median_ms, rel_noise, mode, ...), label)."""
    try:
        from kernelab.harness.timing import benchmark
    except ImportError:
        return fallback_timer(max_time_s), "fallback timer (torch.cuda.Event, L2 flushed)"

    def timer(fn, min_samples):
        return benchmark(fn, mode="cold", min_samples=min_samples, max_time_s=max_time_s)

    return timer, "kernelab.harness.timing (cold L2)"


def fallback_timer(max_time_s: float):
    import statistics
    from types import SimpleNamespace

    import torch

    flush = torch.empty(256 * 1024 * 1024, dtype=torch.uint8, device="cuda")  # > 60 MiB L2

    def timer(fn, min_samples):
        fn()
        torch.cuda.synchronize()
        samples, start = [], time.perf_counter()
        while len(samples) < min_samples or (
            time.perf_counter() - start < max_time_s and len(samples) < 50
        ):
            flush.zero_()
            begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            begin.record()
            fn()
            end.record()
            end.synchronize()
            samples.append(begin.elapsed_time(end))
            if time.perf_counter() - start > 4 * max_time_s:
                break
        median = statistics.median(samples)
        q = statistics.quantiles(samples, n=5) if len(samples) > 1 else [median] * 4
        return SimpleNamespace(
            median_ms=median, rel_noise=(q[3] - q[0]) / median, mode="cold-fallback",
            samples_ms=samples, clocks={}, throttled=False, warnings=["fallback timer"],
        )  # fmt: skip

    return timer


def tune(steps, max_time_s: float, out_dir: Path) -> dict:
    from kernelab.ladders.sgemm.ladder import tune as tune_step

    timer, _ = make_timer(max_time_s)
    winners: dict = {}
    report = []
    for step in (s for s in steps if s.tunable):
        for m, n, k in TUNE_SHAPES:
            log(f"tuning {step.name} at {m}x{n}x{k}: {len(step.candidates)} candidates")

            def check(f, step=step):
                return all(r["ok"] for r in _check_fn(f, [(127, 257, 31), (300, 130, 70)]))

            result = tune_step(
                step, m, n, k, time_ms=lambda fn: timer(fn, 10).median_ms, check=check
            )
            for r in result["results"]:
                log(
                    f"  {r['defines']}: "
                    + (f"{r['gflops']:,.0f} GFLOP/s" if r["ms"] else "REJECTED (wrong answer)")
                )
            log(f"  winner ({result['shape_class']}): {result['winner']}")
            winners.setdefault(f"{step.number:02d}", {})[result["shape_class"]] = {
                "defines": result["winner"], "shape": [m, n, k],
                "gflops": max(r["gflops"] or 0 for r in result["results"]),
            }  # fmt: skip
            report.append({"step": step.name, "shape": [m, n, k], **result})
    if winners:
        committed = {
            "gpu": report[0]["gpu"],
            "measured": True,
            "source": f"benchmarks/sgemm_ladder.py --tune, {time.strftime('%Y-%m-%d')}",
            "winners": winners,
        }
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "tuned_h200.json").write_text(json.dumps(committed, indent=2) + "\n")
    return {"winners": winners, "runs": report}


def _check_fn(f, shapes) -> list[dict]:
    import torch

    results = []
    for m, n, k in shapes:
        a = torch.randn(m, k + 1, device="cuda")[:, :k]
        b = torch.randn(k, n, device="cuda")
        out = f(a, b)
        error = relative_error(out, a.double() @ b.double(), a.abs().double() @ b.abs().double())
        results.append({"shape": [m, n, k], "ok": error <= tolerance(k), "error": error})
    return results


def print_table(rows, sizes, timer_label: str) -> None:
    print(f"\nSGEMM fp32 ladder, {timer_label}")
    print("GFLOP/s | % of cuBLAS | speedup over the previous step (expected)")
    print("step      " + "".join(f"{s:>30}" for s in sizes))
    for name in ["cuBLAS"] + [s.name for s in STEPS]:
        cells = []
        for size in sizes:
            r = next((r for r in rows if r["step"] == name and r["size"] == size), None)
            if r is None:
                cells.append(f"{'-':>30}")
                continue
            speed = ""
            if r["speedup_vs_prev"] is not None:
                speed = f"{r['speedup_vs_prev']:.2f}x ({r['expected_speedup']:.2f})"
            cells.append(f"{r['gflops']:>9,.0f} {r['pct_of_cublas']:5.1f}% {speed:>14}")
        if any(c.strip() != "-" for c in cells):
            print(f"{name:<10}" + "".join(cells))


def save(out_dir: Path, summary: dict, records) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=2, default=str) + "\n")
    if records:
        from kernelab.harness.records import save_records

        save_records(records, out_dir / "records.json")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out", type=Path, default=Path(os.environ.get("OUT", ROOT / "benchmarks/results/h200"))
    )
    parser.add_argument("--sizes", default="1024,2048,4096,8192")
    parser.add_argument("--steps", default=None, help='e.g. "1-11" or "6,10,11"')
    parser.add_argument(
        "--max-time", type=float, default=1.5, help="seconds of timing per step and size"
    )
    parser.add_argument(
        "--tune", action="store_true", help="time the tile candidates of steps 8 and 11"
    )
    parser.add_argument("--no-time", action="store_true", help="check only")
    parser.add_argument("--all-sizes", action="store_true", help="also time steps 1-3 above 4096")
    parser.add_argument(
        "--prebuild", action="store_true", help="compile every step and candidate, then stop"
    )
    args = parser.parse_args()
    steps = parse_steps(args.steps)
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]

    log("compiling (cached after the first run)")
    for step in steps:
        for defines in step.candidates or [None]:
            built = build_step(step, defines)
            r = built.report(step.kernel)
            log(
                f"  {step.name} {defines or ''}: {r.registers} regs, {r.spill_store_bytes + r.spill_load_bytes} spill bytes"
            )
    if args.prebuild:
        return 0

    import torch

    if not torch.cuda.is_available():
        log("no CUDA GPU: stopping after the compile step")
        return 2
    summary: dict = {
        "gpu": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "sizes": sizes,
    }

    log("checking every step")
    checks = {}
    for step in steps:
        results = check_step(step, CHECK_SHAPES)
        checks[step.name] = results
        bad = [r for r in results if not r["ok"]]
        log(f"  {step.name}: " + ("ok" if not bad else f"WRONG at {[r['shape'] for r in bad]}"))
    summary["checks"] = checks
    good = [s for s in steps if all(r["ok"] for r in checks[s.name])]

    if args.tune:
        summary["tuning"] = tune(good, args.max_time, args.out)
        for number, classes in summary["tuning"]["winners"].items():
            print(
                f"tuned step {number}: "
                + "; ".join(f"{c}: {w['defines']}" for c, w in classes.items())
            )

    records = []
    if not args.no_time:
        from kernelab.ladders.sgemm.ladder import plot, time_ladder

        timer, label = make_timer(args.max_time)
        skip = None if args.all_sizes else 4096
        rows, records = time_ladder(good, sizes, timer=timer, skip_slow_above=skip, progress=log)
        summary["timing"] = {"timer": label, "rows": rows}
        save(args.out, summary, records)
        try:
            plot(rows, args.out / "ladder.png")
        except Exception as exc:  # the chart is a convenience; never lose the numbers for it
            log(f"no chart: {exc}")
        print_table(rows, sizes, label)
    else:
        save(args.out, summary, records)
    failed = [name for name, results in checks.items() if not all(r["ok"] for r in results)]
    if failed:
        print(f"WRONG ANSWERS: {', '.join(failed)}")
    print(f"written to {args.out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
