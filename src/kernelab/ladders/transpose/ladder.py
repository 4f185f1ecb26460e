"""Run the transpose ladder: the compile report (no GPU), exact checks of every step, timing
beside torch and a copy of the same bytes in the same run, and a profile of every step's
proof metric under Nsight Compute (the engine the primitive ladders share: ladders/engine.py).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from kernelab.errors import KernelabError
from kernelab.ladders.engine import (
    compile_report,
    profile_steps,
    public_row,
    timed_rows,
    to_record,
)
from kernelab.ladders.transpose.launch import build_step, transpose
from kernelab.ladders.transpose.steps import DTYPES, Step, parse_steps
from kernelab.spec.reference import get_op

__all__ = [
    "check_steps", "compile_report", "compile_transpose", "parse_steps", "profile_steps",
    "time_ladder",
]  # fmt: skip

ANCHOR = "torch.transpose"  # x.t().contiguous(); CUB has no transpose to set beside it
NO_CUB = "CUB: no device transpose in CUB; torch is the anchor"
CHECK_SHAPES = ((1, 1), (1, 33), (33, 1), (31, 65), (127, 129), (1000, 1), (257, 4099))


def check_steps(
    steps: list[Step], dtypes=DTYPES, progress: Callable[[str], None] = lambda _: None
) -> list[dict]:
    """Every step against the exact transpose at the awkward shapes, on the GPU."""
    import torch

    spec = get_op("transpose")
    rows = []
    for step in steps:
        for dtype in dtypes:
            progress(f"checking {step.name} {dtype}")
            bad = []
            for r, c in CHECK_SHAPES:
                (x,) = spec.make_inputs({"rows": r, "cols": c}, dtype, seed=r + c, device="cuda")
                out = transpose(step, x)
                if not torch.equal(out.double(), spec.reference(x)):
                    bad.append(f"{r}x{c}")
            torch.cuda.synchronize()
            rows.append({"step": step.name, "dtype": dtype, "ok": not bad, "wrong_at": bad})
    return rows


def time_ladder(
    steps: list[Step],
    shapes: list[tuple[int, int]],
    dtype: str,
    *,
    mode: str = "cold",
    max_time_s: float = 2.0,
    progress: Callable[[str], None] = lambda _: None,
    do_bench: Callable | bool | None = None,
    host_cost: Callable | bool | None = None,
) -> tuple[list[dict], list]:
    """Every step beside torch and the copy ceiling at each rows x cols; (rows, records).
    Each row (and its record's extra) carries, beside the harness's median, the do_bench
    median and the host cost per call (engine.timed_rows; do_bench, host_cost: None for the
    real ones, False to leave one out)."""
    import torch

    spec = get_op("transpose")
    rows, records = [], []
    for r, c in shapes:
        (x,) = spec.make_inputs({"rows": r, "cols": c}, dtype, seed=1, device="cuda")
        dst = torch.empty_like(x)
        entries = [(ANCHOR, "x.t().contiguous()", lambda x=x: x.t().contiguous())]
        entries += [(s.name, s.technique, lambda s=s, x=x: transpose(s, x)) for s in steps]
        cost = spec.cost({"rows": r, "cols": c}, dtype)
        found = timed_rows(
            entries, bytes_moved=cost.bytes, copy=lambda d=dst, x=x: d.copy_(x),
            copy_bytes=cost.bytes, anchor=ANCHOR, mode=mode, max_time_s=max_time_s,
            progress=lambda text, r=r, c=c: progress(f"{text} at {r}x{c} {dtype}"),
            do_bench=do_bench, host_cost=host_cost,
        )  # fmt: skip
        for row in found:
            row["shape"] = {"rows": r, "cols": c}
            records.append(to_record("transpose", row, dtype, cost))
        rows += found
    return [public_row(row) for row in rows], records


# --- the launcher ncu runs: each chosen step once --------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kernelab.ladders.transpose.ladder")
    parser.add_argument("--rows", type=int, default=8192)
    parser.add_argument("--cols", type=int, default=8192)
    parser.add_argument("--dtype", default="fp32", choices=DTYPES)
    parser.add_argument("--steps", default=None)
    args = parser.parse_args(argv)
    try:
        import torch

        (x,) = get_op("transpose").make_inputs(
            {"rows": args.rows, "cols": args.cols}, args.dtype, seed=1, device="cuda"
        )
        for step in parse_steps(args.steps):
            transpose(step, x)
        torch.cuda.synchronize()
    except KernelabError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


def compile_transpose(steps, progress=lambda _: None) -> list[dict]:
    return compile_report(steps, DTYPES, build_step, progress)


if __name__ == "__main__":
    raise SystemExit(main())
