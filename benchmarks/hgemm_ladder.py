"""The Hopper bf16 GEMM ladder on a real GPU: check every step, then time it beside cuBLAS.

    PYTHONPATH=src python3 benchmarks/hgemm_ladder.py --out "$OUT"        # the default set
    PYTHONPATH=src python3 benchmarks/hgemm_ladder.py --steps all         # every step
    PYTHONPATH=src python3 benchmarks/hgemm_ladder.py --steps 03,04,05    # a subset
    PYTHONPATH=src python3 benchmarks/hgemm_ladder.py --no-time           # correctness only
    PYTHONPATH=src python3 benchmarks/hgemm_ladder.py --prebuild          # no GPU: compile

1. Compile report: registers, shared memory, spills and the SASS claims of every step.
2. Correctness of every step through the registry and kernelab.harness.check at the
   hgemm.CHECK_SHAPES (the awkward shapes tests/test_hgemm.py uses too), bf16. A step that is
   wrong anywhere (or crashes) is reported and not timed; later steps still run.
3. Timing, in this one process, of cuBLAS bf16 (torch.mm), every correct step, and the B
   transpose the launcher performs for steps 02-03 (so it can be told apart; timed only when
   one of them is selected), at each size, in
   the cold (L2 flushed) and graph (back-to-back, CUDA-graph replay) modes of
   kernelab.harness.timing. "% of cuBLAS" compares times in the same mode.
records.json (one Record per timing) and summary.json (compile report, checks, rows) go to
--out (default: $OUT, else benchmarks/results/h200/hgemm). Exit status 1 if any step is wrong.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT / "src") not in sys.path:
    sys.path.insert(0, str(ROOT / "src"))

from kernelab.errors import KernelabError  # noqa: E402
from kernelab.kernels.cuda.hgemm import (  # noqa: E402
    CHECK_SHAPES,
    DEFAULT_BENCHMARK_STEPS,
    STEPS,
    build_step,
    get_step,
    transposed_rows,
)

CUBLAS = "torch.mm"
TRANSPOSE = "hgemm:transpose_b"  # the launcher's B -> B^T copy on its own


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def compile_report(steps) -> list[dict]:
    from kernelab.kernels.cuda.sass import find_tool, has, opcode_counts

    rows = []
    for step in steps:
        built = build_step(step)
        report = built.report(step.kernel)
        counts = opcode_counts(built.cubin, step.kernel) if find_tool("cuobjdump") else {}
        claims = {claim: has(counts, claim) for claim in step.sass_claims} if counts else {}
        rows.append(
            {"step": step.name, "registers": report.registers, "spills": report.spills,
             "dynamic_smem_bytes": step.launch(4096, 4096, 4096).shared_bytes,
             "sass_claims": claims, "cubin": str(built.cubin)}
        )  # fmt: skip
        log(f"  {step.name}: {report.registers} regs, spills={report.spills}, claims {claims}")
    return rows


def check_steps(steps) -> dict[str, list[dict]]:
    from kernelab.harness.check import check_implementation
    from kernelab.kernels.registry import get

    checks: dict[str, list[dict]] = {}
    for step in steps:
        fn = get(step.name).build()
        results = []
        for m, n, k in CHECK_SHAPES:
            shape = {"m": m, "n": n, "k": k}
            try:
                report = check_implementation(fn, "gemm", shape, "bf16", trials=2)
                results.append({"shape": shape, **report.to_dict()})
            except Exception as exc:  # a launch error or fault: record it, keep going
                results.append({"shape": shape, "ok": False, "message": f"{exc!r}"[:300]})
                log(traceback.format_exc(limit=3))
                _reset_after_fault()
        checks[step.name] = results
        bad = [r["shape"] for r in results if not r["ok"]]
        log(f"  {step.name}: " + ("ok" if not bad else f"WRONG at {bad}"))
    return checks


def _reset_after_fault() -> None:
    """After an illegal-address fault the CUDA context is unusable; say so plainly."""
    import torch

    try:
        torch.cuda.synchronize()
    except Exception as exc:
        log(f"the CUDA context is broken ({exc!r:.120}); later results are unreliable")


def persistent_grids(steps, sizes) -> dict[str, dict[int, int]]:
    """Blocks launched by each persistent step at each size: the SM count, or for a cluster
    step cluster size x the clusters the driver says fit at once (idle SMs show here)."""
    import torch

    from kernelab.kernels.cuda.hgemm import persistent_launch

    grids = {}
    for step in (s for s in steps if s.persistent):
        built = build_step(step)
        grids[step.name] = {
            size: persistent_launch(step, built, size, size, size, torch.device("cuda")).grid[0]
            for size in sizes
        }
        log(f"  {step.name}: grid {grids[step.name]} (cluster {step.cluster})")
    return grids


def time_ladder(steps, sizes: list[int], modes: list[str], max_time_s: float):
    import torch

    from kernelab.environment import software_versions
    from kernelab.harness.ceilings import this_gpu
    from kernelab.harness.timing import benchmark
    from kernelab.kernels.reference import get_op
    from kernelab.kernels.registry import get

    identity, versions = this_gpu("hgemm ladder"), software_versions()
    candidates = [(CUBLAS, get(CUBLAS).build())] + [(s.name, get(s.name).build()) for s in steps]
    rows, records = [], []
    for size in sizes:
        a = torch.randn(size, size, device="cuda").to(torch.bfloat16)
        b = torch.randn(size, size, device="cuda").to(torch.bfloat16)
        cost = get_op("gemm").cost({"m": size, "n": size, "k": size}, "bf16")
        timed = list(candidates)
        if any(s.b_layout == "nk" for s in steps):
            timed.append((TRANSPOSE, lambda a, b: transposed_rows(b)))
        for mode in modes:
            cublas_ms = None
            for name, fn in timed:
                log(f"timing {name} at {size}^3, {mode}")
                timing = benchmark(
                    lambda fn=fn, a=a, b=b: fn(a, b),
                    mode=mode,
                    min_samples=10,
                    max_time_s=max_time_s,
                )
                cublas_ms = timing.median_ms if name == CUBLAS else cublas_ms
                row = {
                    "impl": name, "size": size, "mode": timing.mode, "median_ms": timing.median_ms,
                    "tflops": cost.flops / (timing.median_ms * 1e-3) / 1e12,
                    "pct_of_cublas": 100.0 * cublas_ms / timing.median_ms,
                    "rel_noise": timing.rel_noise, "throttled": timing.throttled,
                }  # fmt: skip
                if name == TRANSPOSE:  # its own traffic: read and write K * N bf16
                    row["tflops"], row["gbps"] = None, 4 * size * size / (timing.median_ms * 1e6)
                rows.append(row)
                records.append(_record(name, size, timing, cost, identity, versions, row))
    return rows, records


def _record(name, size, timing, cost, identity, versions, row):
    from kernelab.harness.records import Record

    is_gemm = name != TRANSPOSE
    return Record(
        op="gemm" if is_gemm else "transpose",
        implementation=name,
        shape={"m": size, "n": size, "k": size},
        dtype="bf16",
        mode=timing.mode,
        samples_ms=list(timing.samples_ms),
        stats=timing.summary.to_dict(),
        gpu=identity.name,
        gpu_id=identity.gpu_id,
        driver=identity.driver,
        versions=versions,
        clocks=dict(timing.clocks),
        flops=cost.flops if is_gemm else 0.0,
        bytes=cost.bytes if is_gemm else 4.0 * size * size,
        achieved_tflops=row["tflops"],
        warnings=list(timing.warnings),
        extra={"ladder": "hgemm", "pct_of_cublas": row["pct_of_cublas"]},
    )


def print_table(rows, sizes, modes) -> None:
    names = list(dict.fromkeys(r["impl"] for r in rows))
    for mode in modes:
        print(f"\nbf16 GEMM ladder, {mode} mode: TFLOP/s (% of cuBLAS in the same mode)")
        print(f"{'':<20}" + "".join(f"{s:>22}" for s in sizes))
        for name in names:
            cells = []
            for size in sizes:
                r = next(
                    (r for r in rows if (r["impl"], r["size"]) == (name, size) and _mode(r, mode)),
                    None,
                )
                if r is None:
                    cells.append(f"{'-':>22}")
                elif r["tflops"] is None:
                    cells.append(f"{r['median_ms'] * 1e3:>9.1f} us {r['gbps']:>6.0f} GB/s")
                else:
                    cells.append(f"{r['tflops']:>12.1f} ({r['pct_of_cublas']:5.1f}%)")
            print(f"{name:<20}" + "".join(cells))


def _mode(row: dict, mode: str) -> bool:
    return row["mode"] == mode or (mode == "graph" and row["mode"] == "batch")


def selected_steps(spec: str) -> list:
    """ "all", "default" (DEFAULT_BENCHMARK_STEPS: 09 is a measured loser and left out) or a
    comma list of step numbers/names ("03,4,hgemm:05"), in ladder order."""
    if spec.strip() == "all":
        return list(STEPS)
    if spec.strip() in ("", "default"):
        return [s for s in STEPS if s.number in DEFAULT_BENCHMARK_STEPS]
    chosen = {get_step(part.strip()).number for part in spec.split(",") if part.strip()}
    return [s for s in STEPS if s.number in chosen]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default_out = Path(os.environ.get("OUT", ROOT / "benchmarks/results/h200/hgemm"))
    parser.add_argument("--out", type=Path, default=default_out)
    parser.add_argument("--sizes", default="2048,4096,8192")
    parser.add_argument(
        "--steps", default="default", help="e.g. 03,04,05, or all (default: 03-08, 10, 11)"
    )
    parser.add_argument("--modes", default="cold,graph", help="timing modes: cold, hot, graph")
    parser.add_argument("--max-time", type=float, default=1.0, help="seconds per timing")
    parser.add_argument("--no-time", action="store_true", help="check only")
    parser.add_argument("--prebuild", action="store_true", help="compile every step, then stop")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    try:
        steps = selected_steps(args.steps)
    except KernelabError as exc:
        log(f"hgemm_ladder: {exc}")
        return 2

    log("compiling (cached after the first run)")
    summary: dict = {"compile": compile_report(steps)}
    if args.prebuild:
        return 0
    import torch

    if not torch.cuda.is_available():
        log("no CUDA GPU: stopping after the compile step")
        return 2
    summary.update(gpu=torch.cuda.get_device_name(), torch=torch.__version__, sizes=sizes)
    summary["steps"] = [s.name for s in steps]

    log("checking every selected step")
    summary["checks"] = check_steps(steps)
    good = [s for s in steps if all(r["ok"] for r in summary["checks"][s.name])]
    summary["grids"] = persistent_grids(good, sizes)
    records = []
    if not args.no_time:
        rows, records = time_ladder(good, sizes, modes, args.max_time)
        summary["timing"] = rows
        print_table(rows, sizes, modes)
        print("\npersistent grids (blocks): " + json.dumps(summary["grids"]))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "summary.json").write_text(json.dumps(summary, indent=2, default=str) + "\n")
    if records:
        from kernelab.harness.records import save_records

        save_records(records, args.out / "records.json")
    failed = [s.name for s in steps if s not in good]
    if failed:
        print(f"WRONG ANSWERS: {', '.join(failed)}")
    print(f"written to {args.out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
