"""How steady is triton.matmul's tuner at 1024^3 bf16? One fresh process per run (session 28).

Each run tunes once and prints the choice, the best first-pass medians (us) and the final
round's matches (_runtime.settle_close_choices, since session 28: % of the champion's speed).
--samples N times each candidate with at least N samples instead of the tuner's default
(kernelab.harness.timing.benchmark's 10, stopping at 0.5 % relative standard error). The
first run (before the final round) found 100 samples no steadier: 3 of 5 runs chose alike
against 4 of 5 (results/h100/session28/matmul-small/tuner_repeat.jsonl).

  for i in 1 2 3 4; do PYTHONPATH=src python3 benchmarks/experiments/matmul_tuner_repeat.py; done
"""

import argparse
import json

import torch

from kernelab.ops import matmul as mm
from kernelab.runtime import tuner as _runtime

parser = argparse.ArgumentParser()
parser.add_argument("--samples", type=int, default=0)
parser.add_argument("--n", type=int, default=1024)
args = parser.parse_args()
if args.samples:
    from kernelab.harness.timing import benchmark

    def brief(fn):
        return benchmark(fn, mode="cold", max_time_s=0.5, warmup_ms=5.0, min_samples=args.samples)

    _runtime._brief_cold_timing = brief

a = torch.randn(args.n, args.n, device="cuda").to(torch.bfloat16)
b = torch.randn(args.n, args.n, device="cuda").to(torch.bfloat16)
out = mm.matmul(a, b).float()
ref = a.float() @ b.float()
err = ((out - ref).abs().max() / ref.abs().max()).item()
if not torch.isfinite(out).all() or err > 2e-2:  # a tuning that picked a wrong kernel
    raise SystemExit(f"WRONG: the tuned matmul's max relative error is {err:.3g}")


def label(config: dict) -> str:
    ws = " ws" if config.get("WARP_SPECIALIZE") else ""
    return f"{config['BM']}x{config['BN']}x{config['BK']} w{config['num_warps']} s{config['num_stages']}{ws}"


for choice in mm.tuned_choices():
    if choice["kernel"] != "tma":
        continue
    [ranking] = [r for k, r in _runtime.TUNING_LOG.items() if k[0] == "triton.matmul"] or [[]]
    first_pass = [(label(e["config"]), round(e["ms"] * 1e3, 2)) for e in ranking if "ms" in e]
    matches = [
        (label(e["config"]), "vs", label(e["against"]), round(e["pct"] or 0, 1))
        for e in ranking
        if "against" in e
    ]
    print(json.dumps({"samples": args.samples or "default", "chosen": label(choice["config"]),
                      "first_pass": first_pass[:4], "final_round": matches}))  # fmt: skip
