"""Why is the Triton matmul slow at 1024^3 bf16? Every TMA candidate there, side by side.

    PYTHONPATH=src python3 benchmarks/triton_matmul_small.py [--out DIR]

1. 1024^3 bf16 (b K-major, as benchmarks/triton_kernels.py runs it): cuBLAS (torch.mm), the
   autotuned default, then every candidate the tuner may pick at this size, forced one by one
   (large tiles, small tiles, split-K, 256-byte K rows). Each is checked before it is timed.
2. The fixed cost: M = N = 1024 with K from 64 to 4096 for cuBLAS, the session-2 pick
   (64x128, 8 warps, 3 stages) and the split-K candidates; the time at K = 64 is mostly what
   a call costs whatever its K, the slope what each K step costs.
3. 2048^3 bf16: the default against cuBLAS, which must stay where it was (~101 %).

Timer: kernelab.harness.timing.benchmark, cold (L2 flushed before every call), median.
Writes triton_matmul_small.json (rows, the autotuner's choices) under --out (default: $OUT,
else benchmarks/results/<card>/); the table last.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
from pathlib import Path


def describe(config: dict) -> str:
    tile = f"{config['BM']}x{config['BN']}x{config['BK']}"
    extra = " ws" if config.get("WARP_SPECIALIZE") else ""
    extra += " half-epi" if config.get("EPILOGUE_SPLIT") else ""
    extra += f" splitK{config['SPLIT_K']}" if config.get("SPLIT_K", 1) > 1 else ""
    return f"{tile} w{config['num_warps']} s{config['num_stages']}{extra}"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None,
                        help="folder for triton_matmul_small.json (default $OUT, else "
                        "benchmarks/results/<card> in a source checkout, else "
                        "./kernelab-results/<gpu>)")  # fmt: skip
    parser.add_argument("--max-time-s", type=float, default=0.3)
    parser.add_argument("--device", default="cuda", help=argparse.SUPPRESS)  # cpu: a dry run
    args = parser.parse_args(argv)

    import torch

    from kernelab.harness.check import check_implementation
    from kernelab.harness.timing import benchmark
    from kernelab.ops import matmul as mm
    from kernelab.runtime.tuner import sm_count

    device = torch.device(args.device)
    programs = sm_count(device)
    rows: list[dict] = []

    def kmajor(fn):
        return lambda a, b: fn(a, b.T.contiguous().T)

    def run(case, label, fn, m, n, k, *, check=True, config=None):
        row = {"case": case, "label": label, "m": m, "n": n, "k": k, "config": config}
        try:
            if check:
                report = check_implementation(
                    kmajor(fn),
                    "gemm",
                    {"m": m, "n": n, "k": k},
                    "bf16",
                    trials=1,
                    device=args.device,
                )
                row["check"] = "ok" if report.ok else f"WRONG: {report.message}"
                if not report.ok:
                    rows.append(row)
                    return row
            a = torch.randn(m, k, device=device, dtype=torch.bfloat16)
            b = torch.randn(n, k, device=device, dtype=torch.bfloat16).T  # K-major
            timing = benchmark(lambda: fn(a, b), mode="cold", max_time_s=args.max_time_s)
            row.update(
                median_us=1e3 * timing.median_ms,
                p20_us=1e3 * timing.p20_ms,
                p80_us=1e3 * timing.p80_ms,
                tflops=2 * m * n * k / (timing.median_ms * 1e-3) / 1e12,
                samples=len(timing.samples_ms),
                throttled=timing.throttled,
            )
        except Exception as exc:  # a candidate that fails to build or run is a result too
            row["error"] = f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0][:200]}"
        rows.append(row)
        print(f"{case:>10} {label:<34} {row.get('median_us', float('nan')):8.2f} us", flush=True)
        return row

    def cublas(a, b):
        return torch.mm(a, b)

    def forced(config):
        return functools.partial(mm.matmul, path="tma", config=config)

    size = 1024
    run("1024^3", "cuBLAS torch.mm", cublas, size, size, size, check=False)
    run("1024^3", "triton default (autotuned)", mm.matmul, size, size, size)
    candidates = mm.candidates_for(size, size, programs, mm.tma_candidates(2))
    for config in candidates:
        run("1024^3", describe(config), forced(config), size, size, size, config=config)

    session2_pick = next(
        c for c in candidates if describe(c) == "64x128x64 w8 s3"
    )  # the tuner's pick in the 18:05 UTC run
    sweep = [("session-2 pick " + describe(session2_pick), forced(session2_pick))]
    sweep += [(describe(c), forced(c)) for c in candidates if c["SPLIT_K"] > 1]
    for k in (64, 256, 1024, 4096):
        run(f"K={k}", "cuBLAS torch.mm", cublas, size, size, k, check=False)
        for label, fn in sweep:
            run(f"K={k}", label, fn, size, size, k, check=k != size)

    run("2048^3", "cuBLAS torch.mm", cublas, 2048, 2048, 2048, check=False)
    run("2048^3", "triton default (autotuned)", mm.matmul, 2048, 2048, 2048)

    if args.out is None:
        from kernelab.harness.ceilings import this_gpu
        from kernelab.harness.records import default_results_dir

        args.out = default_results_dir(
            this_gpu("triton_matmul_small.py").key if device.type == "cuda" else None
        )
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "triton_matmul_small.json"
    versions = {"torch": torch.__version__, "triton": __import__("triton").__version__}
    document = {
        "gpu": torch.cuda.get_device_name() if device.type == "cuda" else "cpu (dry run)",
        "timer": "kernelab.harness.timing.benchmark (cold: L2 flushed, median)",
        "versions": versions,
        "rows": rows,
        "tuned_choices": mm.tuned_choices(),
    }
    path.write_text(json.dumps(document, indent=1))
    print_table(rows)
    print(f"wrote {path}", file=sys.stderr)
    return 0


def print_table(rows: list[dict]) -> None:
    reference = {r["case"]: r.get("median_us") for r in rows if r["label"] == "cuBLAS torch.mm"}
    print(f"\n{'case':>8} {'kernel':<34} {'us':>7} {'TFLOP/s':>8} {'% cuBLAS':>8}  check")
    for r in rows:
        us = r.get("median_us")
        base = reference.get(r["case"])
        pct = f"{100 * base / us:7.1f}" if us and base else "      -"
        rate = f"{r['tflops']:8.1f}" if us else "       -"
        status = r.get("error") or r.get("check", "")
        shown = f"{us:7.2f}" if us else "      -"
        print(f"{r['case']:>8} {r['label']:<34} {shown} {rate} {pct}  {status}")


if __name__ == "__main__":
    raise SystemExit(main())
