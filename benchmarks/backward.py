"""The backward kernels on this GPU: softmax_backward and rmsnorm_backward, each checked, then
timed against torch eager and judged against the device-to-device copy of the same run.

    PYTHONPATH=src python3 benchmarks/backward.py [--out DIR] [--only softmax,rmsnorm]
        [--quick] [--dtypes fp32,bf16]

Rates come from the cost model (kernelab.roofline.costs): softmax backward reads y and dy
and writes dx (3 x rows x cols x itemsize); RMSNorm backward reads x and dy, writes dx, and
reads the weight and writes dweight once (cols each). The kernel's own fp32 dweight
partials are not counted: they are its overhead, and the rate says what they cost.
Target: RMSNorm backward at >= 80 % of the copy ceiling measured in the same run, at hidden
sizes up to JUDGED_MAX_COLS (longer rows are measured, not judged); softmax backward is
measured against the same ceiling, not judged.
Each case is checked against the float64 reference (kernelab.harness.check) before it is
timed; a case that fails is recorded as failed and not timed. `--only plan` prints the
shapes and bytes without a GPU.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

PARTS = ("plan", "softmax", "rmsnorm")
OPS = {"softmax": "softmax_backward", "rmsnorm": "rmsnorm_backward"}
IMPLEMENTATIONS = {"softmax": "triton.softmax_backward", "rmsnorm": "triton.rmsnorm_backward"}
BASELINES = {"softmax": "torch.softmax_backward", "rmsnorm": "torch.rmsnorm_backward"}
COLS = {
    "softmax": (1024, 4096, 16384, 65536, 262144),
    "rmsnorm": (1024, 2048, 4096, 8192, 16384, 65536, 262144),
}
QUICK_COLS = (4096, 65536)
TENSOR_BYTES = 256 << 20  # each [rows, cols] tensor: far past L2, so the timing is HBM's
RMSNORM_TARGET_OF_COPY = 0.80
JUDGED_MAX_COLS = 16384  # hidden sizes of today's models; longer rows are measured only
COPY_BYTES = 1 << 30


def parse(argv):
    parser = argparse.ArgumentParser(
        description="Check and time the backward kernels.",
        epilog=f"parts: {', '.join(PARTS)}. Target: rmsnorm backward >= "
        f"{RMSNORM_TARGET_OF_COPY:.0%} of the copy ceiling.",
    )
    parser.add_argument("--out", default=None,
                        help="folder for the JSON document (default $OUT, else "
                        "benchmarks/results/<card>/backward in a source checkout, else "
                        "./kernelab-results/<gpu>/backward)")  # fmt: skip
    parser.add_argument("--only", default="softmax,rmsnorm", help=f"comma list of {PARTS}")
    parser.add_argument("--quick", action="store_true", help=f"cols {QUICK_COLS} only")
    parser.add_argument("--dtypes", default="fp32,bf16", help="comma list of fp32, bf16, fp16")
    args = parser.parse_args(argv)
    args.parts = [p.strip() for p in args.only.split(",") if p.strip()]
    args.dtype_list = [d.strip() for d in args.dtypes.split(",") if d.strip()]
    if unknown := [p for p in args.parts if p not in PARTS]:
        parser.error(f"unknown part(s) {', '.join(unknown)}; parts: {', '.join(PARTS)}")
    bad = [d for d in args.dtype_list if d not in ("fp32", "bf16", "fp16")]
    if bad or not args.dtype_list:
        parser.error(f"--dtypes takes fp32, bf16, fp16, not {', '.join(bad) or 'nothing'}")
    return args


def cases(part: str, dtypes, quick: bool) -> list[dict]:
    """Every (shape, dtype) of a part, with the cost model's bytes."""
    from kernelab.roofline.costs import dtype_bytes
    from kernelab.spec.reference import OPS as SPECS

    spec = SPECS[OPS[part]]
    rows = []
    for dtype in dtypes:
        for cols in [c for c in COLS[part] if not quick or c in QUICK_COLS]:
            shape = {"rows": max(1, int(TENSOR_BYTES // (cols * dtype_bytes(dtype)))), "cols": cols}
            cost = spec.cost(shape, dtype)
            rows.append({"part": part, "op": spec.name, "shape": shape, "dtype": dtype,
                         "bytes": cost.bytes, "flops": cost.flops})  # fmt: skip
    return rows


class Run:
    def __init__(self, args):
        import torch

        from kernelab.harness.ceilings import this_gpu
        from kernelab.harness.records import default_results_dir
        from kernelab.harness.timing import benchmark

        self.torch, self.benchmark = torch, benchmark
        self.device = torch.cuda.get_device_name()
        self.records: list[dict] = []
        out = Path(args.out) if args.out else default_results_dir(this_gpu("backward.py").key,
                                                                  "backward")  # fmt: skip
        out.mkdir(parents=True, exist_ok=True)
        self.path = out / f"backward_{time.strftime('%Y%m%d-%H%M%S')}.json"
        self.copy_tbps = self.copy_ceiling()

    def median_ms(self, fn) -> float:
        return self.benchmark(fn, mode="cold", min_samples=10, max_time_s=0.6).median_ms

    def copy_ceiling(self) -> float:
        torch = self.torch
        x = torch.empty(COPY_BYTES // 4, device="cuda", dtype=torch.float32).normal_()
        y = torch.empty_like(x)
        median = self.median_ms(lambda: y.copy_(x))
        tbps = 2 * COPY_BYTES / (median * 1e-3) / 1e12  # read + write
        self.records.append({"op": "copy", "implementation": "torch.copy_", "bytes": 2 * COPY_BYTES,
                             "median_ms": median, "achieved_tbps": tbps, "gpu": self.device})  # fmt: skip
        print(f"  copy ceiling: {tbps:.2f} TB/s", file=sys.stderr)
        return tbps

    def measure(self, case: dict) -> None:
        from kernelab.harness.check import check_implementation
        from kernelab.spec.reference import OPS as SPECS
        from kernelab.spec.registry import get

        part, op, shape, dtype = case["part"], case["op"], case["shape"], case["dtype"]
        inputs = SPECS[op].make_inputs(shape, dtype, seed=0, device="cuda")
        for name in (IMPLEMENTATIONS[part], BASELINES[part]):
            fn = get(name).build()
            report = check_implementation(fn, op, shape, dtype, trials=1, device="cuda")
            record = {**case, "implementation": name, "check": report.ok, "gpu": self.device,
                      "copy_tbps": self.copy_tbps}  # fmt: skip
            if report.ok:
                median = self.median_ms(lambda fn=fn: fn(*inputs))
                tbps = case["bytes"] / (median * 1e-3) / 1e12
                record.update(median_ms=median, achieved_tbps=tbps,
                              of_copy=tbps / self.copy_tbps)  # fmt: skip
                if name == IMPLEMENTATIONS["rmsnorm"] and shape["cols"] <= JUDGED_MAX_COLS:
                    record["met"] = record["of_copy"] >= RMSNORM_TARGET_OF_COPY
            else:
                record["message"] = report.message
            self.records.append(record)
            print(f"  {name} {shape} {dtype}: {record.get('achieved_tbps', 'failed')}",
                  file=sys.stderr)  # fmt: skip

    def save(self) -> None:
        from kernelab.environment import software_versions

        document = {"gpu": self.device, "versions": software_versions(), "records": self.records}
        self.path.write_text(json.dumps(document, indent=1, default=str))


def main(argv=None) -> int:
    args = parse(argv)
    parts = [p for p in args.parts if p != "plan"]
    planned = [c for p in (parts or list(OPS)) for c in cases(p, args.dtype_list, args.quick)]
    if not parts:  # the plan alone: pure arithmetic, no GPU
        print(json.dumps(planned, indent=1))
        return 0
    import torch

    if not torch.cuda.is_available():
        print("error: the measured parts need a CUDA GPU (--only plan runs without)",
              file=sys.stderr)  # fmt: skip
        return 2
    run = Run(args)
    for case in planned:
        run.measure(case)
        run.save()
    judged = [r for r in run.records if "met" in r]
    print(f"rmsnorm backward >= {RMSNORM_TARGET_OF_COPY:.0%} of copy: "
          f"{sum(r['met'] for r in judged)} of {len(judged)}; written to {run.path}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
