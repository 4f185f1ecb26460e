"""A forced triton.matmul config, planned since session 28: host cost per call and do_bench.

Session 27 found matmul(config=...) host-bound (28-116 us a call at 1024^3 on an H100: Triton's
front door every call), so do_bench timed its launches, not its kernels. This checks a few
forced configs at 1024^3 bf16 against the tuned call and torch.mm: correct first (against a
float32 product), then host us per call (kernelab.harness.launch_cost) and % of torch.mm under
triton.testing.do_bench, three alternating rounds.

  PYTHONPATH=src python3 benchmarks/experiments/matmul_forced_host_cost.py
"""

import torch
import triton.testing as tt

from kernelab.harness.launch_cost import measure_host_cost
from kernelab.ops import matmul as mm

n = 1024
a = torch.randn(n, n, device="cuda").to(torch.bfloat16)
b = torch.randn(n, n, device="cuda").to(torch.bfloat16)
ref = a.float() @ b.float()
small = mm.tma_candidates(2)[-3:]  # the small-problem tiles (256-byte K rows)
calls = {"torch.mm": lambda: torch.mm(a, b), "tuned": lambda: mm.matmul(a, b)}
for c in small:
    calls[f"{c['BM']}x{c['BN']}x{c['BK']} s{c['num_stages']}"] = lambda c=c: mm.matmul(
        a, b, config=c
    )
calls["plain (tuned)"] = lambda: mm.matmul(a, b, path="plain")
print(f"{'call':24} {'host us':>8} {'do_bench % of torch.mm (3 rounds)':>36}")
for name, call in calls.items():
    out = call().float()
    err = ((out - ref).abs().max() / ref.abs().max()).item()
    if not torch.isfinite(out).all() or err > 2e-2:
        print(f"{name:24} WRONG (max rel err {err:.3g})")
        continue
    device_ms = tt.do_bench(call)
    host = measure_host_cost(call, device_ms)
    rounds = []
    for _ in range(3):
        base = tt.do_bench(calls["torch.mm"])
        rounds.append(100 * base / tt.do_bench(call))
    print(f"{name:24} {host.host_us:8.1f} {' '.join(f'{r:7.1f}' for r in rounds):>36}", flush=True)
print("replays:", mm.PLANS.replays, "last refusal:", mm.PLANS.last_refusal)
