"""Forced triton.softmax options, planned since session 29: host cost per call and do_bench.

softmax(config=...) and the forced long-row paths (long_rows=, single_pass_max_cols=) took
Triton's front door on every call until session 29; now they replay a launch plan keyed by
their options, as triton.matmul's forced calls have since session 28. This checks each forced
call at a launch-bound size (64 x 4096 bf16) and one size where the GPU work dominates
(4096 x 16384 bf16, 128 MiB), against the tuned call and torch.softmax: correct first (against
a float64 softmax), then host us per call (kernelab.harness.launch_cost) planned and with the
launch plans switched off (the old front door, the same process), and % of torch.softmax under
triton.testing.do_bench, three alternating rounds.

  PYTHONPATH=src python3 benchmarks/experiments/softmax_forced_host_cost.py
"""

import torch
import triton.testing as tt

from kernelab.harness.launch_cost import measure_host_cost
from kernelab.ops import softmax as sm
from kernelab.runtime import launch_plans


def calls_for(x) -> dict:
    calls = {"torch.softmax": lambda: torch.softmax(x, dim=-1), "tuned": lambda: sm.softmax(x)}
    second_tile = sm.row_candidates_for(x)[1]  # the row tuner's second candidate for x
    calls[f"row tile {second_tile}"] = lambda: sm.softmax(x, config=second_tile)
    for path in ("two-pass", "cooperative"):
        calls[path] = lambda path=path: sm.softmax(x, single_pass_max_cols=1024, long_rows=path)
    return calls


print(f"{'shape':12} {'call':60} {'host us':>8} {'unplanned':>9} {'do_bench % of torch':>24}")
for rows, cols in ((64, 4096), (4096, 16384)):
    x = torch.randn(rows, cols, device="cuda").to(torch.bfloat16)
    ref = torch.softmax(x.double(), dim=-1)
    calls = calls_for(x)
    for name, call in calls.items():
        out = call().double()
        err = (out - ref).abs().max().item()
        if not torch.isfinite(out).all() or err > 1e-2:
            print(f"{rows}x{cols:<7} {name:60} WRONG (max abs err {err:.3g})")
            continue
        device_ms = tt.do_bench(call)
        host = measure_host_cost(call, device_ms).host_us
        launch_plans.ENABLED = False
        unplanned = measure_host_cost(call, device_ms).host_us
        launch_plans.ENABLED = True
        rounds = []
        for _ in range(3):
            base = tt.do_bench(calls["torch.softmax"])
            rounds.append(100 * base / tt.do_bench(call))
        shown = " ".join(f"{r:7.1f}" for r in rounds)
        print(f"{rows}x{cols:<7} {name:60} {host:8.1f} {unplanned:9.1f} {shown:>24}", flush=True)
print("replays:", sm.PLANS.replays, "last refusal:", sm.PLANS.last_refusal)
