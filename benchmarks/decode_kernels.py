"""The decode kernels on this GPU, measured as the targets ask (kernelab.lab.decode keeps the
lab's smaller plan): every case checked against its float64 reference, then timed with its
baselines and anchors in the same run, two ways, and the targets judged on both.

    PYTHONPATH=src python3 benchmarks/decode_kernels.py [--out DIR] [--only gemv,quant]
        [--quick] [--gpu h100-sxm] [--dry-run]

Parts:
  copy      the copy ceiling of this run: dst.copy_(src) of 1 GiB (read + write)
  gemv      bf16 / fp16 y = x W^T over six weight shapes x m = 1..64: triton.gemv against
            torch.gemv (cuBLAS), the teaching kernel beside at m = 1
  quant     int8, int4 (group 128, symmetric and zero points) and fp8 weight-only GEMVs at
            m = 1 and 16 against dequantize-then-cuBLAS; torchao's int4 weight-only path
            and gemlite beside the int4 one
  fused     add + RMSNorm, RoPE, SwiGLU at decode rows (1, 64) and a prefill's (8192):
            against eager torch, torch.compile of the same eager code, Liger-Kernel and
            FlashInfer
  gate_up   the fused gate/up GEMV + SwiGLU at Llama-3-8B's 14336 x 4096 pair against the
            same work unfused (triton.gemv + triton.swiglu, and eager torch) and compiled
  roofline  the roofline walk of every weight shape on the catalog GPU named by --gpu (pure
            arithmetic: runs without a GPU)

Timers, both in one run and on one card, a candidate's baselines and anchors beside it:
  harness   kernelab.harness.bench.BenchSession.one: the check, kernelab's cold timer (L2
            flushed before every call: a 4096^2 bf16 W would otherwise sit in an H100's L2),
            the host's cost per call and the roofline placement: Record mode "cold";
  do_bench  triton.testing.do_bench (return_mode="all"), the timer a PyTorch user reaches for:
            two rounds in alternating order, samples pooled: Record mode "do_bench".
CUDA graphs, where a user would use them, are benchmarks/decode_step.py's: a whole step.

Writes one JSON document per run (harness.records.save_records): the records, each with
extra suite = "decode" and its role (gemv, quant, fused; the copy's "ceiling"), read by
`kernelab compare` and the lab (lab.decode.suite_records); beside them the anchors (absent
ones with their one-line reason), the failed checks and the targets as judged.
--dry-run prints the plan, the anchors' availability and the targets without a GPU.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # decode_anchors beside this file

from decode_anchors import INT4_ANCHORS, Absent, anchors_for, build_int4  # noqa: E402

PARTS = ("copy", "gemv", "quant", "fused", "gate_up", "roofline")
SUITE = "decode"
# (label, n, k): the square and wide weights and one Llama-3-8B layer
WEIGHTS = (("4096x4096", 4096, 4096), ("16384x4096", 16384, 4096),
           ("llama3-8b.qkv", 6144, 4096), ("llama3-8b.o", 4096, 4096),
           ("llama3-8b.gate_up", 28672, 4096), ("llama3-8b.down", 4096, 14336))  # fmt: skip
BATCHES = (1, 2, 4, 8, 16, 32, 64)
QUICK_BATCHES = (1, 16, 64)
FUSED_ROWS, QUICK_FUSED_ROWS = (1, 64, 8192), (1, 8192)
PREFILL_ROWS = 8192
GATE_UP = (14336, 4096)  # Llama-3-8B's intermediate and hidden sizes
INT4_GROUP = 128
QUANT = (("triton.quant_gemv.int8", "torch.quant_gemv.int8", "quant_gemv_int8", {}),
         ("triton.quant_gemv.int4", "torch.quant_gemv.int4", "quant_gemv_int4",
          {"group": INT4_GROUP}),
         ("triton.quant_gemv.int4_zp", "torch.quant_gemv.int4_zp", "quant_gemv_int4_zp",
          {"group": INT4_GROUP}),
         ("triton.quant_gemv.fp8", "torch.quant_gemv.fp8", "quant_gemv_fp8", {}))  # fmt: skip
FUSED = (("add_rmsnorm", lambda r: {"rows": r, "cols": 4096}),
         ("rope", lambda r: {"tokens": r, "heads": 32, "head_dim": 128}),
         ("swiglu", lambda r: {"rows": r, "cols": 14336}))  # fmt: skip
DO_BENCH = {"warmup": 25, "rep": 100}


@dataclass(frozen=True)
class Case:
    role: str  # "gemv", "quant" or "fused" (extra["role"] of its records)
    op: str
    shape: dict
    dtype: str
    label: str
    candidates: tuple[str, ...]  # registry names, ours first
    anchors: tuple[str, ...] = ()  # decode_anchors names
    int4_anchors: bool = False  # torchao / gemlite beside (they quantize W themselves)


def plan(parts, quick: bool) -> list[Case]:
    """Every case of the chosen parts, in the order they run."""
    batches = QUICK_BATCHES if quick else BATCHES
    cases = []
    if "gemv" in parts:
        for dtype in ("bf16", "fp16"):
            for label, n, k in WEIGHTS:
                for m in batches:
                    extra = ("triton.gemv.teaching",) if m == 1 else ()
                    cases.append(Case("gemv", "gemv", {"m": m, "n": n, "k": k}, dtype,
                                      f"{label} m={m}", ("triton.gemv", "torch.gemv", *extra)))  # fmt: skip
    if "quant" in parts:
        for label, n, k in WEIGHTS:
            for m in (1,) if quick else (1, 16):
                if "gemv" not in parts:  # the bf16 GEMV the speedups are judged against
                    cases.append(Case("gemv", "gemv", {"m": m, "n": n, "k": k}, "bf16",
                                      f"{label} m={m}", ("triton.gemv", "torch.gemv")))  # fmt: skip
                for ours, base, op, extra in QUANT:
                    int4 = op == "quant_gemv_int4"
                    cases.append(Case("quant", op, {"m": m, "n": n, "k": k, **extra}, "bf16",
                                      f"{label} m={m}", (ours, base), int4_anchors=int4))  # fmt: skip
    if "fused" in parts:
        for rows in QUICK_FUSED_ROWS if quick else FUSED_ROWS:
            for op, shape in FUSED:
                cases.append(Case("fused", op, shape(rows), "bf16", f"{op} rows={rows}",
                                  (f"triton.{op}", f"torch.{op}"),
                                  tuple(a.name for a in anchors_for(op))))  # fmt: skip
    if "gate_up" in parts:
        n, k = GATE_UP
        for m in (1, 16) if quick else (1, 4, 16, 64):
            cases.append(Case("fused", "gate_up_swiglu", {"m": m, "n": n, "k": k}, "bf16",
                              f"gate_up {n}x{k} m={m}",
                              ("triton.gate_up_swiglu", "torch.gate_up_swiglu"),
                              tuple(a.name for a in anchors_for("gate_up_swiglu"))))  # fmt: skip
    return cases


def parse(argv):
    parser = argparse.ArgumentParser(
        description="Check and time the decode kernels (GEMV, quantized GEMV, fused ops) "
        "beside torch, torch.compile and the optional anchors, under the harness and "
        "triton.testing.do_bench; judge the targets.",
        epilog="parts: " + ", ".join(PARTS),
    )
    parser.add_argument("--out", default=os.environ.get("OUT"),
                        help="folder for the JSON document (default $OUT, else "
                        "benchmarks/results/<card>/decode in a source checkout, else "
                        "./kernelab-results/<gpu>/decode)")  # fmt: skip
    parser.add_argument("--only", default=",".join(PARTS), help=f"comma list of {', '.join(PARTS)}")
    parser.add_argument("--quick", action="store_true",
                        help=f"batches {QUICK_BATCHES}, fused rows {QUICK_FUSED_ROWS}")  # fmt: skip
    parser.add_argument("--gpu", default="h100-sxm", help="catalog GPU of the roofline walk")
    parser.add_argument("--dry-run", action="store_true",
                        help="print the plan, the anchors' availability and the targets; no GPU")  # fmt: skip
    args = parser.parse_args(argv)
    args.parts = [p.strip() for p in args.only.split(",") if p.strip()]
    unknown = [p for p in args.parts if p not in PARTS]
    if unknown:
        parser.error(f"unknown part(s) {', '.join(unknown)}; parts: {', '.join(PARTS)}")
    return args


def roofline_rows(gpu: str) -> list[dict]:
    from kernelab.ops.gemv.roofline_walk import walk

    rows = []
    for label, n, k in WEIGHTS:
        result = walk(n, k, gpu=gpu, dtype="bf16")
        for point in result["points"]:
            rows.append({"part": "roofline", "case": f"{label} m={point.m}", "gpu": result["gpu"],
                         "intensity": point.intensity, "attainable_tflops":
                         point.attainable_tflops, "floor_us": point.floor_us,
                         "bound": point.bound, "ridge": result["ridge"],
                         "crossover_m": result["crossover_m"]})  # fmt: skip
    return rows


def say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


# ---- measuring ----------------------------------------------------------------------------


@dataclass
class Run:
    identity: object
    path: Path
    max_time_s: float
    device: str = "cuda"  # the tests run the measuring code on the CPU with a stand-in timer
    records: list = field(default_factory=list)
    anchors: dict = field(default_factory=dict)  # anchor -> None (it ran) or why it did not
    failures: list = field(default_factory=list)
    sessions: dict = field(default_factory=dict)

    def session(self, op: str, dtype: str):
        from kernelab.harness.bench import BenchSession
        from kernelab.spec.reference import get_op

        if (op, dtype) not in self.sessions:
            self.sessions[(op, dtype)] = BenchSession(self.identity, get_op(op), dtype, "cold",
                                                      10, self.max_time_s, self.device)  # fmt: skip
        return self.sessions[(op, dtype)]

    def synchronize(self) -> None:
        import torch

        if self.device.startswith("cuda"):
            torch.cuda.synchronize()

    def fail(self, what: str, exc_or_text) -> None:
        text = exc_or_text if isinstance(exc_or_text, str) else _first_line(exc_or_text)
        self.failures.append(f"{what}: {text}")
        say(f"  FAILED {what}: {text}")

    def save(self, verdicts=None) -> None:
        from kernelab.environment import software_versions
        from kernelab.harness.records import save_records

        document = {"gpu": self.identity.name, "gpu_id": self.identity.gpu_id,
                    "versions": software_versions(), "failures": self.failures,
                    "anchors": [{"anchor": name, "ran": why is None, "why_not": why}
                                for name, why in sorted(self.anchors.items())],
                    "targets": verdicts or []}  # fmt: skip
        save_records(self.records, self.path, document=document)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:200]}" if text else type(exc).__name__


def _anchor_impl(run: Run, anchor):
    """(Implementation, callable) of a decode_anchors entry, or None (said once) when absent."""
    from kernelab.spec.registry import Implementation

    if run.anchors.get(anchor.name):
        return None
    try:
        fn = anchor.build()
    except Absent as exc:
        run.anchors[anchor.name] = str(exc)
        say(f"  anchor {anchor.name}: absent ({exc})")
        return None
    run.anchors[anchor.name] = None
    impl = Implementation(name=anchor.name, op=anchor.op, build=lambda: fn,
                          dtypes=("bf16", "fp16", "fp32"), description=anchor.note,
                          is_baseline=True)  # fmt: skip
    return impl, fn


def do_bench_samples(fn) -> list[float]:
    import triton.testing

    return list(triton.testing.do_bench(fn, return_mode="all", **DO_BENCH))


def do_bench_record(harness, samples: list[float], note: str | None = None):
    """The do_bench twin of a harness record: the same case, its samples and figures."""
    from kernelab.harness.records import Record
    from kernelab.harness.stats import summarize

    stats = summarize(samples).to_dict()
    seconds = stats["median"] * 1e-3
    extra = {"suite": SUITE, "role": harness.extra.get("role"), "case": harness.extra.get("case"),
             "timer": f"triton.testing.do_bench({DO_BENCH}, return_mode='all'), two rounds "
             "in alternating order, samples pooled",
             "harness_median_ms": harness.median_ms,
             "host_cost": harness.extra.get("host_cost"), **({"anchor_note": note} if note else {})}  # fmt: skip
    return Record(op=harness.op, implementation=harness.implementation, shape=dict(harness.shape),
                  dtype=harness.dtype, mode="do_bench", math_mode=harness.math_mode,
                  samples_ms=list(samples), stats=stats, gpu=harness.gpu, gpu_id=harness.gpu_id,
                  driver=harness.driver, versions=harness.versions, flops=harness.flops,
                  bytes=harness.bytes,
                  achieved_tflops=harness.flops / seconds / 1e12 if harness.flops else None,
                  achieved_gbps=harness.bytes / seconds / 1e9 if harness.bytes else None,
                  check=harness.check, extra=extra)  # fmt: skip


def copy_part(run: Run) -> None:
    """The copy ceiling under both timers (lab.decode.copy_record: the harness's)."""
    import torch

    from kernelab.lab.decode import COPY_BYTES, copy_record

    harness = copy_record(run.identity, run.max_time_s)
    harness.extra["timer"] = "kernelab.harness.timing.benchmark cold, median"
    src = torch.empty(COPY_BYTES // 4, dtype=torch.int32, device="cuda").random_()
    dst = torch.empty_like(src)
    samples = do_bench_samples(lambda: dst.copy_(src)) + do_bench_samples(lambda: dst.copy_(src))
    twin = do_bench_record(harness, samples)
    twin.achieved_gbps = harness.bytes / twin.median_ms / 1e6
    run.records += [harness, twin]
    say(f"  copy ceiling: {harness.achieved_gbps:,.0f} GB/s (harness), "
        f"{twin.achieved_gbps:,.0f} GB/s (do_bench)")  # fmt: skip


def measure_case(run: Run, case: Case) -> None:
    """Each candidate checked and timed by the harness, then all of them under do_bench."""
    from kernelab.spec import registry
    from kernelab.spec.reference import get_op

    built = [(registry.get(name), registry.get(name).build(), None) for name in case.candidates]
    for anchor in [a for a in anchors_for(case.op) if a.name in case.anchors]:
        found = _anchor_impl(run, anchor)
        if found is not None:
            built.append((*found, anchor.note))
    session, timed = run.session(case.op, case.dtype), []
    for impl, fn, note in built:
        what = f"{impl.name} {case.label} {case.dtype}"
        try:
            row, record = session.one(impl, fn, case.shape)
        except Exception as exc:  # an anchor's API, a compile failure: one line, go on
            run.fail(what, exc)
            continue
        if record is None:
            run.fail(what, f"check failed: {row.get('check_message', '')[:160]}")
            continue
        record.extra.update(suite=SUITE, role=case.role, case=case.label,
                            timer="kernelab.harness cold (L2 flushed), median",
                            **({"anchor_note": note} if note else {}))  # fmt: skip
        run.records.append(record)
        timed.append((impl, fn, note, record))
    inputs = get_op(case.op).make_inputs(case.shape, case.dtype, seed=0, device=run.device)
    samples = {impl.name: [] for impl, *_ in timed}
    for order in (timed, timed[::-1]):
        for impl, fn, *_ in order:
            fn(*inputs)  # an anchor converts its inputs once, outside the timed calls
            samples[impl.name] += do_bench_samples(lambda fn=fn: fn(*inputs))
    for impl, _, note, record in timed:
        twin = do_bench_record(record, samples[impl.name], note)
        run.records.append(twin)
        say(f"  {impl.name:32} {case.label:26} {case.dtype}: {record.median_ms * 1e3:8.1f} us "
            f"harness, {twin.median_ms * 1e3:8.1f} us do_bench, host "
            f"{record.extra['host_cost']['host_us']:.1f} us/call")  # fmt: skip
    if case.int4_anchors:
        measure_int4_anchors(run, case)


def measure_int4_anchors(run: Run, case: Case) -> None:
    """torchao's and gemlite's int4 weight-only GEMVs, which quantize the bf16 weights to
    their own grid: checked against the float64 product of the unquantized weights, to
    within twice kernelab's int4 error there plus bf16's rounding, then timed like the rest."""
    import torch

    from kernelab.harness.launch_cost import measure_host_cost
    from kernelab.harness.records import Record
    from kernelab.harness.timing import benchmark
    from kernelab.harness.tolerances import threshold
    from kernelab.ops.quant_gemv import quant_gemv_int4
    from kernelab.spec.decode import pack_int4
    from kernelab.spec.reference import get_op

    mnk = {key: case.shape[key] for key in ("m", "n", "k")}
    group = case.shape["group"]

    def error(out, exact):
        return float((out.double() - exact).norm() / exact.norm())

    x, w = get_op("gemv").make_inputs(mnk, "bf16", seed=7, device=run.device)
    exact = x.double() @ w.double().t()
    limit = 2 * error(quant_gemv_int4(x, *pack_int4(w, group, zero_points=False), group),
                      exact) + threshold("bf16")  # fmt: skip
    x0, w0 = get_op("gemv").make_inputs(mnk, "bf16", seed=0, device=run.device)
    cost = get_op(case.op).cost(case.shape, case.dtype)
    for name, (_, note) in INT4_ANCHORS.items():
        if run.anchors.get(name):
            continue
        what = f"{name} {case.label}"
        try:
            out = build_int4(name, w, group)(x)
            err = error(out, exact)
            if not (torch.isfinite(out).all() and err <= limit):
                run.fail(what, f"check failed: error {err:.3g} > {limit:.3g}")
                continue
            forward = build_int4(name, w0, group)
            call = lambda forward=forward: forward(x0)  # noqa: E731
            call()
            timing = benchmark(call, mode="cold", min_samples=10, max_time_s=run.max_time_s)
            host = measure_host_cost(call, timing.median_ms, synchronize=run.synchronize)
            samples = do_bench_samples(call) + do_bench_samples(call)
        except Absent as exc:
            run.anchors[name] = str(exc)
            say(f"  anchor {name}: absent ({exc})")
            continue
        except Exception as exc:
            run.fail(what, exc)
            continue
        run.anchors[name] = None
        seconds = timing.median_ms * 1e-3
        record = Record(op=case.op, implementation=name, shape=dict(case.shape), dtype=case.dtype,
                        mode=timing.mode, samples_ms=list(timing.samples_ms),
                        stats=timing.summary.to_dict(), gpu=run.identity.name,
                        gpu_id=run.identity.gpu_id, driver=run.identity.driver,
                        versions=run.session(case.op, case.dtype).versions,
                        flops=cost.flops, bytes=cost.bytes,
                        achieved_tflops=cost.flops / seconds / 1e12,
                        achieved_gbps=cost.bytes / seconds / 1e9,
                        check={"ok": True, "error": err, "threshold": limit,
                               "against": "float64 x @ W^T of the unquantized bf16 weights"},
                        extra={"suite": SUITE, "role": case.role, "case": case.label,
                               "timer": "kernelab.harness cold (L2 flushed), median",
                               "host_cost": host.to_dict(), "anchor_note": note,
                               "bytes_are": "kernelab's int4 format's (the anchor's own "
                               "scales and zeros differ)"})  # fmt: skip
        run.records += [record, do_bench_record(record, samples, note)]
        say(f"  {name:32} {case.label:26}: {timing.median_ms * 1e3:8.1f} us harness")


# ---- main ---------------------------------------------------------------------------------


def dry_run(args) -> int:
    from decode_anchors import ANCHORS, availability
    from judge_decode import TARGETS

    cases = plan(args.parts, args.quick)
    print(f"{len(cases)} cases ({'quick' if args.quick else 'full'}), parts "
          f"{', '.join(args.parts)}:")  # fmt: skip
    for case in cases:
        anchors = f"; anchors {', '.join(case.anchors)}" if case.anchors else ""
        int4 = f"; {', '.join(INT4_ANCHORS)}" if case.int4_anchors else ""
        print(f"  {case.role:6} {case.op:20} {case.label:26} {case.dtype}: "
              f"{', '.join(case.candidates)}{anchors}{int4}")  # fmt: skip
    for package, why in availability():
        print(f"anchor package {package}: {'imports' if why is None else why}")
    print(f"anchors: {', '.join(a.name for a in ANCHORS)}, {', '.join(INT4_ANCHORS)}")
    for target in TARGETS:
        print(f"target: {target}")
    return 0


def main(argv=None) -> int:
    from kernelab.errors import KernelabError

    args = parse(argv)
    if args.dry_run:
        return dry_run(args)
    try:
        walk = roofline_rows(args.gpu) if "roofline" in args.parts else []
    except KernelabError as exc:  # an unknown --gpu: one line, exit 2
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.parts == ["roofline"]:  # pure arithmetic: no GPU needed
        import json

        print(json.dumps(walk, indent=1))
        return 0
    import torch

    if not torch.cuda.is_available():
        print("error: the measured parts need a CUDA GPU (only --only roofline runs without)",
              file=sys.stderr)  # fmt: skip
        return 2
    from judge_decode import judge, print_verdicts

    from kernelab.harness.ceilings import this_gpu
    from kernelab.harness.records import default_results_dir

    identity = this_gpu("decode_kernels.py")
    folder = Path(args.out) if args.out else default_results_dir(identity.key, "decode")
    folder.mkdir(parents=True, exist_ok=True)
    run = Run(identity, folder / f"decode_kernels_{time.strftime('%Y%m%d-%H%M%S')}.json",
              0.2 if args.quick else 0.5)  # fmt: skip
    say(f"decode kernels on {identity.name}: {run.path}")
    if any(p in args.parts for p in ("copy", "gemv", "fused", "gate_up")):
        copy_part(run)
    for case in plan(args.parts, args.quick):
        try:
            measure_case(run, case)
        except Exception as exc:  # one broken case must not hide the others
            run.fail(f"{case.op} {case.label}", exc)
        run.save()  # after every case: a run cut short keeps what it measured
    verdicts = judge(run.records, identity.name)
    run.save(verdicts)
    print_verdicts(verdicts, run)
    return 0


if __name__ == "__main__":
    sys.exit(main())
