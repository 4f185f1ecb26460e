"""Where a small call's host time goes: wall time per call, enqueue time per call and a cProfile
of each registered kernel against its torch equivalent (issue 30, session 19).

Each call is made at a size where the GPU work is tiny, so what the loop measures is the
launch path. Per implementation: 20 warm-up calls, then
  wall     300 calls ending in one synchronise, divided by 300 (what a user's loop sees);
  enqueue  the same 300 calls' host time before that synchronise;
and a cProfile of 200 more calls, written to $OUT/profile-<name>.txt (top 30 by own time).
Also writes the Triton launch-path source (CompiledKernel, JITFunction.run) for reading.

  PYTHONPATH=src python3 benchmarks/experiments/host_cost_profile.py
"""

from __future__ import annotations

import cProfile
import inspect
import io
import json
import os
import pstats
import time
from pathlib import Path

import torch
import torch.nn.functional as F

OUT = Path(os.environ.get("OUT", "."))
CALLS = 300


def wall_and_enqueue_us(fn) -> tuple[float, float]:
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(CALLS):
        fn()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    t2 = time.perf_counter()
    return (t2 - t0) / CALLS * 1e6, (t1 - t0) / CALLS * 1e6


def profile_to(fn, path: Path) -> None:
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(200):
        fn()
    profiler.disable()
    torch.cuda.synchronize()
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(30)
    path.write_text(text.getvalue())


def cases():
    from kernelab.ladders.hgemm import hgemm
    from kernelab.ladders.sgemm import sgemm
    from kernelab.ops.matmul import matmul
    from kernelab.ops.norms import layernorm, rmsnorm
    from kernelab.ops.softmax import softmax
    from kernelab.ops.vector_add import vector_add

    dev = "cuda"
    x = torch.randn(4096, device=dev)
    y = torch.randn(4096, device=dev)
    s = torch.randn(64, 4096, device=dev, dtype=torch.bfloat16)
    w = torch.randn(4096, device=dev, dtype=torch.bfloat16)
    bias = torch.randn(4096, device=dev, dtype=torch.bfloat16)
    a16 = torch.randn(256, 256, device=dev, dtype=torch.bfloat16)
    b16 = torch.randn(256, 256, device=dev, dtype=torch.bfloat16)
    a32 = torch.randn(256, 256, device=dev)
    b32 = torch.randn(256, 256, device=dev)
    return [
        ("vector_add", lambda: vector_add(x, y), lambda: torch.add(x, y)),
        ("softmax", lambda: softmax(s), lambda: torch.softmax(s, dim=-1)),
        ("rmsnorm", lambda: rmsnorm(s, w, 1e-6), lambda: F.rms_norm(s, (4096,), w, 1e-6)),
        (
            "layernorm",
            lambda: layernorm(s, w, bias, 1e-5),
            lambda: F.layer_norm(s, (4096,), w, bias, 1e-5),
        ),
        ("matmul", lambda: matmul(a16, b16), lambda: torch.mm(a16, b16)),
        ("sgemm13", lambda: sgemm(13, a32, b32), lambda: torch.mm(a32, b32)),
        ("hgemm18", lambda: hgemm(18, a16, b16), lambda: torch.mm(a16, b16)),
    ]


def write_triton_sources() -> None:
    import triton
    from triton.compiler.compiler import CompiledKernel
    from triton.runtime.jit import JITFunction

    parts = [f"triton {triton.__version__}"]
    for obj in (CompiledKernel, JITFunction.run, JITFunction._pack_args):
        try:
            parts.append(inspect.getsource(obj))
        except (TypeError, OSError, AttributeError) as exc:
            parts.append(f"# {obj}: {exc}")
    (OUT / "triton-launch-source.txt").write_text("\n\n".join(parts))


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    torch.set_float32_matmul_precision("highest")
    rows = []
    for name, ours, theirs in cases():
        try:
            ours_wall, ours_enqueue = wall_and_enqueue_us(ours)
            theirs_wall, theirs_enqueue = wall_and_enqueue_us(theirs)
            profile_to(ours, OUT / f"profile-{name}.txt")
        except Exception as exc:  # one broken case must not hide the others
            rows.append({"case": name, "error": f"{type(exc).__name__}: {exc}"[:300]})
            continue
        rows.append(
            {
                "case": name,
                "ours_wall_us": round(ours_wall, 1),
                "ours_enqueue_us": round(ours_enqueue, 1),
                "torch_wall_us": round(theirs_wall, 1),
                "torch_enqueue_us": round(theirs_enqueue, 1),
            }
        )
    write_triton_sources()
    (OUT / "host_cost_profile.json").write_text(json.dumps(rows, indent=1))
    for row in rows:
        print(json.dumps(row))


if __name__ == "__main__":
    main()
