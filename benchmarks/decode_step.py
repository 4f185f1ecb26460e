"""One decode step of a Llama-3-8B block (ops/decode_step) on this GPU, four ways: torch eager,
torch.compile(mode="reduce-overhead"), CUDA-graphed eager and the graphed kernelab block with
torch's attention (plus the same with kernelab's split-KV attention, and both launched
eagerly). Every path is checked against the float64 reference step first (a path that fails
or cannot run is a row with its reason, not timed), then timed per token, judged against the
target and written as one JSON document of rows and records (decode_kernels.py's format).

    PYTHONPATH=src python3 benchmarks/decode_step.py [--out DIR] [--quick]
        [--lengths 1024,8192] [--batches 1,4,16] [--paths eager,compiled,...]

Per path, batch and KV length (bf16):
  device    device time per token under triton.testing.do_bench (median, L2 cleared before
            each call) and under kernelab.harness.timing.benchmark (cold median): calls
            queued back to back, so the host's launch time is hidden
  host      host time of one call with the GPU idle (launching dozens of kernels from
            Python, or one graph replay)
  wall      per token in a loop of calls with one synchronise at the end: what a decode
            loop gets, the larger of host and device time per step
  floor     the memory-bound floor, (weights + KV) bytes / the copy ceiling measured in this
            run (1 GiB device-to-device copy, read + write)
Target: a graphed kernelab block's device time (the faster of the two attentions) <=
torch.compile's at batch 1, KV 1K and 8K, under both timers.
--quick: batch 1, KV 1K and 8K, shorter timing.

Where each microsecond goes, with the timeline lens (each loop iteration calls
kernelab.timeline.step(); give --steps at least the timeline's warm-up + steps):

    kernelab timeline --warmup 5 --steps 20 -- python3 benchmarks/decode_step.py \\
        --timeline kernelab-graphed --length 1024 --steps 40

Without a GPU, the same loop at a tiny config (the kernelab path under TRITON_INTERPRET=1):
    ... -- python3 benchmarks/decode_step.py --timeline eager --config tiny --device cpu
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

from kernelab.ops.decode_step.paths import PATHS  # imports no torch

TARGET_LENGTHS = (1024, 8192)
LENGTHS = (1024, 8192)
BATCHES = (1, 4, 16)
QUICK_BATCHES = (1,)
TIMELINE_STEPS = 100
HOST_CALLS = 30
WALL_CALLS = 200
GIB = 1 << 30
CONFIGS = {"llama3-8b": "LLAMA3_8B", "tiny": "TINY"}
CPU_PATHS = ("eager", "kernelab", "kernelab-splitkv")
KERNELAB_GRAPHED = ("kernelab-graphed", "kernelab-splitkv-graphed")


def _int_list(text: str, flag: str, parser) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        parser.error(f"{flag} takes a comma list of integers, got {text!r}")
    if not values or any(v < 0 for v in values):
        parser.error(f"{flag} takes non-negative integers, got {text!r}")
    return values


def parse(argv):
    parser = argparse.ArgumentParser(
        description="Check and time one decode step of a Llama-3-8B block, four ways.",
        epilog="paths: " + ", ".join(PATHS),
    )
    parser.add_argument("--out", default=None,
                        help="folder for the JSON document (default $OUT, else "
                        "benchmarks/results/<card>/decode in a source checkout, else "
                        "./kernelab-results/<gpu>/decode)")  # fmt: skip
    parser.add_argument("--quick", action="store_true",
                        help=f"batch {QUICK_BATCHES[0]} only, shorter timing")  # fmt: skip
    parser.add_argument("--lengths", default=",".join(map(str, LENGTHS)), help="KV lengths")
    parser.add_argument("--batches", default=None, help=f"default {BATCHES}")
    parser.add_argument("--paths", default=",".join(PATHS), help="comma list of paths")
    parser.add_argument("--timeline", metavar="PATH", default=None,
                        help="run PATH's step in a loop for `kernelab timeline`")  # fmt: skip
    parser.add_argument("--length", type=int, default=1024, help="KV length of --timeline")
    parser.add_argument("--batch", type=int, default=1, help="batch of --timeline")
    parser.add_argument("--steps", type=int, default=TIMELINE_STEPS,
                        help="steps of the --timeline loop")  # fmt: skip
    parser.add_argument("--config", choices=sorted(CONFIGS), default="llama3-8b",
                        help="block shape of --timeline (tiny: a CPU-sized block)")  # fmt: skip
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                        help="device of --timeline (cpu: the eager and ungraphed kernelab "
                        "paths, the latter under TRITON_INTERPRET=1)")  # fmt: skip
    args = parser.parse_args(argv)
    args.lengths = _int_list(args.lengths, "--lengths", parser)
    default_batches = QUICK_BATCHES if args.quick else BATCHES
    args.batches = _int_list(args.batches, "--batches", parser) if args.batches else default_batches
    if 0 in args.batches:
        parser.error("--batches: a batch of 0 decodes nothing")
    args.paths = tuple(p.strip() for p in args.paths.split(",") if p.strip())
    unknown = [p for p in (*args.paths, args.timeline or PATHS[0]) if p not in PATHS]
    if unknown:
        parser.error(f"unknown path(s) {', '.join(unknown)}; paths: {', '.join(PATHS)}")
    if args.steps < 1 or args.batch < 1 or args.length < 0:
        parser.error("--steps and --batch must be >= 1 and --length >= 0")
    if args.device == "cpu" and args.timeline not in CPU_PATHS:
        parser.error(f"--device cpu runs only --timeline {', '.join(CPU_PATHS)}")
    return args


# --- pure parts: the record, the row, the target ---------------------------------------------


def make_record(path: str, batch: int, length: int, dtype: str, cost: dict, median_ms: float,
                timer: str, gpu: str, config: str = "llama3-8b", **extra) -> dict:  # fmt: skip
    """One measurement in decode_kernels.py's record layout (op, implementation, shape, dtype,
    median_ms, flops, bytes, achieved rates, gpu, timer)."""
    seconds = median_ms * 1e-3
    return {"op": "decode_step", "implementation": path, "shape": {"batch": batch,
            "length": length, "config": config}, "dtype": dtype, "median_ms": median_ms,
            "flops": cost["flops"], "bytes": cost["bytes"],
            "achieved_tbps": cost["bytes"] / seconds / 1e12,
            "achieved_tflops": cost["flops"] / seconds / 1e12, "gpu": gpu, "timer": timer,
            **extra}  # fmt: skip


def judge(rows: list[dict]) -> list[dict]:
    """The target rows: at batch 1 and each TARGET_LENGTH this run measured, a graphed kernelab
    block (torch's attention or kernelab's split-KV one; the faster under the harness speaks)
    at most torch.compile's device time per token under both timers. A missing or failed
    path cannot meet it."""
    by_key = {(r["path"], r["batch"], r["length"]): r for r in rows if r.get("part") == "step"}
    measured = {length for _, batch, length in by_key if batch == 1}
    verdicts = []
    for length in (n for n in TARGET_LENGTHS if n in measured):
        theirs = by_key.get(("compiled", 1, length))
        ours = [by_key[key] for key in ((p, 1, length) for p in KERNELAB_GRAPHED)
                if key in by_key and by_key[key]["check"]]  # fmt: skip
        row = {"part": "target", "case": f"batch 1, KV {length}",
               "target": "graphed kernelab block <= compiled (device time per token, both "
                         "timers)"}  # fmt: skip
        if not ours or not theirs or not theirs["check"]:
            verdicts.append({**row, "met": False, "why": "a path is missing or failed its check"})
            continue
        best = min(ours, key=lambda r: r["harness_us"])
        ratios = {t: best[f"{t}_us"] / theirs[f"{t}_us"] for t in ("do_bench", "harness")}
        verdicts.append({**row, "path": best["path"], "kernelab_us": best["harness_us"],
                         "compiled_us": theirs["harness_us"], "ratio_do_bench":
                         ratios["do_bench"], "ratio_harness": ratios["harness"],
                         "met": all(r <= 1.0 for r in ratios.values())})  # fmt: skip
    return verdicts


# --- on the GPU ------------------------------------------------------------------------------


def copy_tbps(torch, benchmark) -> float:
    x = torch.empty(GIB // 4, device="cuda", dtype=torch.float32).normal_()
    y = torch.empty_like(x)
    median = benchmark(lambda: y.copy_(x), mode="cold", min_samples=10, max_time_s=0.5).median_ms
    return 2 * GIB / (median * 1e-3) / 1e12


def host_us(sync, step, x, calls: int = HOST_CALLS) -> float:
    """Median host time of one call, the GPU idle before each."""
    times = []
    for _ in range(calls):
        sync()
        start = time.perf_counter()
        step(x)
        times.append(time.perf_counter() - start)
    sync()
    return 1e6 * sorted(times)[len(times) // 2]


def wall_us(sync, step, x, calls: int) -> float:
    sync()
    start = time.perf_counter()
    for _ in range(calls):
        step(x)
    sync()
    return 1e6 * (time.perf_counter() - start) / calls


def measure_case(run, batch: int, length: int) -> None:
    import torch._dynamo
    from torch._dynamo.utils import counters

    from kernelab.ops import decode_step as ds

    torch, config = run["torch"], getattr(ds, CONFIGS[run["config"]])
    block = ds.build(config, batch=batch, capacity=length + 1, dtype=run["dtype"],
                     device=run["device"])  # fmt: skip
    x = ds.make_input(block)
    ref, _, _ = ds.reference_step(block, x, length)
    eager_error = ds.step_error(ds.make_step("eager", block, length, x)(x), ref)
    budget = ds.error_budget(run["dtype"], eager_error)
    cost = ds.step_cost(config, batch, length, run["dtype"]).to_dict()
    floor = cost["bytes"] / (run["copy_tbps"] * 1e12) * 1e6
    quick = run["args"].quick
    for path in run["args"].paths:
        torch._dynamo.reset()  # each compiled block compiles afresh, far from the recompile limit
        skips = counters["inductor"]["cudagraph_skips"]
        try:  # a path that cannot build or run on this machine is a row, not a crash
            step = ds.make_step(path, block, length, x)
            error, failure = ds.step_error(step(x).clone(), ref), None
        except Exception as exc:
            step, error = None, float("inf")
            first_line = (str(exc).strip().splitlines() or [""])[0][:300]
            failure = f"{type(exc).__name__}: {first_line}"
        row = {"part": "step", "path": path, "batch": batch, "length": length, "error": error,
               "budget": budget, "check": error <= budget, "floor_us": floor}  # fmt: skip
        if failure:
            row["failure"] = failure
        if path == "compiled":  # > 0: Inductor ran the step without its CUDA graph
            row["cudagraph_skips"] = counters["inductor"]["cudagraph_skips"] - skips
        if row["check"]:
            # every sample kept in the records, so the lab recomputes and judges their medians
            do_bench_ms = [
                float(t)
                for t in run["do_bench"](
                    lambda s=step: s(x), warmup=25, rep=50 if quick else 200, return_mode="all"
                )
            ]
            do_bench = statistics.median(do_bench_ms)
            timing = run["benchmark"](lambda s=step: s(x), mode="cold", min_samples=10,
                                      max_time_s=0.5 if quick else 2.0)  # fmt: skip
            harness = timing.median_ms
            row.update({"do_bench_us": 1e3 * do_bench, "harness_us": 1e3 * harness,
                        "host_us": host_us(run["sync"], step, x, run["host_calls"]),
                        "wall_us": wall_us(run["sync"], step, x, run["wall_calls"]),
                        "pct_of_floor": 100 * floor / (1e3 * harness)})  # fmt: skip
            for timer, ms, samples in (
                ("triton.testing.do_bench median", do_bench, do_bench_ms),
                ("kernelab.harness.timing.benchmark cold median", harness, timing.samples_ms),
            ):
                run["records"].append(make_record(path, batch, length, run["dtype"], cost, ms,
                                                  timer, run["gpu"], run["config"], check=True,
                                                  error=error, samples_ms=list(samples)))  # fmt: skip
        else:
            print(f"  CHECK FAILED {path} b{batch} L{length}: "
                  f"{failure or f'error {error:.3g} > {budget:.3g}'}", file=sys.stderr)  # fmt: skip
        run["rows"].append(row)
        save(run)
        print(f"  {path} b{batch} L{length}: " + (f"{row['harness_us']:.1f} us device, "
              f"{row['wall_us']:.1f} us wall, floor {floor:.1f} us" if row["check"]
              else "not timed"), file=sys.stderr)  # fmt: skip
        del step


def as_record(measurement: dict, versions: dict):
    """make_record's measurement in the one record schema (harness.records.Record)."""
    from kernelab.harness.records import flat_record

    timer = measurement["timer"]
    return flat_record({**measurement, "mode": "do_bench" if timer.startswith("triton.testing")
                        else "cold"}, versions, suite="decode_step")  # fmt: skip


def save(run) -> None:
    from kernelab.environment import software_versions
    from kernelab.harness.records import save_records

    versions = software_versions()
    document = {"gpu": run["gpu"], "copy_tbps": run["copy_tbps"], "config": run["config"],
                "versions": versions, "rows": run["rows"]}  # fmt: skip
    records = [as_record(measurement, versions) for measurement in run["records"]]
    save_records(records, run["path"], document=document)


def timeline_loop(args) -> int:
    """The workload `kernelab timeline` profiles: one path's step, marked once per token."""
    import kernelab.timeline
    from kernelab.ops import decode_step as ds

    config = getattr(ds, CONFIGS[args.config])
    dtype = "bf16" if args.device == "cuda" else "fp32"
    block = ds.build(config, batch=args.batch, capacity=args.length + 1, dtype=dtype,
                     device=args.device)  # fmt: skip
    x = ds.make_input(block)
    step = ds.make_step(args.timeline, block, args.length, x)
    for _ in range(args.steps):
        step(x)
        kernelab.timeline.step()
    return 0


def main(argv=None) -> int:
    args = parse(argv)
    import torch

    if args.timeline and args.device == "cpu":
        return timeline_loop(args)
    if not torch.cuda.is_available():
        print("error: the decode step is timed on a CUDA GPU; none is visible", file=sys.stderr)
        return 2
    if args.timeline:
        return timeline_loop(args)
    import triton.testing

    from kernelab.harness.ceilings import this_gpu
    from kernelab.harness.records import default_results_dir
    from kernelab.harness.timing import benchmark

    out = Path(args.out) if args.out else default_results_dir(this_gpu("decode_step.py").key,
                                                              "decode")  # fmt: skip
    out.mkdir(parents=True, exist_ok=True)
    run = {"args": args, "torch": torch, "benchmark": benchmark,
           "do_bench": triton.testing.do_bench, "gpu": torch.cuda.get_device_name(),
           "sync": torch.cuda.synchronize, "config": "llama3-8b", "dtype": "bf16",
           "device": "cuda", "host_calls": HOST_CALLS,
           "wall_calls": WALL_CALLS // (4 if args.quick else 1),
           "rows": [], "records": [],
           "path": out / f"decode_step_{time.strftime('%Y%m%d-%H%M%S')}.json"}  # fmt: skip
    run["copy_tbps"] = copy_tbps(torch, benchmark)
    run["rows"].append({"part": "copy", "case": "1 GiB", "tbps": run["copy_tbps"]})
    print(f"  copy ceiling: {run['copy_tbps']:.2f} TB/s", file=sys.stderr)
    for length in args.lengths:
        for batch in args.batches:
            measure_case(run, batch, length)
    run["rows"].extend(judge(run["rows"]))
    save(run)
    targets = [r for r in run["rows"] if r["part"] == "target"]
    print(f"targets met: {sum(r['met'] for r in targets)} of {len(targets)}; written to "
          f"{run['path']}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
