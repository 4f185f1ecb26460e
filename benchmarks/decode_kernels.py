"""The decode kernels on this GPU (issue 50): each checked against its float64 reference, then
timed against torch (cuBLAS for the GEMVs) in one run, judged against the issue's targets and
written as one JSON document of rows and records.

    PYTHONPATH=src python3 benchmarks/decode_kernels.py [--out DIR] [--only gemv,quant]
        [--quick] [--gpu h100-sxm]

Parts:
  copy      the bandwidth ceiling: a 1 GiB device-to-device copy (read + write), this run
  gemv      bf16/fp16 y = x W^T over the weight shapes x m = 1..64: triton.gemv, its teaching
            kernel at m = 1, and torch (x @ w.t(), cuBLAS); rate = bytes of W per second.
            Targets: m = 1 >= 90 % of the copy ceiling and >= torch at every shape; m <= 16
            >= torch
  quant     int8, int4 (group 128, symmetric and zero points) and fp8 weight-only GEMVs at m = 1
            (and 16): speedup over the bf16 triton.gemv of the same run. Targets: int4 >= 3.0x,
            int8 >= 1.8x
  fused     add_rmsnorm, rope_ (in place), swiglu at decode and larger row counts: rate from
            the cost model's bytes against the copy ceiling. Target >= 90 % of copy
  roofline  the roofline walk of every weight shape on the catalog GPU named by --gpu (pure
            arithmetic: runs without a GPU)

Timer: kernelab.harness.timing.benchmark, cold mode (L2 flushed before every call, median): a
decode GEMV's W (32 MiB at 4096^2 bf16) would otherwise sit in the H100's 50 MiB L2.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

PARTS = ("copy", "gemv", "quant", "fused", "roofline")
GIB = 1 << 30
# (label, n, k): the square and wide weights and one Llama-3-8B layer
WEIGHTS = (
    ("4096x4096", 4096, 4096),
    ("16384x4096", 16384, 4096),
    ("llama3-8b.qkv", 6144, 4096),
    ("llama3-8b.o", 4096, 4096),
    ("llama3-8b.gate_up", 28672, 4096),
    ("llama3-8b.down", 4096, 14336),
)
BATCHES = (1, 2, 4, 8, 16, 32, 64)
QUICK_BATCHES = (1, 16, 64)
GEMV_COPY_TARGET = 0.90
INT4_SPEEDUP_TARGET = 3.0
INT8_SPEEDUP_TARGET = 1.8
FUSED_COPY_TARGET = 0.90
QUANT_FORMATS = (  # (label, op, function, extra shape keys)
    ("int8", "quant_gemv_int8", "quant_gemv_int8", {}),
    ("int4-g128", "quant_gemv_int4", "quant_gemv_int4", {"group": 128}),
    ("int4-g128-zp", "quant_gemv_int4_zp", "quant_gemv_int4", {"group": 128}),
    ("fp8", "quant_gemv_fp8", "quant_gemv_fp8", {}),
)


def parse(argv):
    parser = argparse.ArgumentParser(
        description="Check and time the decode kernels (GEMV, quantized GEMV, fused ops).",
        epilog="parts: " + ", ".join(PARTS),
    )
    parser.add_argument("--out", default=os.environ.get("OUT", "benchmarks/results/decode"),
                        help="folder for the JSON document (default $OUT)")  # fmt: skip
    parser.add_argument("--only", default=",".join(PARTS), help=f"comma list of {', '.join(PARTS)}")
    parser.add_argument("--quick", action="store_true", help=f"batches {QUICK_BATCHES} only")
    parser.add_argument("--gpu", default="h100-sxm", help="catalog GPU of the roofline walk")
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


class Run:
    def __init__(self, args):
        import torch

        from kernelab.harness.timing import benchmark

        self.torch, self.benchmark, self.args = torch, benchmark, args
        self.device = torch.cuda.get_device_name()
        self.copy_tbps = None
        self.rows: list[dict] = []
        self.records: list[dict] = []
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        self.path = out / f"decode_kernels_{time.strftime('%Y%m%d-%H%M%S')}.json"

    def time_ms(self, fn) -> float:
        return self.benchmark(fn, mode="cold", min_samples=10, max_time_s=0.5).median_ms

    def check(self, fn, op, shape, dtype) -> bool:
        from kernelab.harness.check import check_implementation

        report = check_implementation(fn, op, shape, dtype, trials=1, device="cuda")
        if not report.ok:
            print(f"  CHECK FAILED {op} {shape} {dtype}: {report.message}", file=sys.stderr)
        return report.ok

    def record(self, op, impl, shape, dtype, median_ms, **extra):
        from kernelab.spec.reference import OPS

        cost = OPS[op].cost(shape, dtype)
        seconds = median_ms * 1e-3
        self.records.append({"op": op, "implementation": impl, "shape": shape, "dtype": dtype,
                             "median_ms": median_ms, "flops": cost.flops, "bytes": cost.bytes,
                             "achieved_tbps": cost.bytes / seconds / 1e12,
                             "achieved_tflops": cost.flops / seconds / 1e12, "gpu": self.device,
                             "timer": "kernelab.harness.timing.benchmark cold median",
                             **extra})  # fmt: skip
        return cost.bytes / seconds / 1e12

    def save(self):
        from kernelab.environment import software_versions

        document = {"gpu": self.device, "copy_tbps": self.copy_tbps,
                    "versions": software_versions(), "rows": self.rows, "records": self.records}
        self.path.write_text(json.dumps(document, indent=1, default=str))


def part_copy(run):
    torch = run.torch
    x = torch.empty(GIB // 4, device="cuda", dtype=torch.float32).normal_()
    y = torch.empty_like(x)
    median = run.time_ms(lambda: y.copy_(x))
    run.copy_tbps = 2 * GIB / (median * 1e-3) / 1e12
    run.rows.append({"part": "copy", "case": "1 GiB", "tbps": run.copy_tbps})
    print(f"  copy ceiling: {run.copy_tbps:.2f} TB/s", file=sys.stderr)


def _gemv_inputs(run, op, shape, dtype):
    from kernelab.spec.reference import OPS

    return OPS[op].make_inputs(shape, dtype, seed=0, device="cuda")


def part_gemv(run, batches):
    from kernelab.ops import gemv as fast
    from kernelab.ops.gemv import teaching

    for dtype in ("bf16", "fp16"):
        for label, n, k in WEIGHTS:
            for m in batches:
                shape = {"m": m, "n": n, "k": k}
                x, w = _gemv_inputs(run, "gemv", shape, dtype)
                ok = run.check(fast.gemv, "gemv", shape, dtype)
                t_triton = run.time_ms(lambda x=x, w=w: fast.gemv(x, w))
                t_torch = run.time_ms(lambda x=x, w=w: x @ w.t())
                run.record("gemv", "triton.gemv", shape, dtype, t_triton, check=ok)
                run.record("gemv", "torch.gemv", shape, dtype, t_torch)
                w_tbps = n * k * w.element_size() / (t_triton * 1e-3) / 1e12
                row = {"part": "gemv", "case": f"{label} m={m}", "dtype": dtype, "check": ok,
                       "triton_us": 1e3 * t_triton, "torch_us": 1e3 * t_torch,
                       "w_tbps": w_tbps, "vs_torch": t_torch / t_triton,
                       "pct_of_copy": 100 * w_tbps / run.copy_tbps if run.copy_tbps else None,
                       "plan": fast.plan(m, n, k, fast.sm_count(0))}  # fmt: skip
                met = ok and (m > 16 or t_triton <= t_torch)
                if m == 1:
                    met = met and bool(run.copy_tbps) and w_tbps >= GEMV_COPY_TARGET * run.copy_tbps
                    t_teach = run.time_ms(lambda x=x, w=w: teaching.gemv(x, w))
                    run.record("gemv", "triton.gemv.teaching", shape, dtype, t_teach)
                    row["teaching_us"] = 1e3 * t_teach
                row["met"] = met if m <= 16 else None
                run.rows.append(row)
                run.save()
                print(f"  gemv {label} m={m} {dtype}: {1e3 * t_triton:.1f} us "
                      f"({w_tbps:.2f} TB/s of W), torch {1e3 * t_torch:.1f} us", file=sys.stderr)


def part_quant(run, batches):
    from kernelab.ops import gemv as fast
    from kernelab.ops import quant_gemv

    for label, n, k in WEIGHTS:
        for m in [b for b in batches if b in (1, 16)]:
            shape = {"m": m, "n": n, "k": k}
            x, w = _gemv_inputs(run, "gemv", shape, "bf16")
            t_bf16 = run.time_ms(lambda x=x, w=w: fast.gemv(x, w))
            for name, op, function, extra in QUANT_FORMATS:
                fn = getattr(quant_gemv, function)
                qshape = {**shape, **extra}
                inputs = _gemv_inputs(run, op, qshape, "bf16")
                ok = run.check(fn, op, qshape, "bf16")
                t = run.time_ms(lambda fn=fn, inputs=inputs: fn(*inputs))
                t_torch = run.time_ms(lambda op=op, inputs=inputs: _eager(op)(*inputs))
                run.record(op, f"triton.{op}", qshape, "bf16", t, check=ok)
                run.record(op, f"torch.{op}", qshape, "bf16", t_torch)
                speedup = t_bf16 / t
                target = {"int8": INT8_SPEEDUP_TARGET}.get(name, INT4_SPEEDUP_TARGET)
                judged = m == 1 and name in ("int8", "int4-g128")
                run.rows.append({"part": "quant", "case": f"{label} m={m} {name}", "check": ok,
                                 "triton_us": 1e3 * t, "bf16_gemv_us": 1e3 * t_bf16,
                                 "dequant_then_cublas_us": 1e3 * t_torch,
                                 "speedup_vs_bf16": speedup, "target": target if judged else None,
                                 "met": (ok and speedup >= target) if judged else None})  # fmt: skip
                run.save()
                print(f"  {name} {label} m={m}: {1e3 * t:.1f} us, {speedup:.2f}x bf16",
                      file=sys.stderr)


def _eager(op):
    from kernelab.spec.reference import OPS

    return OPS[op].torch_eager


def part_fused(run):
    from kernelab.ops import fused_norm, rope, swiglu

    cases = []
    for rows in (1, 64, 8192):
        cases.append(("add_rmsnorm", {"rows": rows, "cols": 4096}, fused_norm.add_rmsnorm_stacked))
        cases.append(("swiglu", {"rows": rows, "cols": 14336}, swiglu.swiglu))
        cases.append(("rope", {"tokens": rows, "heads": 40, "head_dim": 128}, None))
    for op, shape, fn in cases:
        for dtype in ("bf16",):
            inputs = _gemv_inputs(run, op, shape, dtype)
            if fn is None:  # RoPE in place, the form a model runs; checked out of place
                ok = run.check(rope.rope, op, shape, dtype)

                def call(inputs=inputs):
                    return rope.rope_(*inputs)
            else:
                ok = run.check(fn, op, shape, dtype)

                def call(fn=fn, inputs=inputs):
                    return fn(*inputs)
            t = run.time_ms(call)
            t_torch = run.time_ms(lambda op=op, inputs=inputs: _eager(op)(*inputs))
            tbps = run.record(op, f"triton.{op}", shape, dtype, t, check=ok)
            run.record(op, f"torch.{op}", shape, dtype, t_torch)
            pct = 100 * tbps / run.copy_tbps if run.copy_tbps else None
            run.rows.append({"part": "fused", "case": f"{op} {shape}", "dtype": dtype,
                             "check": ok, "triton_us": 1e3 * t, "torch_us": 1e3 * t_torch,
                             "tbps": tbps, "pct_of_copy": pct,
                             "met": ok and pct is not None and pct >= 100 * FUSED_COPY_TARGET})  # fmt: skip
            run.save()
            print(f"  {op} {shape}: {1e3 * t:.1f} us, {tbps:.2f} TB/s", file=sys.stderr)


def main(argv=None) -> int:
    from kernelab.errors import KernelabError

    args = parse(argv)
    try:
        walk_rows = roofline_rows(args.gpu) if "roofline" in args.parts else []
    except KernelabError as exc:  # an unknown --gpu: one line, exit 2
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.parts == ["roofline"]:  # pure arithmetic: no GPU needed
        print(json.dumps(walk_rows, indent=1))
        return 0
    import torch

    if not torch.cuda.is_available():
        print("error: the measured parts need a CUDA GPU (only --only roofline runs without)",
              file=sys.stderr)  # fmt: skip
        return 2
    run = Run(args)
    run.rows.extend(walk_rows)
    batches = QUICK_BATCHES if args.quick else BATCHES
    if "copy" in args.parts or any(p in args.parts for p in ("gemv", "fused")):
        part_copy(run)
    if "gemv" in args.parts:
        part_gemv(run, batches)
    if "quant" in args.parts:
        part_quant(run, batches)
    if "fused" in args.parts:
        part_fused(run)
    run.save()
    judged = [row for row in run.rows if row.get("met") is not None]
    print(f"targets met: {sum(bool(r['met']) for r in judged)} of {len(judged)}; "
          f"written to {run.path}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
