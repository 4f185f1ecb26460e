"""triton.matmul at 1024^3 bf16 under do_bench, candidate by candidate (session 27, H100).

The target (>= 90 % of torch.mm under triton.testing.do_bench) read 85.9, 93.4 and 88.8 % in
three runs of pytorch_targets.py on one H100; this asks whether that is the tuner's choice
moving between candidates or one candidate's timing moving. Every candidate that
candidates_for keeps at 1024^3 is checked against a float32 product, then timed in three
alternating rounds against torch.mm; the tuned call (autotuner's choice) likewise.
Then a forced config= call took Triton's front door every call (28-116 us of host time), so
its rows timed launches; since session 28 forced calls are planned, and
matmul_small_sweep.py times the candidates paired on device time.

  PYTHONPATH=src python3 benchmarks/experiments/matmul_1024_configs.py   # on the GPU
"""

import torch
import triton.testing as tt

from kernelab.ops import matmul as mm

n = 1024
a = torch.randn(n, n, device="cuda").to(torch.bfloat16)
b = torch.randn(n, n, device="cuda").to(torch.bfloat16)
ref = a.float() @ b.float()
programs = torch.cuda.get_device_properties(0).multi_processor_count
candidates = mm.candidates_for(n, n, programs, mm.tma_candidates(2))
calls = {"tuned": lambda: mm.matmul(a, b)}
for c in candidates:
    calls[
        f"{c['BM']}x{c['BN']}x{c['BK']} w{c['num_warps']} s{c['num_stages']}"
        f"{' ws' if c['WARP_SPECIALIZE'] else ''}{' split' if c['EPILOGUE_SPLIT'] else ''}"
    ] = lambda c=c: mm.matmul(a, b, config=c)
rows = []
for name, call in calls.items():
    try:
        out = call().float()
    except Exception as exc:  # a candidate that does not fit: say so and go on
        print(f"{name:32} failed: {type(exc).__name__}: {str(exc)[:80]}")
        continue
    err = ((out - ref).abs().max() / ref.abs().max()).item()
    if not torch.isfinite(out).all() or err > 2e-2:
        print(f"{name:32} WRONG (max rel err {err:.3g})")
        continue
    pct = []
    for _ in range(3):
        base = tt.do_bench(lambda: torch.mm(a, b))
        ours = tt.do_bench(call)
        pct.append(100 * base / ours)
    rows.append((sorted(pct)[1], name, pct, ours))
    print(
        f"{name:32} {' '.join(f'{p:6.1f}' for p in pct)} %  (last {ours * 1e3:.1f} us)", flush=True
    )
print("\nby median round:")
for med, name, _, _ in sorted(rows, reverse=True):
    print(f"  {med:6.1f} %  {name}")
