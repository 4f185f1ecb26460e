"""The Triton kernels on this GPU: each checked, then timed against its teaching kernel, torch
eager, torch.compile and cuBLAS in one run, printed as one table and written as JSON records.

    PYTHONPATH=src python3 benchmarks/triton_kernels.py [--out DIR] [--only softmax,matmul]
        [--no-compile] [--quick | --sweep]

--out: default $OUT, else benchmarks/results/<card>/triton of this GPU in a source checkout
(kernelab.harness.records.default_results_dir), else ./kernelab-results/<gpu>/triton.

--sweep: issue 5's target grid for softmax and the norms, judged against the targets:
softmax cols 512..262,144 (powers of two) x fp32, bf16 must reach >= 4.0 TB/s; layernorm and
rmsnorm at hidden 1,024..16,384 x bf16, fp32 >= 90 % of the copy ceiling of the same run.
Each case records the launch configuration the autotuner chose and the tuner's ranking of
every candidate (do_bench median, L2 flushed), so a miss says which knob to turn next.

Parts: copy (the bandwidth ceiling, measured here), vector_add, softmax, norms, matmul.
Beside each fast kernel, at the same shapes, its teaching kernel (triton.<op>.teaching: the
tutorial form each op folder starts with), checked and timed the same way; where it does not
take a case (the teaching softmax holds a row in registers: at most 16,384 columns; the
teaching matmul takes no fp8) the row says why and nothing is timed.
Rates: memory-bound ops in TB/s from the cost model's bytes (softmax: one read + one write)
and as % of the device-to-device copy measured in the same run; matmul in TFLOP/s and as %
of cuBLAS (torch.mm; fp8: torch._scaled_mm with unit scales) in the same run. Timer:
kernelab.harness.timing.benchmark in cold mode (L2 flushed between calls, median) when it
imports, else triton.testing.do_bench (median, L2 flushed); the table says which.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
import time
import traceback
from pathlib import Path

PARTS = ("copy", "vector_add", "softmax", "norms", "matmul")
GIB = 1 << 30
SOFTMAX_COLS = (512, 1024, 4096, 16384, 32768, 65536, 131072, 262144)
NORM_COLS = (1024, 4096, 8192, 16384)
SWEEP_SOFTMAX_COLS = tuple(1 << p for p in range(9, 19))  # 512 .. 262,144
SWEEP_NORM_COLS = (1024, 2048, 4096, 8192, 16384)
SOFTMAX_TARGET_TBPS = 4.0
NORM_TARGET_OF_COPY = 0.90
MATMUL_SIZES = (1024, 2048, 4096, 8192)
QUICK_SOFTMAX_COLS = (1024, 16384, 262144)
QUICK_NORM_COLS = (4096,)
QUICK_MATMUL_SIZES = (4096,)
# Each op's teaching kernel in the registry (kernelab.ops.<op>.teaching), timed beside the
# fast path of the same op at the same shapes.
TEACHING = {
    "vector_add": "triton.vector_add.teaching",
    "softmax": "triton.softmax.teaching",
    "layernorm": "triton.layernorm.teaching",
    "rmsnorm": "triton.rmsnorm.teaching",
    "gemm": "triton.matmul.teaching",
}


def make_timer():
    """(time_ms(fn) -> (median_ms, detail dict), label)."""
    try:
        from kernelab.harness.timing import benchmark

        def time_ms(fn, max_time_s=0.6):
            timing = benchmark(fn, mode="cold", min_samples=10, max_time_s=max_time_s)
            return timing.median_ms, {
                "samples_ms": list(timing.samples_ms),
                "rel_noise": timing.rel_noise,
                "clocks": timing.clocks,
                "throttled": timing.throttled,
            }

        return time_ms, "kernelab.harness.timing.benchmark (cold: L2 flushed, median)"
    except ImportError:
        import triton

        def time_ms(fn, max_time_s=0.6):
            rep = max(20, int(max_time_s * 300))
            return triton.testing.do_bench(fn, warmup=25, rep=rep, return_mode="median"), {}

        return time_ms, "triton.testing.do_bench (L2 flushed, median)"


class Run:
    """Collects results, the rows of the final table and the JSON records.

    device: "cuda", or "cpu" for the tests (Triton's interpreter at small shapes, with a
    stand-in timer: what a CPU run times is no measurement)."""

    def __init__(self, args, device: str = "cuda"):
        import torch

        from kernelab.runtime.tuner import interpreting

        self.args = args
        self.torch = torch
        self.device_type = device
        self.interpreting = interpreting()  # the CPU interpreter rounds bf16 toward zero
        self.time_ms, self.timer_label = make_timer()
        self.rows: list[dict] = []
        self.records: list[dict] = []
        self.copy_tbps: float | None = None
        on_gpu = device == "cuda"
        self.device = torch.cuda.get_device_name() if on_gpu else device
        if args.out:
            out = Path(args.out)
        else:
            from kernelab.harness.ceilings import this_gpu
            from kernelab.harness.records import default_results_dir

            key = this_gpu("triton_kernels.py").key if on_gpu else None
            out = default_results_dir(key, "triton")
        out.mkdir(parents=True, exist_ok=True)
        kind = "sweep" if args.sweep else "quick" if args.quick else "run"
        self.path = out / f"triton_kernels_{kind}_{time.strftime('%Y%m%d-%H%M%S')}.json"

    def judge_last(self, *, target_tbps=None, target_of_copy=None) -> None:
        """Mark the last row with its target and whether the Triton kernel met it."""
        row = self.rows[-1]
        if target_of_copy is not None:
            target_tbps = target_of_copy * self.copy_tbps if self.copy_tbps else None
            row["target"] = f">= {100 * target_of_copy:.0f} % of copy"
        else:
            row["target"] = f">= {target_tbps} TB/s"
        row["target_tbps"] = target_tbps
        row["met"] = bool(row["triton"] and target_tbps and row["triton"] >= target_tbps)
        self.save()

    def targets(self) -> dict:
        """Per op and dtype: cases judged, cases met, the worst case."""
        summary = {}
        for row in self.rows:
            if "met" not in row:
                continue
            entry = summary.setdefault(
                f"{row['part']} {row['dtype']}", {"cases": 0, "met": 0, "worst": None}
            )
            entry["cases"] += 1
            entry["met"] += row["met"]
            worst = entry["worst"]
            if row["triton"] and (worst is None or row["triton"] < worst["tbps"]):
                entry["worst"] = {"case": row["case"], "tbps": row["triton"]}
        return summary

    def save(self) -> None:
        """Write everything so far (a run cut short still leaves its records)."""
        from kernelab.environment import software_versions

        document = {
            "gpu": self.device,
            "timer": self.timer_label,
            "copy_tbps": self.copy_tbps,
            "versions": software_versions(),
            "targets": self.targets(),
            "rows": self.rows,
            "records": self.records,
        }
        self.path.write_text(json.dumps(document, indent=1, default=str))

    def compiled(self, fn):
        if self.args.no_compile:
            return None
        return self.torch.compile(fn, dynamic=False)

    def free(self) -> None:
        if self.device_type == "cuda":
            self.torch.cuda.empty_cache()

    def check(self, name, fn, op, shape, dtype) -> dict:
        from kernelab.harness.check import check_implementation

        report = check_implementation(fn, op, shape, dtype, trials=1, device=self.device_type,
                                      bf16_truncates=self.interpreting)  # fmt: skip
        if not report.ok:
            print(f"  CHECK FAILED {name} {shape} {dtype}: {report.message}", file=sys.stderr)
        return {"ok": report.ok, "error": report.error, "threshold": report.threshold}

    def measure(self, fn, *inputs):
        try:
            # the sweep has 40 cases to fit in a few minutes; 1 GiB calls converge in ~0.2 s
            max_time_s = 0.3 if self.args.sweep else 0.6
            median, detail = self.time_ms(lambda: fn(*inputs), max_time_s=max_time_s)
            return median, detail, None
        except Exception as exc:  # a baseline that cannot run here (compile error, no fp8)
            return None, {}, f"{type(exc).__name__}: {str(exc).splitlines()[0][:120]}"

    def record(self, op, impl, shape, dtype, cost, median_ms, detail, check=None, extra=None):
        rate = None
        if median_ms:
            seconds = median_ms * 1e-3
            rate = {"tbps": cost.bytes / seconds / 1e12, "tflops": cost.flops / seconds / 1e12}
        self.records.append(
            {
                "op": op,
                "implementation": impl,
                "shape": shape,
                "dtype": dtype,
                "median_ms": median_ms,
                "flops": cost.flops,
                "bytes": cost.bytes,
                "achieved_tbps": rate and rate["tbps"],
                "achieved_tflops": rate and rate["tflops"],
                "check": check or {},
                "gpu": self.device,
                "timer": self.timer_label,
                "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime()),
                "extra": extra or {},
                **detail,
            }
        )
        return rate


def guarded(run, part, label, dtype, case) -> None:
    """Run one case; an exception becomes an ERROR row and the sweep goes on."""
    started = time.time()
    try:
        case()
    except Exception as exc:
        traceback.print_exc()
        run.rows.append(error_row(part, f"{label} ERROR", dtype, exc))
    # wall time of the case: input, check (with autotuning), three timings, torch.compile
    run.rows[-1]["wall_s"] = round(time.time() - started, 2)
    run.save()


def error_row(part, case, dtype, exc=None) -> dict:
    return {
        "part": part,
        "case": case,
        "dtype": dtype,
        "check": "",
        "triton": None,
        "pct": None,
        "pct_of": "",
        "eager": None,
        "compile": None,
        "unit": "",
        "error": None if exc is None else f"{type(exc).__name__}: {str(exc)[:300]}",
    }


def teaching_kernel(op, shape, dtype):
    """(registry name, callable, None) of op's teaching kernel (TEACHING), or (name, None, why)
    where it does not take this case: a dtype it lacks, or a row longer than the MAX_COLS its
    module holds in registers."""
    import importlib

    from kernelab.spec.registry import get

    impl = get(TEACHING[op])
    if dtype not in impl.dtypes:
        return impl.name, None, f"takes {', '.join(impl.dtypes)}, not {dtype}"
    fn = impl.build()
    limit = getattr(importlib.import_module(fn.__module__), "MAX_COLS", None)
    if limit is not None and shape.get("cols", 0) > limit:
        return impl.name, None, f"holds a row in registers: at most {limit} columns"
    return impl.name, fn, None


def teaching_fields(name, check, rate, refused) -> dict:
    """The teaching kernel's columns of a table row."""
    fields = {"teaching": rate, "teaching_check": "" if check is None else
              "ok" if check["ok"] else "FAIL"}  # fmt: skip
    if refused:
        fields["teaching_note"] = f"{name} {refused}"
    return fields


def memory_case(
    run, op, shape, dtype, triton_fn, inputs, eager_fn, label, extra=None, describe=None
):
    """Check the Triton kernel and its teaching kernel, time both, torch eager and
    torch.compile; one table row.

    describe(), if given, is called after the check (where autotuning happened) and its
    dict joins `extra`: the chosen launch configuration and the tuner's ranking.
    """
    from kernelab.spec.reference import OPS

    cost = OPS[op].cost(shape, dtype)
    check = run.check(f"triton.{op}", triton_fn, op, shape, dtype)
    if describe is not None:
        extra = {**(extra or {}), **describe()}
    teaching, teaching_fn, refused = teaching_kernel(op, shape, dtype)
    teaching_check = run.check(teaching, teaching_fn, op, shape, dtype) if teaching_fn else None
    row = {"part": op, "case": label, "dtype": dtype, "check": "ok" if check["ok"] else "FAIL"}
    results = {}
    for impl, name, fn, impl_check, impl_extra in (
        ("triton", f"triton.{op}", triton_fn, check, extra),
        ("teaching", teaching, teaching_fn, teaching_check, None),
        ("eager", f"eager.{op}", eager_fn, None, extra),
        ("compile", f"compile.{op}", run.compiled(eager_fn), None, extra),
    ):
        if fn is None:
            continue
        median, detail, error = run.measure(fn, *inputs)
        rate = run.record(
            op,
            name,
            shape,
            dtype,
            cost,
            median,
            detail,
            impl_check,
            {"error": error, **(impl_extra or {})},
        )
        results[impl] = rate["tbps"] if rate else None
    row.update({k: results.get(k) for k in ("triton", "eager", "compile")})
    row.update(teaching_fields(teaching, teaching_check, results.get("teaching"), refused))
    row["unit"] = "TB/s"
    row["pct"] = 100 * row["triton"] / run.copy_tbps if row["triton"] and run.copy_tbps else None
    row["pct_of"] = "copy"
    row.update(extra or {})
    run.rows.append(row)
    run.save()
    print(
        f"  {op} {label} {dtype}: triton {fmt(row['triton'])} TB/s, teaching "
        f"{fmt(row['teaching'])}, eager {fmt(row['eager'])}, compile {fmt(row['compile'])}",
        file=sys.stderr,
    )


def part_copy(run):
    torch = run.torch
    x = torch.empty(GIB // 4, device=run.device_type, dtype=torch.float32).normal_()
    y = torch.empty_like(x)
    median, _, _ = run.measure(lambda: y.copy_(x))
    run.copy_tbps = 2 * GIB / (median * 1e-3) / 1e12  # read 1 GiB + write 1 GiB
    print(f"  copy ceiling: {run.copy_tbps:.2f} TB/s", file=sys.stderr)
    run.records.append(
        {
            "op": "copy",
            "implementation": "torch.copy_",
            "bytes": 2 * GIB,
            "median_ms": median,
            "achieved_tbps": run.copy_tbps,
            "gpu": run.device,
        }
    )


def part_vector_add(run):
    from kernelab.ops.vector_add import vector_add
    from kernelab.spec.reference import OPS

    for dtype in ("fp32",) if run.args.quick else ("fp32", "bf16"):
        n = GIB // (4 if dtype == "fp32" else 2)  # 1 GiB per operand
        shape = {"n": n}
        inputs = OPS["vector_add"].make_inputs(shape, dtype, 0, run.device_type)
        memory_case(run, "vector_add", shape, dtype, vector_add, inputs, torch_add, f"n={n}")


def torch_add(x, y):
    return x + y


def torch_softmax(x):
    import torch

    return torch.softmax(x, dim=-1)


def tuning_for(key_prefix) -> dict:
    """The tuner's rankings whose key starts with key_prefix (what the last case tuned)."""
    from kernelab.runtime.tuner import TUNING_LOG

    return {
        str(key): ranking
        for key, ranking in TUNING_LOG.items()
        if key[: len(key_prefix)] == key_prefix
    }


def part_softmax(run):
    from kernelab.ops import softmax as module

    if run.args.sweep:
        cols_list = SWEEP_SOFTMAX_COLS
    else:
        cols_list = QUICK_SOFTMAX_COLS if run.args.quick else SOFTMAX_COLS
    for dtype in ("fp32", "bf16"):
        for cols in cols_list:
            rows = max(1, GIB // (4 * cols) if dtype == "fp32" else GIB // (2 * cols))
            guarded(
                run,
                "softmax",
                f"{rows}x{cols}",
                dtype,
                functools.partial(softmax_case, run, module, rows, cols, dtype),
            )
            run.free()


def softmax_case(run, module, rows, cols, dtype):
    from kernelab.spec.reference import OPS

    shape = {"rows": rows, "cols": cols}
    inputs = OPS["softmax"].make_inputs(shape, dtype, 0, run.device_type)

    def describe():
        x = inputs[0]
        config = module.config_for(x)
        tuner = config.pop("tuner", None) or "softmax.rows"
        info = {"path": config["path"], "config": dict(config)}
        info["tuning"] = tuning_for((tuner, 1 << (cols - 1).bit_length(), x.dtype))
        if tuner == "softmax.long_rows":
            info["occupancy"] = module.long_row_plan(x, config)
        return info

    memory_case(
        run,
        "softmax",
        shape,
        dtype,
        module.softmax,
        inputs,
        torch_softmax,
        f"{rows}x{cols}",
        describe=describe,
    )
    run.judge_last(target_tbps=SOFTMAX_TARGET_TBPS)


def torch_layernorm(x, w, b, eps):
    import torch.nn.functional as F

    return F.layer_norm(x, (x.shape[-1],), w, b, eps)


def torch_rmsnorm(x, w, eps):
    from kernelab.spec.reference import OPS

    return OPS["rmsnorm"].torch_eager(x, w, eps)


def part_norms(run):
    from kernelab.ops import norms

    if run.args.sweep:
        cols_list = SWEEP_NORM_COLS
    else:
        cols_list = QUICK_NORM_COLS if run.args.quick else NORM_COLS
    for op, fn, eager in (
        ("layernorm", norms.layernorm, torch_layernorm),
        ("rmsnorm", norms.rmsnorm, torch_rmsnorm),
    ):
        for dtype in ("bf16", "fp32"):
            for cols in cols_list:
                rows = GIB // ((4 if dtype == "fp32" else 2) * cols)
                case = functools.partial(norm_case, run, norms, op, fn, eager, rows, cols, dtype)
                guarded(run, op, f"{rows}x{cols}", dtype, case)
                run.free()


def norm_case(run, norms, op, fn, eager, rows, cols, dtype):
    from kernelab.spec.reference import OPS

    shape = {"rows": rows, "cols": cols}
    inputs = OPS[op].make_inputs(shape, dtype, 0, run.device_type)
    is_rms = op == "rmsnorm"

    def describe():
        x, weight = inputs[0], inputs[1]
        bias = None if is_rms else inputs[2]
        config = norms.config_for(x, weight, bias, is_rms=is_rms)
        block = 1 << (cols - 1).bit_length()
        return {
            "path": config.pop("path"),
            "config": config,
            "tuning": tuning_for(("norms", block, x.dtype, weight.dtype, is_rms)),
        }

    memory_case(run, op, shape, dtype, fn, inputs, eager, f"{rows}x{cols}", describe=describe)
    run.judge_last(target_of_copy=NORM_TARGET_OF_COPY)


def part_matmul(run):
    torch = run.torch
    from kernelab.ops.matmul import matmul
    from kernelab.spec.reference import OPS

    sizes = QUICK_MATMUL_SIZES if run.args.quick else MATMUL_SIZES
    fp8 = run.device_type == "cuda" and torch.cuda.get_device_capability() >= (8, 9)
    for dtype in ("bf16", "fp8") if fp8 else ("bf16",):
        for size in sizes:
            shape = {"m": size, "n": size, "k": size}
            cost = OPS["gemm"].cost(shape, dtype)
            a, b = OPS["gemm"].make_inputs(shape, dtype, 0, run.device_type)
            b_kmajor = b.T.contiguous().T  # what weights look like, and what _scaled_mm wants
            variants = {"triton": functools.partial(matmul, a, b_kmajor)}
            if dtype == "bf16":
                variants["cublas"] = functools.partial(torch.mm, a, b)
                if size >= 4096:
                    variants["triton-ws"] = functools.partial(
                        matmul, a, b_kmajor, warp_specialize=True
                    )
                    variants["triton-plain"] = functools.partial(matmul, a, b, path="plain")
            else:
                one = torch.ones((), device=run.device_type, dtype=torch.float32)
                variants["cublas"] = functools.partial(
                    torch._scaled_mm,
                    a,
                    b_kmajor,
                    scale_a=one,
                    scale_b=one,
                    out_dtype=torch.bfloat16,
                )
            check = run.check(
                "triton.matmul", lambda a, b: matmul(a, b.T.contiguous().T), "gemm", shape, dtype
            )
            # the teaching kernel on b as the tutorial takes it (row-major [K, N])
            teaching, teaching_fn, refused = teaching_kernel("gemm", shape, dtype)
            teaching_check = None
            if teaching_fn is not None:
                teaching_check = run.check(teaching, teaching_fn, "gemm", shape, dtype)
                variants["teaching"] = functools.partial(teaching_fn, a, b)
            names = {"teaching": teaching}
            checks = {"triton": check, "teaching": teaching_check}
            rates, errors = {}, {}
            for impl, fn in variants.items():
                median, detail, error = run.measure(fn)
                rate = run.record(
                    "gemm",
                    names.get(impl, f"{impl}.gemm"),
                    shape,
                    dtype,
                    cost,
                    median,
                    detail,
                    checks.get(impl),
                    {"error": error},
                )
                rates[impl] = rate["tflops"] if rate else None
                errors[impl] = error
            row = {
                "part": "matmul",
                "case": f"{size}^3",
                "dtype": dtype,
                "check": "ok" if check["ok"] else "FAIL",
                "triton": rates["triton"],
                "eager": rates.get("cublas"),
                "compile": None,
                "unit": "TFLOP/s",
                "pct_of": "cuBLAS",
                "pct": 100 * rates["triton"] / rates["cublas"]
                if rates["triton"] and rates.get("cublas")
                else None,
                "ws": rates.get("triton-ws"),
                "plain": rates.get("triton-plain"),
                "ws_error": errors.get("triton-ws"),
                **teaching_fields(teaching, teaching_check, rates.get("teaching"), refused),
            }
            run.rows.append(row)
            print(
                f"  matmul {size}^3 {dtype}: triton {fmt(rates['triton'])} TFLOP/s, teaching "
                f"{fmt(rates.get('teaching'))}, cuBLAS {fmt(rates.get('cublas'))}, ws "
                f"{fmt(rates.get('triton-ws'))}, plain {fmt(rates.get('triton-plain'))}",
                file=sys.stderr,
            )
            del a, b, b_kmajor


def fmt(value, digits=2):
    return "-" if value is None else f"{value:.{digits}f}"


def print_table(run):
    print(f"\nTriton kernels on {run.device}; timer: {run.timer_label}")
    print(f"copy ceiling measured in this run: {fmt(run.copy_tbps)} TB/s (read + write)\n")
    header = (f"{'part':<11}{'case':<15}{'dtype':<6}{'check':<6}{'triton':>9}{'%':>7}  {'of':<7}"
              f"{'teaching':>9}{'eager':>9}{'compile':>9}  unit     notes")  # fmt: skip
    print(header)
    print("-" * len(header))
    for r in run.rows:
        notes = r.get("path") or ""
        if r.get("config"):
            notes += " " + ",".join(f"{k}={v}" for k, v in r["config"].items())
        if "met" in r:
            notes = ("MET " if r["met"] else "MISS ") + notes
        if r["part"] == "matmul":
            notes = f"ws {fmt(r.get('ws'), 0)} plain {fmt(r.get('plain'), 0)}"
            if r.get("ws_error"):
                notes += f" (ws: {r['ws_error'][:40]})"
        if r.get("teaching_check") == "FAIL":
            notes += " (teaching: CHECK FAILED)"
        if r.get("teaching_note"):
            notes += f" (teaching: {r['teaching_note'].split(' ', 1)[-1]})"
        print(
            f"{r['part']:<11}{r['case']:<15}{r['dtype']:<6}{r['check']:<6}{fmt(r['triton']):>9}"
            f"{fmt(r['pct'], 1):>7}  {r['pct_of']:<7}{fmt(r.get('teaching')):>9}"
            f"{fmt(r['eager']):>9}{fmt(r['compile']):>9}  {r['unit']:<8} {notes}"
        )
    targets = run.targets()
    if targets:
        print("\ntargets (softmax >= 4.0 TB/s; norms >= 90 % of copy):")
        for name, entry in targets.items():
            worst = entry["worst"]
            worst_text = f"{worst['case']} {worst['tbps']:.2f} TB/s" if worst else "-"
            print(f"  {name:<16} met {entry['met']}/{entry['cases']}, worst {worst_text}")


def parse(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=None,
                        help="folder for the JSON document (default $OUT, else "
                        "benchmarks/results/<card>/triton in a source checkout, else "
                        "./kernelab-results/<gpu>/triton)")  # fmt: skip
    parser.add_argument("--only", default=",".join(PARTS), help=f"comma list of {', '.join(PARTS)}")
    parser.add_argument(
        "--no-compile", action="store_true", help="skip the torch.compile baselines"
    )
    sizes = parser.add_mutually_exclusive_group()
    sizes.add_argument("--quick", action="store_true", help="a few sizes per part")
    sizes.add_argument(
        "--sweep",
        action="store_true",
        help="issue 5's target grid for softmax and norms, judged (use with --only softmax,norms)",
    )
    args = parser.parse_args(argv)
    args.parts = [p.strip() for p in args.only.split(",") if p.strip()]
    unknown = [p for p in args.parts if p not in PARTS]
    if unknown:
        parser.error(f"unknown part(s) {', '.join(unknown)}; choose from {', '.join(PARTS)}")
    return args


def main(argv=None) -> int:
    args = parse(argv)
    parts = args.parts
    import torch

    if not torch.cuda.is_available():
        print("triton_kernels: needs a CUDA GPU", file=sys.stderr)
        return 2
    if not args.no_compile:
        torch._dynamo.config.cache_size_limit = 64  # one static graph per benchmarked shape
    run = Run(args)
    start = time.time()
    functions = {
        "copy": part_copy,
        "vector_add": part_vector_add,
        "softmax": part_softmax,
        "norms": part_norms,
        "matmul": part_matmul,
    }
    for part in ["copy"] + [p for p in parts if p != "copy"]:
        print(f"[{time.time() - start:6.1f}s] {part}", file=sys.stderr)
        try:
            functions[part](run)
        except Exception as exc:
            traceback.print_exc()
            run.rows.append(error_row(part, "ERROR", "", exc))
        torch.cuda.empty_cache()
    run.save()
    print(f"[{time.time() - start:6.1f}s] records: {run.path}", file=sys.stderr)
    print_table(run)
    return 0


if __name__ == "__main__":
    sys.exit(main())
