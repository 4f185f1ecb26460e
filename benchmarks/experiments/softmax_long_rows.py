"""Every long-row softmax candidate on this GPU, checked then timed, ranked per shape.

Issue 5, item 2: the Triton softmax must reach >= 4.0 TB/s (one read + one write) for rows
of 32,768 to 262,144 columns, fp32 and bf16. This runs each configuration the long-row tuner
chooses among (softmax.long_row_candidates: cooperative, register single pass, L2 one row per
program, L2 split rows), not just the tuner's winner, each next to the variants that test a
hypothesis about it (softmax.long_row_variants: "exp1" is the session-1 arithmetic, "pf" the
L2 kernels' prefetch), on >= 1 GiB inputs, next to torch eager and a device-to-device copy of
the same bytes, all in one run; --short-cols adds single-pass row lengths, lean vs exp1:

    PYTHONPATH=src KERNELAB_TRITON_AUTOTUNE=0 python3 benchmarks/experiments/softmax_long_rows.py \
        --out $OUT

Each candidate goes through kernelab.harness.bench.BenchSession.one: checked at the full shape
against the float64 reference (3 fresh inputs), then timed cold (L2 flushed between calls,
median). A candidate whose programs cannot all be resident is listed as such, never timed
through the fallback under its name. Writes one JSON (rows, records, each candidate's launch
plan: registers, spills, programs per SM, bytes live in L2) under --out, prints a table ranked
per shape last. Shapes are skipped, and listed, once --budget-s of wall time is spent.
"""

from __future__ import annotations

import argparse
import functools
import json
import time
from pathlib import Path
from types import SimpleNamespace

GIB = 1 << 30
COLS = (32768, 65536, 131072, 262144)
DTYPES = ("fp32", "bf16")
TARGET_TBPS = 4.0


def label(config: dict) -> str:
    """A short name for one configuration: "coop c4096 w4 pf", "l2-split s8192 b4096 w8 ps4",
    with " exp1" when it runs the session-1 arithmetic (LEAN=False)."""
    path = config["path"]
    warps = f"w{config['num_warps']}"
    # rows in flight ahead (True is 1): " pf" for one, " pf2" for two; the deferred kernel
    # always keeps one, so only its second is named
    depth = int(config.get("PREFETCH") or 0)
    if depth == 0 or (depth == 1 and config.get("DEFER")):
        prefetch = ""
    else:
        prefetch = " pf" if depth == 1 else f" pf{depth}"
    session_1 = " exp1" if config.get("LEAN") is False else ""
    # rows (or blocks) asked of the L2 ahead of the loads (prefetch.global.L2, no registers)
    if config.get("L2_AHEAD"):
        prefetch += f" l2a{config['L2_AHEAD']}"
        # only 1 / L2_PART of each chunk asked of the L2
        prefetch += f"/{config['L2_PART']}" if config.get("L2_PART", 1) > 1 else ""
    if path == "cooperative":
        deferred = " defer" if config.get("DEFER") else ""
        deferred += " hold-in" if config.get("HOLD_INPUT") else ""
        deferred += " late" if config.get("LATE_LOAD") else ""
        deferred += f" r{config['maxnreg']}" if config.get("maxnreg") else ""
        # one packed word per chunk's partials; the first poll issued before the exps
        deferred += " pk" if config.get("PACKED") else ""
        deferred += " early" if config.get("EARLY_POLL") else ""
        # masks kept on whole chunks (MASKED; the v15 records name it EVEN=False)
        deferred += " masked" if config.get("MASKED") or config.get("EVEN") is False else ""
        deferred += " tree" if config.get("TREE") else ""
        deferred += " st" if config.get("STREAM_STORE") else ""
        # bf16 pairs loaded as 32-bit words; two steps per loop iteration
        deferred += " pairs" if config.get("PAIRS") else ""
        # the row to finish held as its input pairs, its exps taken again (RECOMPUTE)
        deferred += " rc" if config.get("RECOMPUTE") else ""
        deferred += " ls" if config.get("LOG_SCALE") else ""  # 1 / S in the exponent
        # (the v5_poly paired records also name " poly<N>", POLY: half the exps by a
        # polynomial, removed; docs/notes/triton.md, nineteenth design)
        # (the v25 and v26 records also name " narrow", NARROW, and " ps<N>", PER_SM: see
        # docs/notes/triton.md, thirteenth design)
        deferred += f" u{config['UNROLL']}" if config.get("UNROLL", 1) > 1 else ""
        # at most this many row groups (GROUPS, an experiment's knob)
        deferred += f" g{config['GROUPS']}" if config.get("GROUPS") else ""
        # (the v29 and v31 records also name " s<N>", STAGES, the chunk loads pipelined
        # through shared memory; v28 ran REPOLL_STALE unnamed: both removed, see
        # docs/notes/triton.md, fourteenth design)
        name = f"coop c{config['CHUNK']} {warps}{prefetch}{deferred}"
    elif path == "flat":
        # softmax_flat: every resident program over one flat sequence of chunks
        knobs = " st" if config.get("STREAM_STORE") else ""
        knobs += " pairs" if config.get("PAIRS") else ""
        knobs += " rc" if config.get("RECOMPUTE") else ""
        name = f"flat c{config['CHUNK']} {warps}{prefetch}{knobs}"
    elif path == "l2-split":
        name = (
            f"l2-split s{config['SLICE']} b{config['BLOCK']} {warps} ps{config['PER_SM']}{prefetch}"
        )
    elif path == "l2-rows":
        name = f"l2-rows b{config['BLOCK']} {warps} ps{config['PER_SM']}{prefetch}"
    else:
        rows = f" r{config['ROWS']}" if config.get("ROWS", 1) != 1 else ""
        looped = " persistent" if config.get("PERSISTENT") else ""
        looped += " tree" if config.get("TREE") else ""
        name = f"{path}{rows} {warps}{looped}{prefetch}"
    return name + session_1


def candidates_at(module, cols: int, torch_dtype) -> list[dict]:
    """What runs at one column count: every long-row candidate with its hypothesis variants
    (long_row_variants), or for rows that take the single pass its untuned default with and
    without the lean exp (the row-tile kernel is shared with the long-row single pass)."""
    import triton

    from kernelab.runtime.tuner import row_tile_candidates

    if cols > module.SINGLE_PASS_MAX_COLS:
        return module.long_row_variants(cols, torch_dtype)
    default = {"path": "single-pass", **row_tile_candidates(triton.next_power_of_2(cols))[0]}
    return [default, {**default, "LEAN": False}]


def copy_tbps(torch, benchmark, nbytes: int, max_time_s: float) -> float:
    """The device-to-device copy of nbytes, cold: the ceiling the softmax is held against."""
    src = torch.empty(nbytes // 4, dtype=torch.int32, device="cuda").random_()
    dst = torch.empty_like(src)
    timing = benchmark(lambda: dst.copy_(src), mode="cold", max_time_s=max_time_s)
    return 2 * nbytes / (timing.median_ms * 1e-3) / 1e12


def plan_of(module, x, config) -> dict:
    """The launch plan, or the error that kept it from being read (it never stops the run)."""
    try:
        return module.long_row_plan(x, config)
    except Exception as exc:  # a plan is a description: a failure to read it is data too
        return {"error": f"{type(exc).__name__}: {exc}"}


def run_shape(
    session,
    module,
    torch,
    cols: int,
    dtype: str,
    copy: float,
    paths: set[str] | None = None,
    extra: list[dict] = (),
) -> tuple[list, list]:
    """Check and time every long-row candidate and torch eager at one shape; table rows."""
    from kernelab.output import note
    from kernelab.spec.reference import OPS

    torch_dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[dtype]
    itemsize = torch.empty((), dtype=torch_dtype).element_size()
    shape = {"rows": GIB // (cols * itemsize), "cols": cols}
    x = OPS["softmax"].make_inputs(shape, dtype, 0, "cuda")[0]
    rows, records = [], []
    candidates = [
        (label(c), c)
        for c in candidates_at(module, cols, torch_dtype)
        if paths is None or label(c) in paths or c["path"] in paths
    ]
    named = {name for name, _ in candidates}
    candidates += [(label(c), c) for c in extra if label(c) not in named]
    for name, config in [*candidates, ("torch eager", None)]:
        row = {"cols": cols, "dtype": dtype, "shape": shape, "candidate": name, "config": config}
        if config is None:
            impl = SimpleNamespace(name="torch.softmax", math_mode=None)
            fn = functools.partial(torch.softmax, dim=-1)
        else:
            row["plan"] = plan_of(module, x, config)
            # the candidate's own kernel must run: a fallback timed under its name would lie
            if not module._run_long_rows(x, torch.empty_like(x), config):
                rows.append({**row, "status": "not resident"})
                continue
            impl = SimpleNamespace(name=f"triton.softmax[{name}]", math_mode=None)
            fn = functools.partial(module.softmax, config=config)
        try:
            result, record = session.one(impl, fn, shape)
        except Exception as exc:  # one broken candidate must not end the sweep
            rows.append({**row, "status": f"error: {type(exc).__name__}: {str(exc)[:200]}"})
            continue
        if record is None:
            rows.append({**row, "status": "check FAILED", "check": result.get("check_message")})
            continue
        record.extra.update(config=config, plan=row.get("plan"))
        records.append(record.to_dict())
        tbps = result["gbps"] / 1e3
        row.update(status="ok", median_ms=result["median_ms"], tbps=tbps)
        row.update(pct_of_copy=100 * tbps / copy, rel_noise=result["rel_noise"])
        rows.append(row)
        note(f"softmax {dtype} {shape['rows']}x{cols} {name}: {tbps:.3f} TB/s")
    del x
    torch.cuda.empty_cache()
    return rows, records


def print_table(rows: list[dict], copy: float) -> None:
    print(f"\nsoftmax long rows, cold L2, TB/s = (read + write) / median; copy {copy:.3f} TB/s")
    shapes = sorted({(r["dtype"], r["cols"]) for r in rows}, key=lambda s: (s[0] != "fp32", s[1]))
    for dtype, cols in shapes:
        here = [r for r in rows if r["dtype"] == dtype and r["cols"] == cols]
        ranked = sorted(here, key=lambda r: -(r.get("tbps") or 0))
        rows_n = here[0]["shape"]["rows"]
        print(f"\n{dtype} {rows_n} x {cols}")
        print(f"  {'#':>2} {'candidate':40} {'TB/s':>6} {'copy%':>6} {'regs':>4} {'/SM':>3} "
              f"{'L2 MB':>6}  status")  # fmt: skip
        for rank, r in enumerate(ranked, 1):
            plan = r.get("plan") or {}
            live = plan.get("l2_live_bytes")
            tbps = f"{r['tbps']:6.3f}" if r.get("tbps") else "     -"
            pct = f"{r['pct_of_copy']:6.1f}" if r.get("pct_of_copy") else "     -"
            mark = " <- target" if r.get("tbps") and r["tbps"] >= TARGET_TBPS else ""
            print(f"  {rank:>2} {r['candidate']:40} {tbps} {pct} {plan.get('regs') or '':>4} "
                  f"{plan.get('per_sm') or '':>3} {f'{live / 1e6:6.1f}' if live else '':>6}  "
                  f"{r['status']}{mark}")  # fmt: skip


def main(argv=None) -> int:
    import torch

    from kernelab.environment import software_versions
    from kernelab.harness.bench import BenchSession
    from kernelab.harness.ceilings import this_gpu
    from kernelab.harness.timing import benchmark
    from kernelab.ops import softmax as module
    from kernelab.output import note
    from kernelab.spec.reference import OPS

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("."))
    parser.add_argument("--cols", default=",".join(map(str, COLS)))
    parser.add_argument(
        "--short-cols", default="", help="also these single-pass row lengths, lean vs session 1"
    )
    parser.add_argument("--dtypes", default=",".join(DTYPES))
    parser.add_argument(
        "--only", default="", help="comma list of paths (cooperative) or labels (coop c4096 w4 pf)"
    )
    parser.add_argument(
        "--configs", type=json.loads, default=[], help="JSON list of extra long-row configs"
    )
    parser.add_argument("--max-time-s", type=float, default=0.25, help="per timing")
    parser.add_argument("--budget-s", type=float, default=150.0, help="no new shape after this")
    args = parser.parse_args(argv)
    started = time.time()
    identity = this_gpu("softmax_long_rows")
    copy = copy_tbps(torch, benchmark, GIB, max_time_s=0.5)
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "softmax_long_rows.json"
    document = {
        "gpu": identity.name,
        "versions": software_versions(),
        "timer": "kernelab.harness.timing.benchmark, cold (L2 flushed), median",
        "copy_tbps": copy,
        "rows": [],
        "records": [],
        "skipped": [],
    }
    for dtype in args.dtypes.split(","):
        session = BenchSession(identity, OPS["softmax"], dtype, "cold", 10, args.max_time_s)
        all_cols = [int(c) for c in f"{args.cols},{args.short_cols}".split(",") if c]
        for cols in all_cols:
            if time.time() - started > args.budget_s:
                note(f"budget of {args.budget_s:.0f} s spent: {dtype} x {cols} skipped")
                document["skipped"].append({"dtype": dtype, "cols": cols})
                continue
            only = {name.strip() for name in args.only.split(",") if name.strip()} or None
            # extra configs apply where their optional "dtype" and "cols" keys say
            extra = [
                {k: v for k, v in c.items() if k not in ("dtype", "cols")}
                for c in args.configs
                if c.get("dtype", dtype) == dtype and c.get("cols", cols) == cols
            ]
            rows, records = run_shape(session, module, torch, cols, dtype, copy, only, extra)
            document["rows"] += rows
            document["records"] += records
            document["wall_s"] = round(time.time() - started, 1)
            path.write_text(json.dumps(document, indent=1, default=str))
    print_table(document["rows"], copy)
    print(f"\nwall {time.time() - started:.0f} s; skipped {document['skipped'] or 'none'}; {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
