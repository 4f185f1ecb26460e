"""Sweep the decode GEMV's launches on this GPU, keep the record, propose tiles.json from it.

    PYTHONPATH=src python3 benchmarks/gemv_tiles.py [--out DIR] [--table PATH]
        [--m 1,4,16,64] [--budget-s 330] [--jobs N] [--dry-run]
    PYTHONPATH=src python3 benchmarks/gemv_tiles.py --propose RECORD [--table PATH]

For every weight shape of benchmarks/decode_kernels.py (WEIGHTS) and batch of --m, bf16: the
candidate launches of kernelab.ops.gemv.tile_sweep (kernel form, BLOCK_M/N/K, num_warps,
num_stages, K split), each checked against torch's x @ W^T (in float64, to the harness's
bf16 tolerance, as the tests check) and then timed by kernelab's cold timer (L2 flushed
before each call): a coarse pass over every tile, a refine pass over
the fastest tiles' other splits, a confirm pass that re-times the fastest launches longer
beside torch (cuBLAS) and the launch tiles.json gives today. Every timing is reported in bytes
of W a second as % of the copy ceiling measured at the start of the run (dst.copy_(src) of
1 GiB, the decode suite's) and as % of torch at the same shape.

Before timing, --jobs processes compile every candidate kernel into Triton's cache (one
launch each on this GPU), so the timing passes find them built; --jobs 0 compiles inline.
The passes go batch by batch (m = 1 first) and stop starting new shapes once --budget-s
seconds have passed since the start; the record is saved after every shape, so a run cut
short keeps what it measured.

Writes one JSON document (harness.records.save_records) to --out (default $OUT, else
benchmarks/results/<card>/gemv_tiles in a source checkout): the records (op gemv, extra suite
"gemv_tiles", the pass, the candidate and its launch, registers and spills), the copy
ceiling, the failed checks and the budget; `kernelab compare` and the lab read it. With
--table it also writes the proposed tiles.json (tile_sweep.propose_table): per swept batch the
tile closest to each shape's fastest as the general entry, and each shape's winner where it
differs, every entry naming the record as it is to be committed
(benchmarks/results/<card>/gemv_tiles/<file>). --propose re-derives the table from a record
without a GPU. --dry-run prints the grid and the budget without a GPU.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # decode_kernels beside this file

from decode_kernels import WEIGHTS  # noqa: E402

DEFAULT_BUDGET_S = 330.0
PRECOMPILE_TIMEOUT_S = 180.0  # the compile workers' limit; the passes compile what is left
RESULTS_PART = "gemv_tiles"


def say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def parse(argv):
    parser = argparse.ArgumentParser(
        description="Check and time the decode GEMV's candidate launches (tiles, kernel form, "
        "warps, stages, K split) against torch and the copy ceiling; propose tiles.json.",
    )
    parser.add_argument("--out", default=os.environ.get("OUT"),
                        help="folder for the record (default $OUT, else "
                        "benchmarks/results/<card>/gemv_tiles in a source checkout)")  # fmt: skip
    parser.add_argument("--table", help="write the proposed tiles.json here")
    parser.add_argument(
        "--m", default="1,4,16,64", help="comma list of batches (default 1,4,16,64)"
    )
    parser.add_argument("--weights", help="comma list of WEIGHTS labels (default all: "
                        + ", ".join(label for label, _, _ in WEIGHTS) + ")")  # fmt: skip
    parser.add_argument("--budget-s", type=float, default=DEFAULT_BUDGET_S,
                        help="start no new shape after this many seconds (default %(default)s)")  # fmt: skip
    parser.add_argument("--jobs", type=int, default=None,
                        help="compile processes before timing (default: CPUs - 2, at most 12; "
                        "0: compile inline)")  # fmt: skip
    parser.add_argument("--sms", type=int, default=132, help="SMs for --dry-run (default 132)")
    parser.add_argument("--dry-run", action="store_true", help="print the grid and the budget")
    parser.add_argument("--propose", metavar="RECORD",
                        help="propose tiles.json from this record (no GPU)")  # fmt: skip
    args = parser.parse_args(argv)
    try:
        args.batches = tuple(int(b) for b in args.m.split(",") if b.strip())
    except ValueError:
        parser.error(f"--m takes a comma list of batches, got {args.m!r}")
    if not args.batches or any(not 1 <= b <= 64 for b in args.batches):
        parser.error(f"--m takes batches from 1 to 64, got {args.m!r}")
    labels = {label for label, _, _ in WEIGHTS}
    wanted = [w.strip() for w in args.weights.split(",")] if args.weights else sorted(labels)
    unknown = [w for w in wanted if w not in labels]
    if unknown:
        parser.error(f"unknown weight(s) {', '.join(unknown)}; known: {', '.join(sorted(labels))}")
    args.weight_rows = tuple(row for row in WEIGHTS if row[0] in wanted)
    if args.jobs is None:
        args.jobs = max(0, min(12, (os.cpu_count() or 2) - 2))
    return args


def dry_run(args) -> int:
    from kernelab.ops.gemv.tile_sweep import FORMS, budget, sweep_points, tile_grid

    points = sweep_points(args.weight_rows, args.batches)
    for m in args.batches:
        grid = tile_grid(m)
        forms = {form: sum(t.form == form for t in grid) for form in FORMS}
        print(
            f"m = {m}: {len(grid)} tiles ({', '.join(f'{v} {k}' for k, v in forms.items() if v)})"
        )
    for point in points:
        splits = sorted({s for t in tile_grid(point.m) for s in t.splits(point.m, point.n,
                                                                          point.k, args.sms)})  # fmt: skip
        print(f"  {point.label:20} m={point.m:<3} {point.n}x{point.k}: splits {splits}")
    plan = budget(points, args.sms, args.jobs)
    print("budget at {sms} SMs: {points} shapes, {compiles} compiles over {jobs} processes, "
          "{coarse} coarse + at most {refine} refine short timings, {confirm} long ones: about "
          "{estimate_s} s".format(sms=args.sms, **plan))  # fmt: skip
    return 0


# ---- proposing the table -------------------------------------------------------------------


def committed_path(record_path: Path, gpu_id: str | None) -> str:
    """Where the record is to be committed: its place under benchmarks/results/ when it is
    there already, else benchmarks/results/<card>/gemv_tiles/<its name>."""
    from kernelab.harness.records import card_folder

    parts = record_path.resolve().parts
    if "benchmarks" in parts and "results" in parts:
        at = len(parts) - 1 - parts[::-1].index("benchmarks")
        return "/".join(parts[at:])
    card = card_folder(gpu_id or "") or gpu_id or "unknown"
    return f"benchmarks/results/{card}/{RESULTS_PART}/{record_path.name}"


def proposal(records, document: dict, record_path: Path) -> dict:
    from kernelab.ops.gemv.tile_sweep import propose_table
    from kernelab.ops.gemv.tiles import TABLE_PATH, check_table

    base = json.loads(TABLE_PATH.read_text())
    table = propose_table(records, base, committed_path(record_path, document.get("gpu_id")),
                          document.get("sms") or 132, document.get("gpu_id") or "unknown")  # fmt: skip
    return check_table(table, "the proposed table")


def report(records, table: dict) -> None:
    from kernelab.ops.gemv.tile_sweep import point_winners

    for (m, n, k), win in sorted(point_winners(records).items()):
        pct_copy = f"{win['pct_of_copy']:.0f} % of copy" if win["pct_of_copy"] else "no copy"
        pct_torch = f"{win['pct_of_torch']:.0f} % of torch" if win["pct_of_torch"] else "no torch"
        today = f", {win['x_today']:.2f}x today's" if win["x_today"] else ""
        print(f"m={m:<3} {n}x{k}: {win['candidate']:36} {win['us']:8.1f} us, "
              f"{win['w_gbps']:6.0f} GB/s of W, {pct_copy}, {pct_torch}{today}")  # fmt: skip
    for entry in table["entries"]:
        if entry["status"] == "measured":
            where = "every shape" if entry["n"] is None else f"{entry['n']}x{entry['k']}"
            print(f"table: itemsize {entry['itemsize']} m <= {entry['m']} {where}: "
                  f"{json.dumps(entry['launch'])}")  # fmt: skip


def write_table(table: dict, path: str) -> None:
    from kernelab.harness.records import write_atomically

    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(target, json.dumps(table, indent=1) + "\n")
    say(f"proposed table: {target}")


def propose_from(args) -> int:
    from kernelab.errors import KernelabError
    from kernelab.harness.records import load_records, read_json

    path = Path(args.propose)
    try:
        records = load_records(path)
        data = read_json(path, "record file")
        table = proposal(records, data if isinstance(data, dict) else {}, path)
    except KernelabError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    report(records, table)
    if args.table:
        write_table(table, args.table)
    return 0


# ---- compiling ahead -----------------------------------------------------------------------


def precompile(points, sms: int, workers: int, device: str = "cuda") -> dict:
    """Every kernel the sweep may launch, compiled by `workers` processes into Triton's cache
    before the timing passes (tile_sweep.compile_worker); a failure or a stall here costs
    nothing but time: the passes compile what is missing."""
    from kernelab.ops.gemv.tile_sweep import compile_jobs, compile_worker

    jobs = compile_jobs(points, sms)
    start = time.perf_counter()
    if workers <= 0 or not jobs:
        return {"jobs": len(jobs), "workers": 0, "seconds": 0.0, "errors": []}
    jobs.sort(key=lambda job: job[:3])  # one shape's launches together in each share
    shares = [(jobs[i::workers], device) for i in range(workers) if jobs[i::workers]]
    errors: list[str] = []
    done = 0
    try:
        with multiprocessing.get_context("spawn").Pool(len(shares)) as pool:
            for compiled, failed in pool.starmap_async(compile_worker, shares).get(
                    timeout=PRECOMPILE_TIMEOUT_S):  # fmt: skip
                done += compiled
                errors += failed
    except Exception as exc:  # a stall or a broken worker: the timing passes compile inline
        errors.append(f"compile workers: {_first_line(exc)}")
    seconds = time.perf_counter() - start
    say(f"  compiled {done} of {len(jobs)} launches ahead in {seconds:.0f} s over "
        f"{len(shares)} processes" + (f", {len(errors)} errors" if errors else ""))  # fmt: skip
    return {"jobs": len(jobs), "compiled": done, "workers": len(shares),
            "seconds": round(seconds, 1), "errors": errors[:20]}  # fmt: skip


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:200]}" if text else type(exc).__name__


# ---- measuring -----------------------------------------------------------------------------


@dataclass
class Sweep:
    identity: object
    path: Path
    sms: int
    budget_s: float = DEFAULT_BUDGET_S
    device: str = "cuda"  # the tests run the passes on the CPU with a stand-in timer
    records: list = field(default_factory=list)
    failures: list = field(default_factory=list)
    skipped: list = field(default_factory=list)
    resources: dict = field(default_factory=dict)  # (m, tile, split > 1) -> registers, spills
    document: dict = field(default_factory=dict)
    copy_gbps: float | None = None
    start: float = field(default_factory=time.perf_counter)

    def over_budget(self) -> bool:
        return time.perf_counter() - self.start > self.budget_s

    def fail(self, what: str, text: str) -> None:
        self.failures.append(f"{what}: {text}")
        say(f"  FAILED {what}: {text}")

    def save(self) -> None:
        from kernelab.environment import software_versions
        from kernelab.harness.records import save_records

        document = {"gpu": self.identity.name, "gpu_id": self.identity.gpu_id, "sms": self.sms,
                    "versions": software_versions(), "copy_gbps": self.copy_gbps,
                    "failures": self.failures, "skipped": self.skipped, **self.document}  # fmt: skip
        save_records(self.records, self.path, document=document)


def _synchronize(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _new_kernels(before: set) -> list:
    """The compiled GEMV kernels this process built since `before` (their registers and
    spills), or [] where Triton keeps them elsewhere (the interpreter)."""
    from kernelab.ops.gemv.split_k import gemv_split_kernel

    try:
        import torch

        cache = gemv_split_kernel.device_caches[torch.cuda.current_device()][0]
        return [kernel for key, kernel in cache.items() if key not in before]
    except Exception:
        return []


def _cache_keys() -> set:
    from kernelab.ops.gemv.split_k import gemv_split_kernel

    try:
        import torch

        return set(gemv_split_kernel.device_caches[torch.cuda.current_device()][0])
    except Exception:
        return set()


@dataclass
class PointRun:
    """One shape and batch: its operands, the fp32 reference and what was measured so far."""

    point: object
    x: object
    w: object
    ref: object
    torch_ms: float | None = None
    checked: dict = field(default_factory=dict)  # candidate -> check dict, or None (failed)
    timed: dict = field(default_factory=dict)  # (candidate, pass) -> Record


def time_call(sweep: Sweep, call, timer: dict):
    from kernelab.harness import timing

    return timing.benchmark(call, mode="cold", min_samples=10, **timer)


def make_record(sweep: Sweep, run: PointRun, implementation: str, timing, check: dict,
                extra: dict):  # fmt: skip
    from kernelab.harness.records import Record
    from kernelab.ops.gemv.tile_sweep import SUITE, w_gbps
    from kernelab.spec.reference import get_op

    p = run.point
    shape = {"m": p.m, "n": p.n, "k": p.k}
    cost = get_op("gemv").cost(shape, "bf16")
    seconds = timing.median_ms * 1e-3
    gbps = w_gbps(p.m, p.n, p.k, timing.median_ms)
    figures = {"w_gbps": gbps,
               "pct_of_copy": 100 * gbps / sweep.copy_gbps if sweep.copy_gbps else None,
               "pct_of_torch": 100 * run.torch_ms / timing.median_ms if run.torch_ms else None}  # fmt: skip
    return Record(op="gemv", implementation=implementation, shape=shape, dtype="bf16",
                  mode=timing.mode, samples_ms=list(timing.samples_ms),
                  stats=timing.summary.to_dict(), gpu=sweep.identity.name,
                  gpu_id=sweep.identity.gpu_id, driver=sweep.identity.driver,
                  versions=sweep.document.get("versions", {}), clocks=dict(timing.clocks),
                  flops=cost.flops, bytes=cost.bytes,
                  achieved_tflops=cost.flops / seconds / 1e12,
                  achieved_gbps=cost.bytes / seconds / 1e9, check=check,
                  warnings=list(timing.warnings),
                  extra={"suite": SUITE, "label": p.label, "sms": sweep.sms, **figures,
                         **extra})  # fmt: skip


def check_call(sweep: Sweep, run: PointRun, what: str, call) -> dict | None:
    """The call's answer against torch's float64 x @ W^T, to the harness's tolerance for bf16
    inputs with fp32 accumulation: the check as a record carries it, or None after a failure
    line."""
    from kernelab.harness.check import compare

    try:
        out = call()
        _synchronize(sweep.device)
        result = compare(out, run.ref, dtype="bf16", bf16_truncates=sweep.device == "cpu")
    except Exception as exc:  # a launch the compiler or the GPU refuses: one line, go on
        sweep.fail(what, _first_line(exc))
        return None
    if not result.ok:
        sweep.fail(what, f"check failed: {result.message[:160]}")
        return None
    return {"ok": True, "error": result.error, "threshold": result.threshold,
            "against": "torch x.double() @ w.double().t()"}  # fmt: skip


def measure_candidate(sweep: Sweep, run: PointRun, tile, split: int, pass_: str, timer: dict,
                      rule: str):  # fmt: skip
    """Check (once per launch and shape), then time one candidate; its Record or None."""
    from kernelab.ops.gemv import gemv

    p = run.point
    launch = tile.launch(p.m, p.n, p.k, split)
    name = f"{tile.name}.split{launch['split']}"
    if (name, pass_) in run.timed:
        return run.timed[(name, pass_)]
    call = lambda: gemv(run.x, run.w, launch=launch)  # noqa: E731
    variant = (p.m, tile.name, launch["split"] > 1)
    if name not in run.checked:
        before = _cache_keys()
        run.checked[name] = check_call(sweep, run, f"{name} {p.label} m={p.m}", call)
        for kernel in _new_kernels(before):
            sweep.resources.setdefault(variant, {
                "n_regs": getattr(kernel, "n_regs", None),
                "n_spills": getattr(kernel, "n_spills", None),
                "shared": getattr(getattr(kernel, "metadata", None), "shared", None)})  # fmt: skip
    check = run.checked[name]
    if check is None:
        return None
    timing = time_call(sweep, call, timer)
    record = make_record(sweep, run, f"triton.gemv@{name}", timing, check,
                         {"pass": pass_, "candidate": name, "tile": tile.name, "launch": launch,
                          "split_rule": rule, "resources": sweep.resources.get(variant),
                          "timer": timer})  # fmt: skip
    sweep.records.append(record)
    run.timed[(name, pass_)] = record
    return record


def measure_reference(sweep: Sweep, run: PointRun, implementation: str, call, timer: dict,
                      extra: dict):  # fmt: skip
    p = run.point
    check = check_call(sweep, run, f"{implementation} {p.label} m={p.m}", call)
    if check is None:
        return None
    timing = time_call(sweep, call, timer)
    record = make_record(sweep, run, implementation, timing, check,
                         {"pass": "confirm", "timer": timer, **extra})  # fmt: skip
    sweep.records.append(record)
    return record


def measure_point(sweep: Sweep, point) -> None:
    """torch and today's launch, then the coarse, refine and confirm passes at one shape."""
    import torch

    from kernelab.ops.gemv import gemv, plan, sm_count
    from kernelab.ops.gemv import tile_sweep as ts
    from kernelab.spec.reference import get_op

    shape = {"m": point.m, "n": point.n, "k": point.k}
    x, w = get_op("gemv").make_inputs(shape, "bf16", seed=0, device=sweep.device)
    run = PointRun(point, x, w, x.double() @ w.double().t())  # the harness's reference
    torch_record = measure_reference(sweep, run, "torch.gemv", lambda: x @ w.t(), ts.LONG_TIMER,
                                     {"what": "x @ w.t() (cuBLAS)"})  # fmt: skip
    if torch_record is not None:
        run.torch_ms = torch_record.median_ms
        torch_record.extra["pct_of_torch"] = 100.0
    sms = None if sweep.device == "cpu" else sm_count(torch.cuda.current_device())
    today = plan(point.m, point.n, point.k, sms, interpreter=sweep.device == "cpu", itemsize=2)
    measure_reference(sweep, run, "triton.gemv", lambda: gemv(x, w), ts.LONG_TIMER,
                      {"what": "gemv() as tiles.json has it now", "launch": today})  # fmt: skip
    coarse = []
    for tile in ts.tile_grid(point.m):
        if sweep.over_budget():
            sweep.skipped.append(f"{point.label} m={point.m}: coarse pass cut at the budget")
            break
        split = tile.rule_split(point.m, point.n, point.k, sweep.sms)
        record = measure_candidate(sweep, run, tile, split, "coarse", ts.SHORT_TIMER, "heuristic")
        if record is not None:
            coarse.append((record.median_ms, tile))
    coarse.sort(key=lambda item: item[0])
    for _, tile in coarse[: ts.REFINE]:
        for split in tile.splits(point.m, point.n, point.k, sweep.sms):
            measure_candidate(sweep, run, tile, split, "refine", ts.SHORT_TIMER, "refine")
    timed = sorted((r for (_, pass_), r in run.timed.items() if pass_ in ("coarse", "refine")),
                   key=lambda r: r.median_ms)  # fmt: skip
    names, best = set(), []
    for record in timed:  # the fastest distinct launches
        if record.extra["candidate"] not in names:
            names.add(record.extra["candidate"])
            best.append(record)
    for record in best[: ts.CONFIRM]:
        tile = ts.tile_of(record.extra["launch"])
        measure_candidate(sweep, run, tile, record.extra["launch"]["split"], "confirm",
                          ts.LONG_TIMER, record.extra["split_rule"])  # fmt: skip
    winners = ts.point_winners([r for r in sweep.records if r.op == "gemv"] + sweep_copy(sweep))
    win = winners.get((point.m, point.n, point.k))
    if win:
        pct = f", {win['pct_of_copy']:.0f} % of copy" if win["pct_of_copy"] else ""
        vs = f", {win['pct_of_torch']:.0f} % of torch" if win["pct_of_torch"] else ""
        say(f"  {point.label:20} m={point.m:<3}: {win['candidate']:36} {win['us']:8.1f} us"
            f"{pct}{vs}")  # fmt: skip


def sweep_copy(sweep: Sweep) -> list:
    return [r for r in sweep.records if r.op == "copy"]


def copy_part(sweep: Sweep, max_time_s: float = 0.5) -> None:
    from kernelab.lab.decode import copy_record
    from kernelab.ops.gemv.tile_sweep import SUITE

    record = copy_record(sweep.identity, max_time_s)
    record.extra.update(suite=SUITE, timer="kernelab.harness.timing.benchmark cold, median")
    sweep.records.append(record)
    sweep.copy_gbps = record.achieved_gbps
    say(f"  copy ceiling: {record.achieved_gbps:,.0f} GB/s")


def main(argv=None) -> int:
    args = parse(argv)
    if args.propose:
        return propose_from(args)
    if args.dry_run:
        return dry_run(args)
    import torch

    if not torch.cuda.is_available():
        print("error: the sweep needs a CUDA GPU (--dry-run and --propose run without)",
              file=sys.stderr)  # fmt: skip
        return 2
    from kernelab.environment import software_versions
    from kernelab.harness.ceilings import this_gpu
    from kernelab.harness.records import default_results_dir
    from kernelab.ops.gemv import sm_count
    from kernelab.ops.gemv.tile_sweep import budget, sweep_points

    identity = this_gpu("gemv_tiles.py")
    folder = Path(args.out) if args.out else default_results_dir(identity.key, RESULTS_PART)
    folder.mkdir(parents=True, exist_ok=True)
    sms = sm_count(torch.cuda.current_device())
    sweep = Sweep(identity, folder / f"gemv_tiles_{time.strftime('%Y%m%d-%H%M%S')}.json", sms,
                  args.budget_s)  # fmt: skip
    points = sweep_points(args.weight_rows, args.batches)
    plan = budget(points, sms, args.jobs)
    sweep.document.update(versions=software_versions(), budget=plan, budget_s=args.budget_s,
                          batches=list(args.batches))  # fmt: skip
    say(f"gemv tile sweep on {identity.name} ({sms} SMs): {sweep.path}; about "
        f"{plan['estimate_s']} s")  # fmt: skip
    sweep.document["precompile"] = precompile(points, sms, args.jobs)
    copy_part(sweep)
    sweep.save()
    for point in points:
        if sweep.over_budget():
            sweep.skipped.append(f"{point.label} m={point.m}: not started, budget spent")
            say(f"  skipped {point.label} m={point.m}: the budget is spent")
            continue
        try:
            measure_point(sweep, point)
        except Exception as exc:  # one broken shape must not hide the others
            sweep.fail(f"{point.label} m={point.m}", _first_line(exc))
        sweep.save()  # after every shape: a run cut short keeps what it measured
    sweep.document["seconds"] = round(time.perf_counter() - sweep.start, 1)
    sweep.save()
    say(f"record: {sweep.path} ({sweep.document['seconds']} s)")
    table = proposal(sweep.records, {"gpu_id": identity.gpu_id, "sms": sms}, sweep.path)
    report(sweep.records, table)
    if args.table:
        write_table(table, args.table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
