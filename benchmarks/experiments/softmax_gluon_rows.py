"""A softmax whose row waits in shared memory, not in registers (Gluon, Hopper TMA).

The question (issue 5, bf16 rows of 4K-32K values, 3.85-3.97 TB/s in the Triton kernels):
the register single pass holds a whole row in registers, so at 32K bf16 values a program of
32 warps fills the SM's register file and nothing else is in flight while it reduces (3.24
TB/s). Triton cannot keep a row in shared memory; Gluon (Triton's lower-level language,
triton.experimental.gluon) can. Here each program asks the TMA for its row (one box of
[cols / 256, 256] values straight into shared memory, no registers held), waits on an
mbarrier, then makes three passes over the shared copy: the running max, the running sum of
exps, and the output, stored from registers. A 64 KiB row leaves room for three programs per
SM, so the next rows are in flight while one is reduced.

Bytes: read rows * cols * itemsize from HBM once (TMA), write the same; shared memory is read
three times. FLOPs per value: one max, one FFMA + ex2 + add for the sum, one FFMA + ex2 + mul
for the output (the exps are taken twice instead of being held).

Needs Triton with Gluon and a Hopper GPU (TMA). Each shape is checked against the float64
reference (kernelab's check, three fresh inputs) before it is timed cold beside the library's
tuned softmax and torch's copy of the same bytes:

    PYTHONPATH=src python3 benchmarks/experiments/softmax_gluon_rows.py --out $OUT
"""

from __future__ import annotations

import argparse
import functools
import json
from pathlib import Path

import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

GIB = 1 << 30
# A TMA box is at most 256 values along each dimension: a row is seen as [cols / 256, 256].
LINE_VALUES = 256
LINE = gl.constexpr(LINE_VALUES)
LOG2E = gl.constexpr(1.4426950408889634)


@gluon.jit
def _row_in_shared_kernel(
    x_desc,
    out_ptr,
    out_row_stride,
    LINES: gl.constexpr,  # lines of LINE values in a row
    SUB: gl.constexpr,  # lines read from shared memory per step
    num_warps: gl.constexpr,
):
    row = gl.program_id(0)
    dtype: gl.constexpr = x_desc.dtype
    # one whole row, as LINES / SUB steps of SUB lines of LINE values (the step is indexed at
    # run time): LINES x LINE x itemsize bytes of shared memory (64 KiB at 32K bf16)
    steps = gl.allocate_shared_memory(dtype, [LINES // SUB, SUB, LINE], x_desc.layout)
    arrived = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    mbarrier.init(arrived, count=1)
    # the row's only read from HBM, straight into shared memory: one TMA box per step
    mbarrier.expect(arrived, (LINES // SUB) * x_desc.block_type.nbytes)
    for step in range(LINES // SUB):
        tma.async_copy_global_to_shared(
            x_desc, [row * LINES + step * SUB, 0], arrived, steps.index(step)
        )
    mbarrier.wait(arrived, phase=0)
    mbarrier.invalidate(arrived)

    # each warp reads whole lines: 32 lanes x 8 values = 256, 16 bytes per lane
    layout: gl.constexpr = gl.BlockedLayout([1, 8], [1, 32], [num_warps, 1], [1, 0])
    running = gl.full([SUB, LINE], float("-inf"), gl.float32, layout)
    for step in range(LINES // SUB):
        x = steps.index(step).load(layout).to(gl.float32)
        running = gl.maximum(running, x)
    c = gl.max(gl.max(running, axis=1), axis=0) * LOG2E
    c = gl.where(c == float("-inf"), 0.0, c)  # a row of only -inf: NaN below, not here
    total = gl.zeros([SUB, LINE], gl.float32, layout)
    for step in range(LINES // SUB):
        x = steps.index(step).load(layout).to(gl.float32)
        total += gl.exp2(x * LOG2E - c)
    scale = 1.0 / gl.sum(gl.sum(total, axis=1), axis=0)

    lines = gl.arange(0, SUB, layout=gl.SliceLayout(1, layout))
    cols = gl.arange(0, LINE, layout=gl.SliceLayout(0, layout))
    within = lines[:, None] * LINE + cols[None, :]
    target = out_ptr + row.to(gl.int64) * out_row_stride
    for step in range(LINES // SUB):
        x = steps.index(step).load(layout).to(gl.float32)
        y = gl.exp2(x * LOG2E - c) * scale
        # the only write: SUB x LINE x itemsize per step
        gl.store(target + step * SUB * LINE + within, y.to(out_ptr.dtype.element_ty))


def softmax_row_in_shared(x, sub: int = 8, warps: int = 4):
    """Softmax over the rows of a contiguous 2-D x whose row length is a multiple of 256 (and at
    most 256 lines: 64K values); fp32, bf16 or fp16."""
    import torch

    n_rows, n_cols = x.shape
    if n_cols % LINE_VALUES or n_cols // LINE_VALUES > 256 or not x.is_contiguous():
        raise ValueError("rows of a multiple of 256 values, at most 65,536, contiguous")
    lines = n_cols // LINE_VALUES
    sub = min(sub, lines)
    layout = gl.NVMMASharedLayout(
        swizzle_byte_width=0, element_bitwidth=x.element_size() * 8, rank=2
    )
    # the rows as lines of 256 values; one TMA box is one step of `sub` lines
    view = x.view(n_rows * lines, LINE_VALUES)
    box = [sub, LINE_VALUES]
    x_desc = TensorDescriptor(view, list(view.shape), list(view.stride()), box, layout)
    out = torch.empty_like(x)
    _row_in_shared_kernel[(n_rows,)](
        x_desc, out, out.stride(0), LINES=lines, SUB=sub, num_warps=warps
    )
    return out


def copy_ceiling_tbps() -> float:
    """torch's copy of 1 GiB, cold: the ceiling each softmax here is read against."""
    import torch

    from kernelab.harness.timing import benchmark

    src = torch.empty(GIB // 4, dtype=torch.int32, device="cuda")
    copy = functools.partial(torch.Tensor.copy_, torch.empty_like(src), src)
    copy_ms = benchmark(copy, mode="cold", max_time_s=0.5).median_ms
    return 2 * GIB / (copy_ms * 1e-3) / 1e12


def check_and_time(entries, x, dtype: str) -> list[dict]:
    """Each (name, fn, plan) of entries: checked against the float64 reference on 3 fresh
    inputs of x's shape, then timed cold on x; one row each (a failure is a row too)."""
    from kernelab.harness.check import check_implementation
    from kernelab.harness.timing import benchmark

    shape = {"rows": x.shape[0], "cols": x.shape[1]}
    nbytes = 2 * x.numel() * x.element_size()  # one read and one write
    rows = []
    for name, fn, plan in entries:
        row = {"dtype": dtype, "cols": x.shape[1], "candidate": name}
        try:
            if plan is not None:
                row["plan"] = plan()
            report = check_implementation(fn, "softmax", shape, dtype, trials=3)
            if not report.ok:
                rows.append({**row, "status": f"check FAILED: {report.message}"})
                print(rows[-1], flush=True)
                continue
            timing = benchmark(functools.partial(fn, x), mode="cold", max_time_s=0.5)
        except Exception as exc:  # one broken variant must not end the run
            rows.append({**row, "status": f"error: {type(exc).__name__}: {exc}"[:300]})
            print(rows[-1], flush=True)
            continue
        tbps = nbytes / (timing.median_ms * 1e-3) / 1e12
        row.update(status="ok", median_ms=timing.median_ms, tbps=tbps, rel_noise=timing.rel_noise)
        rows.append(row)
        print(
            f"{dtype} {x.shape[1]:>7} {name:32} {tbps:6.3f} TB/s {row.get('plan', '')}", flush=True
        )
    return rows


def run_experiment(out: Path, dtypes: str, cols: str, entries_for, name: str, fits=None) -> int:
    """For each dtype and row length (comma lists) that `fits(cols, itemsize)` allows, a 1 GiB
    input, the (name, fn, plan) entries that entries_for(x) gives, checked and timed
    (check_and_time); the rows and the copy ceiling to out/name."""
    import torch

    torch_dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}
    copy_tbps = copy_ceiling_tbps()
    print(f"copy {copy_tbps:.3f} TB/s", flush=True)
    rows = []
    for dtype in dtypes.split(","):
        for n_cols in (int(c) for c in cols.split(",")):
            itemsize = torch.empty((), dtype=torch_dtype[dtype]).element_size()
            if fits is not None and not fits(n_cols, itemsize):
                continue
            shape = (GIB // (n_cols * itemsize), n_cols)
            x = torch.randn(shape, device="cuda", dtype=torch_dtype[dtype])
            rows += check_and_time(entries_for(x), x, dtype)
            del x
            torch.cuda.empty_cache()
    out.mkdir(parents=True, exist_ok=True)
    document = {"copy_tbps": copy_tbps, "triton": triton.__version__, "rows": rows}
    (out / name).write_text(json.dumps(document, indent=1))
    return 0


def resident_groups(kernel, device, probe: tuple, kwargs: dict, n_rows: int, n_chunks: int):
    """For a persistent split-row kernel that needs every program resident: (row groups, plan,
    zeroed workspace). Programs per SM are the compiled kernel's (the library's formula and
    the driver's answer, the smaller); the workspace has four turn slots per chunk per group,
    int64 words that carry no turn's tag yet."""
    import torch

    from kernelab.runtime.tuner import compiled_occupancy

    per_sm, info = compiled_occupancy(kernel, device, probe, kwargs)
    sms = torch.cuda.get_device_properties(device).multi_processor_count
    n_groups = min(n_rows, per_sm * sms // n_chunks)
    plan = {"per_sm": per_sm, **info, "n_groups": n_groups, "n_chunks": n_chunks}
    if n_groups < 1:
        raise ValueError(f"not resident: {plan}")
    words = torch.zeros(n_groups * 4 * n_chunks, device=device, dtype=torch.int64)
    return n_groups, plan, words


def launch_split_row(kernel, x, chunk: int, kwargs: dict, extra: tuple = ()):
    """Run a held-row style kernel, whose arguments are (x, out, words, n_rows, x_row_stride,
    out_row_stride, n_chunks, n_groups, *extra), on a contiguous 2-D x of whole chunks of
    `chunk` values, every resident row group at once (resident_groups); (out, plan)."""
    import torch

    n_rows, n_cols = x.shape
    n_chunks = n_cols // chunk
    assert x.is_contiguous() and n_cols % chunk == 0 and n_chunks <= 256
    out = torch.empty_like(x)
    probe = (x, out, torch.zeros(1, device=x.device, dtype=torch.int64), n_rows, x.stride(0),
             out.stride(0), n_chunks, 1, *extra)  # fmt: skip
    n_groups, plan, words = resident_groups(kernel, x.device, probe, kwargs, n_rows, n_chunks)
    kernel[(n_groups * n_chunks,)](
        x, out, words, n_rows, x.stride(0), out.stride(0), n_chunks, n_groups, *extra, **kwargs
    )
    return out, plan


def compare_main(argv, description, configs, label, launch, record_name) -> int:
    """The command line the long-row Gluon experiments share: each configuration (configs, or
    --configs as a JSON list) named label(config) and run by launch(x, config) -> (out, plan),
    checked and timed beside the library's tuned softmax (run_experiment)."""
    from kernelab.ops import softmax as library

    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--out", type=Path, default=Path("."))
    parser.add_argument("--cols", default="65536,131072,262144")
    parser.add_argument("--dtypes", default="bf16,fp32")
    parser.add_argument("--configs", type=json.loads, default=None, help="JSON list of configs")
    args = parser.parse_args(argv)

    def entries_for(x) -> list:
        entries = [("library (tuned)", library.softmax, None)]
        for config in args.configs or configs:
            # the plan: a one-row launch compiles it and sizes its resident grid (so the
            # plan's n_groups reads 1; the timed launches use every resident program)
            plan = functools.partial(lambda c: launch(x[:1].contiguous(), c)[1], config)
            entries.append((label(config), lambda t, c=config: launch(t, c)[0], plan))
        return entries

    return run_experiment(args.out, args.dtypes, args.cols, entries_for, record_name)


def main(argv=None) -> int:
    from kernelab.ops import softmax as library

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("."))
    parser.add_argument("--cols", default="4096,8192,16384,32768")
    parser.add_argument("--dtypes", default="bf16,fp32")
    parser.add_argument("--configs", default="8x4,16x4,8x8,16x8", help="SUBxWARPS list")
    args = parser.parse_args(argv)

    def entries_for(x) -> list:
        entries = [("library (tuned)", library.softmax, None)]
        for config in args.configs.split(","):
            sub, warps = (int(v) for v in config.split("x"))
            fn = functools.partial(softmax_row_in_shared, sub=sub, warps=warps)
            entries.append((f"gluon sub{sub} w{warps}", fn, None))
        return entries

    def fits(n_cols: int, itemsize: int) -> bool:
        return n_cols * itemsize <= 64 * 1024  # one row in 64 KiB of shared memory at most

    return run_experiment(
        args.out, args.dtypes, args.cols, entries_for, "softmax_gluon_rows.json", fits
    )


if __name__ == "__main__":
    raise SystemExit(main())
