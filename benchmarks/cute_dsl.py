"""CuTe-DSL beside Triton (and QuACK, cuBLAS, the CUDA C++ ladder): speed, compile time, lines.

    PYTHONPATH=src python3 benchmarks/cute_dsl.py [--out DIR] [--dry-run]

1. Softmax and RMSNorm, forward and backward, rows of 1K..256K columns, fp32 and bf16:
   cute.<op> against triton.<op> (and cute.softmax, cute.rmsnorm and cute.rmsnorm_backward
   with bulk=True, their slices loaded by the TMA unit, as a column of their own), QuACK's softmax / rmsnorm forward (when `quack` imports;
   else one line) and the copy ceiling (torch's clone of the input, read + write). Each
   kernel is checked against the float64 reference before it is timed; its % of copy is its
   bandwidth over the op's minimal bytes (roofline.costs: forward 2, backward 3 tensors of
   the row data) against the copy's.
2. GEMM bf16 at 4096^3 and 8192^3: cute.gemm against cuBLAS (torch.mm), the CUDA C++
   ladder's top step and triton.matmul.
3. Compile time per language: the first call in this process (CuTe-DSL: its in-memory cache
   emptied; Triton: its on-disk cache kept, so the figure is a floor), then the warm launch
   (median wall time of a call at the smallest shape).
4. Lines of kernel code per language, counted from the files (no blanks, no comments).

5. --cpu-compile (no GPU needed): cold compile for sm_90a on this machine, each in a fresh
   process: the CuTe-DSL kernels lowered to a cubin (Python -> MLIR -> ptxas, the DSL's disk
   cache off) and nvcc on the CUDA C++ ladder's top step (kernelab's build cache bypassed).

Timer: kernelab.harness.timing.benchmark, cold (L2 flushed before every call), median.
Targets (ratios inside one run): softmax >= 90 % of copy at every row length, >= Triton at
>= 64K columns, >= QuACK; RMSNorm forward >= 90 % of copy, backward >= 80 %; GEMM >= 95 % of
cuBLAS. The softmax backward has no target: it is measured beside Triton's.
Writes cute_dsl.json under --out (a measured run without it: under $OUT, else under this
GPU's benchmarks/results/<card>/cute_dsl/); --dry-run prints the cases and line counts (no
GPU) and writes only where --out is given.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
import time
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "kernelab"
ROW_COLS = (1024, 4096, 16384, 32768, 65536, 131072, 262144)
ROW_OPS = ("softmax", "rmsnorm", "softmax_backward", "rmsnorm_backward")
# the CuTe row kernels with a bulk=True option (module under kernelab.ops, function)
BULK_OPS = {
    "softmax": ("softmax.cute_dsl", "softmax"),
    "rmsnorm": ("norms.cute_dsl", "rmsnorm"),
    "rmsnorm_backward": ("norms.cute_dsl_backward", "rmsnorm_backward"),
}
ROW_BYTES = 256 * 1024 * 1024  # rows per case: about this many input bytes
GEMM_SIZES = (4096, 8192)
TARGETS = {
    "softmax_pct_of_copy": 90.0,
    "rmsnorm_fwd_pct_of_copy": 90.0,
    "rmsnorm_bwd_pct_of_copy": 80.0,
    "gemm_pct_of_cublas": 95.0,
    "softmax_vs_triton_from_cols": 65536,
}
# the % of copy each row op is judged by (None: measured, not judged)
ROW_TARGET = {
    "softmax": "softmax_pct_of_copy",
    "rmsnorm": "rmsnorm_fwd_pct_of_copy",
    "softmax_backward": None,
    "rmsnorm_backward": "rmsnorm_bwd_pct_of_copy",
}
# kernel files per language and op: what the line counts are taken from (the CUDA C++ top
# step's headers are followed from its #include lines)
KERNEL_FILES = {
    "cute-dsl": {
        "softmax": ["ops/softmax/cute_dsl_kernel.py", "ops/cute_cluster.py"],
        "rmsnorm": ["ops/norms/cute_dsl_kernel.py", "ops/cute_cluster.py"],
        "softmax_backward": ["ops/softmax/cute_dsl_backward_kernel.py", "ops/cute_cluster.py"],
        "rmsnorm_backward": ["ops/norms/cute_dsl_backward_kernel.py", "ops/cute_cluster.py"],
        "gemm": ["ladders/hgemm/cute_dsl_kernel.py"],
    },
    "triton": {
        "softmax": ["ops/softmax/rows.py", "ops/softmax/cooperative.py",
                    "ops/softmax/exchange.py", "ops/softmax/chunks.py"],
        "rmsnorm": ["ops/norms/rows.py", "ops/norms/looped.py"],
        "softmax_backward": ["ops/softmax/backward.py"],
        "rmsnorm_backward": ["ops/norms/backward.py"],
        "gemm": ["ops/matmul/tma.py", "ops/matmul/plain.py"],
    },
}  # fmt: skip


def included(source: str) -> list[str]:
    """`source` (under src/kernelab) and every local header it includes, transitively."""
    found, todo = [], [source]
    while todo:
        current = todo.pop()
        if current in found:
            continue
        found.append(current)
        folder = Path(current).parent
        for line in (SRC / current).read_text().splitlines():
            if line.startswith('#include "'):
                todo.append(os.path.normpath(folder / line.split('"')[1]))
    return found


def kernel_files() -> dict:
    from kernelab.ladders.hgemm import DEFAULT_BENCHMARK_STEPS, get_step

    top = get_step(DEFAULT_BENCHMARK_STEPS[-1])
    return {**KERNEL_FILES, "cuda-c++": {"gemm": included(f"ladders/hgemm/{top.file}")}}


def code_lines(path: Path) -> int:
    """Lines holding code: no blank lines, comments or docstrings (Python: by tokens; C++:
    lines not starting with // or inside /* */)."""
    text = path.read_text()
    if path.suffix == ".py":
        lines = set()
        previous = tokenize.INDENT
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type == tokenize.STRING and previous in (
                tokenize.INDENT,
                tokenize.NEWLINE,
                tokenize.DEDENT,
                tokenize.NL,
            ):
                previous = tok.type  # a docstring or a bare string: not code
                continue
            if tok.type not in (
                tokenize.COMMENT,
                tokenize.NL,
                tokenize.NEWLINE,
                tokenize.INDENT,
                tokenize.DEDENT,
                tokenize.ENDMARKER,
            ):
                lines.update(range(tok.start[0], tok.end[0] + 1))
            previous = tok.type
        return len(lines)
    count, in_block = 0, False
    for line in text.splitlines():
        s = line.strip()
        if in_block:
            in_block = "*/" not in s
            continue
        if s.startswith("/*"):
            in_block = "*/" not in s
            continue
        if s and not s.startswith("//"):
            count += 1
    return count


def line_counts() -> dict:
    """{language: {op: {"lines": n, "files": [...]}}} for the files that exist."""
    counts: dict = {}
    for language, ops in kernel_files().items():
        for op, files in ops.items():
            present = [f for f in files if (SRC / f).is_file()]
            counts.setdefault(language, {})[op] = {
                "lines": sum(code_lines(SRC / f) for f in present),
                "files": present,
            }
    return counts


def row_cases() -> list[dict]:
    cases = []
    for op in ROW_OPS:
        for dtype, itemsize in (("fp32", 4), ("bf16", 2)):
            for cols in ROW_COLS:
                rows = max(1, ROW_BYTES // (cols * itemsize))
                cases.append({"op": op, "dtype": dtype, "rows": rows, "cols": cols})
    return cases


def quack_functions() -> tuple[dict, str | None]:
    """QuACK's softmax and rmsnorm, or ({}, the one line that says why not)."""
    try:
        import quack
    except ImportError as exc:
        return {}, f"QuACK not measured: `import quack` failed ({exc}); pip install quack-kernels"
    found = {op: getattr(quack, op, None) for op in ("softmax", "rmsnorm")}
    return {op: fn for op, fn in found.items() if fn is not None}, None


def _time(max_time_s: float, fn, *args) -> float:
    """Median cold time (ms) of fn(*args)."""
    from kernelab.harness.timing import benchmark

    return benchmark(lambda: fn(*args), mode="cold", max_time_s=max_time_s).median_ms


def _checked(name: str, op: str, shape: dict, dtype: str):
    """The built implementation if it passes the float64 check, else (None, why)."""
    from kernelab.errors import KernelabError
    from kernelab.harness.check import check_implementation
    from kernelab.spec import registry

    try:
        fn = registry.get(name).build()
        # a shape the kernel refuses (a row longer than its largest cluster holds) raises
        # KernelabError on the first call: a note beside its column, not the end of the run
        report = check_implementation(fn, op, shape, dtype, trials=1, device="cuda")
    except KernelabError as exc:
        return None, str(exc)
    return (fn, None) if report.ok else (None, f"failed its check: {report.message}")


def run_rows(max_time_s: float, notes: list[str]) -> list[dict]:
    import torch

    from kernelab.spec.reference import OPS

    quack, why = quack_functions()
    if why:
        notes.append(why)
    out = []
    for case in row_cases():
        op, dtype = case["op"], case["dtype"]
        shape = {"rows": case["rows"], "cols": case["cols"]}
        inputs = OPS[op].make_inputs(shape, dtype, seed=0, device="cuda")
        x = inputs[0].contiguous()
        inputs = (x, *inputs[1:])
        copied = 2 * x.numel() * x.element_size()  # the clone reads and writes x
        moved = OPS[op].cost(shape, dtype).bytes  # the op's minimal bytes
        row = {**case, "bytes": copied, "op_bytes": moved, "copy_ms": _time(max_time_s, x.clone)}
        for column, name in (("cute", f"cute.{op}"), ("triton", f"triton.{op}")):
            fn, failure = _checked(name, op, shape, dtype)
            row[f"{column}_ms"] = _time(max_time_s, fn, *inputs) if fn else None
            if failure:
                row[f"{column}_note"] = failure
        if op in BULK_OPS and row.get("cute_ms") and cols_of_whole_vectors(case):
            # the same kernel with each CTA's slice brought in by the TMA unit (bulk=True)
            row["cute_bulk_ms"] = _checked_variant(max_time_s, op, shape, dtype, inputs,
                                                   bulk=True)  # fmt: skip
        if op in quack:
            fn, failure = _checked_quack(quack[op], op, shape, dtype)
            row["quack_ms"] = _time(max_time_s, fn, *inputs) if fn else None
            if failure:
                row["quack_note"] = failure
        for column in ("cute", "cute_bulk", "triton", "quack"):
            row[f"{column}_pct_of_copy"] = pct_of_copy(row, row.get(f"{column}_ms"))
        out.append(row)
        torch.cuda.empty_cache()
    return out


def cols_of_whole_vectors(case: dict) -> bool:
    """Whether the row is whole 16-byte vectors (what the CuTe kernels' bulk loads need)."""
    return case["cols"] * (4 if case["dtype"] == "fp32" else 2) % 16 == 0


def _checked_quack(function, op: str, shape: dict, dtype: str):
    """QuACK's `function` called with kernelab's inputs of `op` (softmax: x; rmsnorm: x,
    weight, eps, where QuACK takes eps by keyword: its third parameter is a bias), if it
    passes the float64 check, else (None, why)."""
    from kernelab.harness.check import check_implementation

    def fn(*inputs):
        if op == "rmsnorm":
            x, weight, eps = inputs
            return function(x, weight, eps=eps)
        return function(inputs[0])

    try:
        report = check_implementation(fn, op, shape, dtype, trials=1, device="cuda")
    except Exception as exc:  # a third party's failure is a note beside its column
        return None, f"QuACK's {op} raised {type(exc).__name__}: {exc}"
    return (fn, None) if report.ok else (None, f"failed its check: {report.message}")


def _checked_variant(max_time_s: float, op: str, shape: dict, dtype: str, inputs, **options):
    """cute.<op> with `options`: its median ms if it passes the float64 check, else None."""
    import functools
    import importlib

    from kernelab.errors import KernelabError
    from kernelab.harness.check import check_implementation

    module, function = BULK_OPS[op]
    fn = functools.partial(getattr(importlib.import_module(f"kernelab.ops.{module}"), function),
                           **options)  # fmt: skip
    try:
        report = check_implementation(fn, op, shape, dtype, trials=1, device="cuda")
    except KernelabError:  # a shape this variant refuses: no column, as for a failed check
        return None
    return _time(max_time_s, fn, *inputs) if report.ok else None


def pct_of_copy(row: dict, ms: float | None) -> float | None:
    """A kernel's bandwidth over the op's minimal bytes as a % of the copy's bandwidth."""
    if not ms:
        return None
    return 100 * (row["op_bytes"] / ms) / (row["bytes"] / row["copy_ms"])


def run_gemm(max_time_s: float, notes: list[str]) -> list[dict]:
    import torch

    from kernelab.ladders.hgemm import DEFAULT_BENCHMARK_STEPS

    top = f"hgemm:{DEFAULT_BENCHMARK_STEPS[-1]:02d}"
    out = []
    for size in GEMM_SIZES:
        shape = {"m": size, "n": size, "k": size}
        a = torch.randn(size, size, device="cuda").to(torch.bfloat16)
        b = torch.randn(size, size, device="cuda").to(torch.bfloat16)
        row = {"size": size, "flops": 2 * size**3, "cublas_ms": _time(max_time_s, torch.mm, a, b)}
        columns = (("cute", "cute.gemm"), ("cuda_cpp", top), ("triton", "triton.matmul"))
        for column, name in columns:
            fn, failure = _checked(name, "gemm", shape, "bf16")
            ms = _time(max_time_s, fn, a, b) if fn else None
            row[f"{column}_ms"] = ms
            row[f"{column}_pct_of_cublas"] = 100 * row["cublas_ms"] / ms if ms else None
            if failure:
                row[f"{column}_note"] = failure
        row["cuda_cpp_step"] = top
        out.append(row)
    return out


def compile_times() -> dict:
    """First call and warm launch (ms) per language: softmax and rmsnorm at 4 x 4096 bf16,
    the GEMMs at 256^3 (the CUDA C++ step's first call includes nvcc unless its cubin is in
    the disk cache)."""
    import torch

    from kernelab.errors import KernelabError
    from kernelab.ladders.hgemm import DEFAULT_BENCHMARK_STEPS
    from kernelab.spec import registry
    from kernelab.spec.reference import OPS

    top = f"hgemm:{DEFAULT_BENCHMARK_STEPS[-1]:02d}"
    result = {}
    cases = {
        "softmax": ({"rows": 4, "cols": 4096}, ("cute.softmax", "triton.softmax")),
        "rmsnorm": ({"rows": 4, "cols": 4096}, ("cute.rmsnorm", "triton.rmsnorm")),
        "softmax_backward": (
            {"rows": 4, "cols": 4096},
            ("cute.softmax_backward", "triton.softmax_backward"),
        ),
        "rmsnorm_backward": (
            {"rows": 4, "cols": 4096},
            ("cute.rmsnorm_backward", "triton.rmsnorm_backward"),
        ),
        "gemm": ({"m": 256, "n": 256, "k": 256}, ("cute.gemm", top, "triton.matmul")),
    }
    for op, (shape, names) in cases.items():
        inputs = OPS[op].make_inputs(shape, "bf16", seed=1, device="cuda")
        for name in names:
            try:
                fn = registry.get(name).build()
            except KernelabError as exc:
                result[name] = {"note": str(exc)}
                continue
            module = sys.modules.get(getattr(fn, "__module__", None) or "")
            getattr(module, "_compiled", {}).clear()  # CuTe-DSL: forget in-process builds
            torch.cuda.synchronize()
            start = time.perf_counter()
            fn(*inputs)
            torch.cuda.synchronize()
            first_ms = 1e3 * (time.perf_counter() - start)
            warm = []
            for _ in range(50):
                start = time.perf_counter()
                fn(*inputs)
                warm.append(1e3 * (time.perf_counter() - start))
            torch.cuda.synchronize()
            result[name] = {"first_call_ms": first_ms, "warm_launch_ms": sorted(warm)[25]}
    return result


# one fresh process per compile: nothing of an earlier compile is warm
_LOWER = {
    "cute.softmax": """
import torch, cuda.bindings.driver as cuda
from kernelab.ops import cute_rows
from kernelab.ops.softmax import cute_dsl_kernel as k
x = torch.empty(4, 65536, dtype=torch.bfloat16)
p = cute_rows.row_plan(65536, 2)
def go(path):
    rc.lower_to_cubin(k.softmax_launch, *cute_rows.row_tensors(p, x, x.clone()),
                      cuda.CUstream(0), p.vec, p.threads, p.tile_cols, p.cluster, path=path)
""",
    "cute.rmsnorm": """
import torch, cuda.bindings.driver as cuda
from cutlass import Float32
from kernelab.ops import cute_rows
from kernelab.ops.norms import cute_dsl_kernel as k
x = torch.empty(4, 4096, dtype=torch.bfloat16)
p = cute_rows.row_plan(4096, 2)
def go(path):
    t = cute_rows.row_tensors(p, x, x[:1].clone(), x.clone())
    rc.lower_to_cubin(k.rmsnorm_launch, *t, Float32(1e-6), cuda.CUstream(0), p.vec,
                      p.threads, p.tile_cols, p.cluster, path=path)
""",
    "cute.gemm": """
import torch, cuda.bindings.driver as cuda
from kernelab.ladders.hgemm import cute_dsl as g, cute_dsl_kernel as k
p = g.gemm_plan()
a = torch.empty(256, 256, dtype=torch.bfloat16)
def go(path):
    t, sms = k.lower_args(p, a, a.clone(), a.clone(), 132)
    op = k.HopperGemm(p.bm, p.bn, p.bk, p.stages, p.consumers)
    rc.lower_to_cubin(op, *t, sms, cuda.CUstream(0), path=path)
""",
}
_TIMED = """
import os, sys, tempfile, time
from kernelab.runtime import cute_dsl as rc
{setup}
start = time.perf_counter()
with tempfile.TemporaryDirectory() as d:
    go(os.path.join(d, "k.cubin"))
print(time.perf_counter() - start)
"""
_NVCC = """
import time
from kernelab.ladders.hgemm import get_step
from kernelab.runtime.cuda import build as b
step = get_step({number})
start = time.perf_counter()
b.build(f"ladders/hgemm/{{step.file}}", arch="sm_90a", force=True)
print(time.perf_counter() - start)
"""


def cpu_compile_times() -> dict:
    """Seconds to compile each kernel for sm_90a from cold, in a fresh process each (the
    import of the DSL or of kernelab is not counted: only the compile call)."""
    import subprocess

    from kernelab.ladders.hgemm import DEFAULT_BENCHMARK_STEPS

    env = {**os.environ, "CUTE_DSL_DISABLE_FILE_CACHING": "1",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(SRC.parent),
                                                       os.environ.get("PYTHONPATH")]))}  # fmt: skip
    top = DEFAULT_BENCHMARK_STEPS[-1]
    programs = {name: _TIMED.format(setup=setup) for name, setup in _LOWER.items()}
    programs[f"hgemm:{top:02d} (nvcc)"] = _NVCC.format(number=top)
    result = {}
    for name, program in programs.items():
        done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                              env=env)  # fmt: skip
        if done.returncode == 0:
            result[name] = {"seconds": float(done.stdout.strip().splitlines()[-1])}
        else:
            result[name] = {"note": (done.stderr.strip().splitlines() or ["failed"])[-1][:200]}
    return result


# ---- the record as the report's tables (markdown) ---------------------------------------


def _pct(value) -> str:
    return "-" if value is None else f"{value:.1f} %"


def _verdict(ok) -> str:
    return "-" if ok is None else ("met" if ok else "missed")


def row_table(record: dict) -> str:
    """Softmax / RMSNorm: the copy ceiling and each language as % of it, with the targets."""
    t = record["targets"]
    lines = ["| op | dtype | cols | copy TB/s | CuTe-DSL | CuTe bulk | Triton | QuACK | target |",
             "|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in record.get("rows", []):
        target = ROW_TARGET.get(r["op"])
        cute = r.get("cute_pct_of_copy")
        ok = None if cute is None or target is None else cute >= t[target]
        if r["op"] == "softmax" and ok is not None:
            if r["cols"] >= t["softmax_vs_triton_from_cols"] and r.get("triton_ms"):
                ok = ok and r["cute_ms"] <= r["triton_ms"]
            if r.get("quack_ms"):
                ok = ok and r["cute_ms"] <= r["quack_ms"]
        tbs = r["bytes"] / (r["copy_ms"] * 1e9)
        lines.append(
            f"| {r['op']} | {r['dtype']} | {r['cols']:,} | {tbs:.2f} | {_pct(cute)} | "
            f"{_pct(r.get('cute_bulk_pct_of_copy'))} | "
            f"{_pct(r.get('triton_pct_of_copy'))} | {_pct(r.get('quack_pct_of_copy'))} | "
            f"{_verdict(ok)} |"
        )
    return "\n".join(lines)


def gemm_table(record: dict) -> str:
    floor = record["targets"]["gemm_pct_of_cublas"]
    lines = ["| size | cuBLAS TFLOP/s | CuTe-DSL | CUDA C++ (step) | Triton | target |",
             "|---|---|---|---|---|---|"]  # fmt: skip
    for r in record.get("gemm", []):
        cute = r.get("cute_pct_of_cublas")
        lines.append(
            f"| {r['size']}^3 | {r['flops'] / (r['cublas_ms'] * 1e9):.0f} | {_pct(cute)} | "
            f"{_pct(r.get('cuda_cpp_pct_of_cublas'))} ({r.get('cuda_cpp_step', '-')}) | "
            f"{_pct(r.get('triton_pct_of_cublas'))} | "
            f"{_verdict(None if cute is None else cute >= floor)} |"
        )
    return "\n".join(lines)


def cost_table(record: dict) -> str:
    """Lines of kernel code per language and op, with the compile times the record holds."""
    compiled = record.get("compile", {})
    cpu = record.get("cpu_compile", {}).get("seconds", {})
    lines = ["| language | op | lines | first call (GPU run) | warm launch | cold compile (CPU) |",
             "|---|---|---|---|---|---|"]  # fmt: skip
    names = {"cute-dsl": "cute.{op}", "triton": "triton.{op}"}
    for language, ops in record["lines_of_kernel_code"].items():
        for op, entry in ops.items():
            name = names.get(language, "").format(op=op).replace("triton.gemm", "triton.matmul")
            timing = compiled.get(name, {})
            if language == "cuda-c++":  # the ladder's top step, whatever its number
                timing = next((v for k, v in compiled.items() if k.startswith("hgemm:")), {})
            on_cpu = cpu.get(name, {}).get("seconds")
            if language == "cuda-c++":
                on_cpu = next((v.get("seconds") for k, v in cpu.items() if "nvcc" in k), None)
            first, warm = timing.get("first_call_ms"), timing.get("warm_launch_ms")
            lines.append(
                f"| {language} | {op} | {entry['lines']} | "
                f"{'-' if first is None else f'{first:.0f} ms'} | "
                f"{'-' if warm is None else f'{warm * 1e3:.1f} us'} | "
                f"{'-' if on_cpu is None else f'{on_cpu:.2f} s'} |"
            )
    return "\n".join(lines)


def tables(record: dict) -> str:
    head = (f"CuTe-DSL (nvidia-cutlass-dsl {record['versions'].get('nvidia-cutlass-dsl')}) on "
            f"{record.get('gpu', 'no GPU')}")  # fmt: skip
    parts = [head, row_table(record), gemm_table(record), cost_table(record)]
    return "\n\n".join([*parts, *(f"- {n}" for n in record.get("notes", []))])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None,
                        help="folder for cute_dsl.json (a measured run's default: $OUT, else "
                        "benchmarks/results/<card>/cute_dsl in a source checkout, else "
                        "./kernelab-results/<gpu>/cute_dsl; a dry run writes only "
                        "here)")  # fmt: skip
    parser.add_argument("--max-time-s", type=float, default=0.3)
    parser.add_argument("--dry-run", action="store_true", help="the cases and line counts only")
    parser.add_argument(
        "--cpu-compile",
        action="store_true",
        help="also time cold sm_90a compiles on this machine (no GPU needed)",
    )
    parser.add_argument("--tables", type=Path, help="print a record's tables (markdown) and stop")
    args = parser.parse_args(argv)
    if args.tables is not None:
        print(tables(json.loads(args.tables.read_text())))
        return 0
    from kernelab.environment import software_versions
    from kernelab.runtime import cute_dsl

    record = {
        "benchmark": "cute_dsl",
        "targets": TARGETS,
        "versions": {**software_versions(), "nvidia-cutlass-dsl": cute_dsl.installed_version()},
        "lines_of_kernel_code": line_counts(),
        "cases": {"rows": row_cases(), "gemm_sizes": list(GEMM_SIZES)},
        "notes": [],
    }
    if args.cpu_compile:
        import platform

        record["cpu_compile"] = {
            "machine": platform.processor() or platform.machine(),
            "cpus": os.cpu_count(),
            "seconds": cpu_compile_times(),
        }
    if not args.dry_run:
        from kernelab.hardware.detect import require_gpu
        from kernelab.harness.records import default_results_dir

        record["gpu"] = require_gpu().spec.id
        args.out = args.out or default_results_dir(record["gpu"], "cute_dsl")
        record["rows"] = run_rows(args.max_time_s, record["notes"])
        record["gemm"] = run_gemm(args.max_time_s, record["notes"])
        record["compile"] = compile_times()
    text = json.dumps(record, indent=1, default=str)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "cute_dsl.json").write_text(text)
    print(text if args.dry_run else json.dumps(record.get("notes"), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
