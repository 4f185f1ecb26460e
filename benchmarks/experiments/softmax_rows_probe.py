"""Why a softmax shape off the swept row counts can read slower (issue 30: fp32 2048 x 65536
at 2.79 TB/s under do_bench, 4096 x 65536 at 4.17): per shape, in a fresh tuner state, the
config the tuner picks, do_bench's cold median, kernelab's cold median and both TB/s.

  PYTHONPATH=src python3 benchmarks/experiments/softmax_rows_probe.py [ROWSxCOLS:dtype ...]
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch
import triton.testing

from kernelab.harness.timing import benchmark
from kernelab.ops import softmax as sm

OUT = Path(os.environ.get("OUT", "."))
DEFAULT = ["2048x65536:fp32", "4096x65536:fp32", "1024x131072:fp32", "4096x32768:bf16"]
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def probe(spec: str) -> dict:
    shape, dtype = spec.split(":")
    rows, cols = (int(v) for v in shape.split("x"))
    x = torch.randn(rows, cols, device="cuda", dtype=DTYPES[dtype]) * 3
    out = sm.softmax(x)  # tunes here, outside both timers
    ref = torch.softmax(x.double(), dim=-1)
    err = ((out.double() - ref).norm() / ref.norm()).item()
    moved = 2 * x.numel() * x.element_size()
    do_bench_ms = triton.testing.do_bench(lambda: sm.softmax(x), return_mode="median")
    ours_ms = benchmark(lambda: sm.softmax(x), mode="cold", max_time_s=1.0).median_ms
    config = {k: v for k, v in sm.config_for(x).items() if k != "tuner"}
    return {
        "shape": spec,
        "rel_err": err,
        "config": config,
        "do_bench_ms": do_bench_ms,
        "do_bench_tbps": moved / do_bench_ms / 1e9,
        "kernelab_ms": ours_ms,
        "kernelab_tbps": moved / ours_ms / 1e9,
    }


def main() -> None:
    rows = [probe(spec) for spec in (sys.argv[1:] or DEFAULT)]
    (OUT / "softmax_rows_probe.json").write_text(json.dumps(rows, indent=1, default=str))
    for row in rows:
        print(json.dumps(row, default=str))


if __name__ == "__main__":
    main()
