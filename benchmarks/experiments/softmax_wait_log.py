"""How often the deferred cooperative softmax finds a peer late, by chunks per row.

Session 5 left a hypothesis about the long rows (docs/notes/triton.md, seventh design): the
one-warp deferred kernel slows down past ~128 chunks per row because at every step each
program must wait for the slowest of its row's programs, and a two-level exchange that cut
the poll traffic 8-16x did not help. This measures the waits themselves: each program
counts the rows it finished whose poll for the peers' partials had to be repeated
(softmax.cooperative_wait_log), next to the configuration's cold TB/s in the same run.

    PYTHONPATH=src python3 benchmarks/experiments/softmax_wait_log.py --out $OUT

If the hypothesis holds, the late fraction and the polls per late finish grow with the
chunks per row where TB/s falls (64 -> 128 -> 256 chunks); if late finishes stay rare at
256 chunks, the waits are not what limits long groups.
"""

from __future__ import annotations

import argparse
import functools
import json
import time
from pathlib import Path

GIB = 1 << 30
# (dtype, columns, config): one-warp programs from 32 to 256 chunks per row, and the 4-warp
# kernel that holds 262K fp32 columns at 64 chunks
GRID = [
    *[("fp32", c, {"CHUNK": 1024, "num_warps": 1, "DEFER": True, "L2_AHEAD": 1})
      for c in (32768, 65536, 131072, 262144)],
    *[("fp32", c, {"CHUNK": 4096, "num_warps": 4, "DEFER": True}) for c in (131072, 262144)],
    *[("bf16", c, {"CHUNK": 1024, "num_warps": 1, "DEFER": True, "L2_AHEAD": 1})
      for c in (32768, 65536, 131072, 262144)],
    *[("bf16", c, {"CHUNK": 2048, "num_warps": 1, "DEFER": True}) for c in (131072, 262144)],
]  # fmt: skip


def main(argv=None) -> int:
    import torch

    from kernelab.harness.check import check_implementation
    from kernelab.harness.timing import benchmark
    from kernelab.ops import softmax as module

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("."))
    parser.add_argument("--max-time-s", type=float, default=0.25, help="per timing")
    parser.add_argument(
        "--configs",
        type=json.loads,
        default=[],
        help='more deferred configs, a JSON list of {"dtype": .., "cols": .., **config}',
    )
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    extra = [
        (c["dtype"], c["cols"], {k: v for k, v in c.items() if k not in ("dtype", "cols")})
        for c in args.configs
    ]
    rows = []
    for dtype, cols, config in GRID + extra:
        torch_dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[dtype]
        n_rows = GIB // (cols * torch_dtype.itemsize)
        x = torch.randn(n_rows, cols, device="cuda", dtype=torch_dtype)
        started = time.time()
        log = module.cooperative_wait_log(x, config)
        row = {"dtype": dtype, "cols": cols, "rows": n_rows, "config": config, **log}
        if log["resident"]:
            config = {"path": "cooperative", **config}
            # checked before it is timed, on fresh inputs against the float64 reference (a
            # wait that gave up writes NaN, which never passes); the counts of a wrong kernel
            # mean nothing, so it is not timed
            report = check_implementation(
                functools.partial(module.softmax, config=config),
                "softmax",
                {"rows": n_rows, "cols": cols},
                dtype,
                trials=1,
            )
            row["correct"] = report.ok
            row["check"] = report.message
        if log["resident"] and row["correct"]:
            timing = benchmark(
                lambda x=x, config=config: module.softmax(x, config=config),
                mode="cold",
                max_time_s=args.max_time_s,
            )
            row["tbps"] = 2 * x.numel() * x.element_size() / (timing.median_ms * 1e-3) / 1e12
        row["wall_s"] = round(time.time() - started, 2)
        rows.append(row)
        (args.out / "softmax_wait_log.json").write_text(json.dumps(rows, indent=1, default=str))
        del x
        torch.cuda.empty_cache()
    print(f"\n{'dtype':5} {'cols':>7} {'config':26} {'chunks':>6} {'TB/s':>6} {'late %':>7} "
          f"{'polls/late':>10} {'max late/prog':>13} ok")  # fmt: skip
    for r in rows:
        knobs = r["config"]
        name = f"c{knobs['CHUNK']} w{knobs['num_warps']}"
        name += f" l2a{knobs['L2_AHEAD']}" if knobs.get("L2_AHEAD") else ""
        name += " pk" if knobs.get("PACKED") else ""
        name += " early" if knobs.get("EARLY_POLL") else ""
        if not r["resident"]:
            print(f"{r['dtype']:5} {r['cols']:>7} {name:26} not resident")
            continue
        print(f"{r['dtype']:5} {r['cols']:>7} {name:26} {r['chunks_per_row']:>6} "
              f"{r.get('tbps', 0):6.3f} {100 * r['late_fraction']:7.1f} "
              f"{r['polls_per_late_finish']:10.1f} {r['most_late_in_a_program']:>13} "
              f"{r.get('correct')}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
