"""The long-row softmax's memory pattern with the softmax taken out: how fast can it copy?

The deferred cooperative softmax (softmax._softmax_coop_deferred_kernel) splits each row into
chunks, one program per chunk, a group of programs per row; each program walks the rows
n_groups apart, loading the next row's chunk while it works on this one, and optionally asks
the L2 for the row after that (prefetch.global.L2). This copies the input through exactly
that pattern (same grid, same chunk, same loads and stores, same prefetch) and nothing else:
no exps, no exchange. Its rate is the ceiling of the pattern; the softmax's distance below it
is what its arithmetic and exchange cost, and a pattern whose copy is itself short of the
target cannot carry a softmax that meets it.

Knobs, each a list: programs per SM, chunk, warps per program, L2 prefetch depth, rows held
in registers (--depth), evict_first stores; --tma-stages adds the same walk fed by TMA
through shared memory. Rows of one chunk (--cols equal to --chunks) make it a grid-stride
copy, and a --per-sm large enough for one row per program a copy with no persistence.

Each configuration is checked (the output equals the input, bit for bit) then timed cold
(L2 flushed, median), next to torch's copy of the same bytes, in one run:

    PYTHONPATH=src python3 benchmarks/experiments/softmax_skeleton_copy.py --out $OUT

Not a ceiling for the held kernel (session 13, experiments/softmax_skeleton_copy_v6..v8,
bf16 262K with the L2 prefetch): at c4096 w2 the walk copies faster with fewer programs
per SM (3: 4.050, 4: 3.990-4.007, 6: 3.851), but the held kernel capped at 4-5 per SM lost
10-13 %; at c8192 w4 the walk copies at 3.60-3.80 while the held kernel runs at 3.90.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import time
from pathlib import Path

import triton
import triton.language as tl

from kernelab.ops.softmax import _load_chunk, _prefetch_to_l2

GIB = 1 << 30


@triton.jit(do_not_specialize=["n_groups"])
def _skeleton_copy_kernel(
    x_ptr,
    out_ptr,
    n_rows,
    n_cols,
    row_stride,
    n_chunks,
    n_groups,
    CHUNK: tl.constexpr,
    L2_AHEAD: tl.constexpr,
    DEPTH: tl.constexpr = 1,
    STREAM_STORE: tl.constexpr = False,
):
    # DEPTH: later rows' chunks in registers (1 or 2: the softmax's PREFETCH); STREAM_STORE:
    # the output written evict_first, so it does not push the prefetched input out of L2
    group = tl.program_id(0) // n_chunks
    chunk = tl.program_id(0) % n_chunks
    cols = chunk * CHUNK + tl.arange(0, CHUNK)
    # every chunk is whole (the shapes below): the EVEN loads of the softmax, no masks
    upcoming = _load_chunk(x_ptr, group, n_rows, n_cols, row_stride, cols, True)
    if DEPTH >= 2:
        after_next = _load_chunk(x_ptr, group + n_groups, n_rows, n_cols, row_stride, cols, True)
    for row in tl.range(group, n_rows, n_groups):
        if L2_AHEAD > 0:
            ahead = row + (DEPTH + L2_AHEAD) * n_groups
            _prefetch_to_l2(x_ptr, ahead, n_rows, n_cols, row_stride, chunk * CHUNK, CHUNK)
        x = upcoming
        if DEPTH >= 2:
            upcoming = after_next
            after_next = _load_chunk(
                x_ptr, row + 2 * n_groups, n_rows, n_cols, row_stride, cols, True
            )
        else:
            upcoming = _load_chunk(x_ptr, row + n_groups, n_rows, n_cols, row_stride, cols, True)
        target = out_ptr + tl.cast(row, tl.int64) * row_stride + cols
        if STREAM_STORE:
            tl.store(target, x, eviction_policy="evict_first")
        else:
            tl.store(target, x)


# TMA boxes are at most 256 values a side: a chunk is read as CHUNK / 256 lines of 256
TMA_BOX = tl.constexpr(256)


@triton.jit(do_not_specialize=["n_groups"])
def _skeleton_tma_kernel(
    x_desc,
    out_ptr,
    n_rows,
    n_cols,
    n_chunks,
    n_groups,
    CHUNK: tl.constexpr,
    STAGES: tl.constexpr,
):
    # The same walk, each chunk read by the tensor memory accelerator into shared memory
    # (x_desc: the input viewed as lines of TMA_BOX values), STAGES - 1 later rows in flight
    # through the software pipeliner: bytes in flight that hold neither registers nor the
    # SM's load-miss slots.
    LINES: tl.constexpr = CHUNK // TMA_BOX
    group = tl.program_id(0) // n_chunks
    chunk = tl.program_id(0) % n_chunks
    cols = chunk * CHUNK + tl.arange(0, CHUNK)
    lines_per_row = n_cols // TMA_BOX
    for row in tl.range(group, n_rows, n_groups, num_stages=STAGES):
        x = x_desc.load([row * lines_per_row + chunk * LINES, 0])
        tl.store(out_ptr + tl.cast(row, tl.int64) * n_cols + cols, tl.reshape(x, [CHUNK]))


def run_tma(torch, benchmark, x, out, chunk, warps, per_sm, stages) -> dict:
    from triton.tools.tensor_descriptor import TensorDescriptor

    n_rows, n_cols = x.shape
    n_chunks = n_cols // chunk
    sms = torch.cuda.get_device_properties(x.device).multi_processor_count
    n_groups = max(1, min(n_rows, sms * per_sm // n_chunks))
    box = TMA_BOX.value
    lines = x.view(n_rows * n_cols // box, box)
    desc = TensorDescriptor.from_tensor(lines, [chunk // box, box])

    def launch():
        _skeleton_tma_kernel[(n_groups * n_chunks,)](
            desc, out, n_rows, n_cols, n_chunks, n_groups,
            CHUNK=chunk, STAGES=stages, num_warps=warps,
        )  # fmt: skip

    return _check_and_time(torch, benchmark, x, out, launch, n_groups)


def _check_and_time(torch, benchmark, x, out, launch, n_groups) -> dict:
    out.zero_()
    launch()
    torch.cuda.synchronize()
    if not torch.equal(out, x):
        return {"status": "check FAILED"}
    timing = benchmark(launch, mode="cold", max_time_s=0.25)
    tbps = 2 * x.numel() * x.element_size() / (timing.median_ms * 1e-3) / 1e12
    return {"status": "ok", "median_ms": timing.median_ms, "tbps": tbps, "n_groups": n_groups}


def run(torch, benchmark, x, out, chunk, warps, per_sm, l2_ahead, depth, stream) -> dict:
    n_rows, n_cols = x.shape
    n_chunks = n_cols // chunk
    sms = torch.cuda.get_device_properties(x.device).multi_processor_count
    n_groups = max(1, min(n_rows, sms * per_sm // n_chunks))

    def launch():
        _skeleton_copy_kernel[(n_groups * n_chunks,)](
            x, out, n_rows, n_cols, x.stride(0), n_chunks, n_groups,
            CHUNK=chunk, L2_AHEAD=l2_ahead, DEPTH=depth, STREAM_STORE=stream,
            num_warps=warps, num_stages=1,
        )  # fmt: skip

    return _check_and_time(torch, benchmark, x, out, launch, n_groups)


def main(argv=None) -> int:
    import torch

    from kernelab.harness.timing import benchmark

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("."))
    parser.add_argument("--cols", default="32768,262144")
    parser.add_argument("--dtypes", default="bf16,fp32")
    parser.add_argument("--chunks", default="1024,2048")
    parser.add_argument("--per-sm", default="8,12,16,24")
    parser.add_argument("--l2-ahead", default="0,1")
    parser.add_argument("--depth", default="1", help="rows in registers ahead: 1, 2")
    parser.add_argument("--stream-store", default="0", help="0, 1: evict_first on the stores")
    parser.add_argument("--tma-stages", default="", help="also the TMA walk at these stages")
    parser.add_argument("--tma-warps", default="1")
    parser.add_argument("--warps", default="1", help="warps per program of the plain walk")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    started = time.time()
    results = []
    for dtype in args.dtypes.split(","):
        torch_dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[dtype]
        itemsize = torch.empty((), dtype=torch_dtype).element_size()
        for cols in map(int, args.cols.split(",")):
            x = torch.randn(GIB // (cols * itemsize), cols, device="cuda", dtype=torch_dtype)
            out = torch.empty_like(x)
            copy = benchmark(functools.partial(out.copy_, x), mode="cold", max_time_s=0.25)
            copy_tbps = 2 * GIB / (copy.median_ms * 1e-3) / 1e12
            results.append({"dtype": dtype, "cols": cols, "config": "torch copy",
                            "tbps": copy_tbps, "status": "ok"})  # fmt: skip
            for chunk in map(int, args.chunks.split(",")):
                for per_sm in map(int, args.per_sm.split(",")):
                    for ahead, depth, stream, warps in itertools.product(
                        map(int, args.l2_ahead.split(",")),
                        map(int, args.depth.split(",")),
                        map(int, args.stream_store.split(",")),
                        map(int, args.warps.split(",")),
                    ):
                        name = f"c{chunk} w{warps} {per_sm}/SM l2a{ahead} d{depth}"
                        name += " st" * stream
                        row = {"dtype": dtype, "cols": cols, "config": name, "chunk": chunk,
                               "per_sm": per_sm, "l2_ahead": ahead, "depth": depth,
                               "stream_store": bool(stream), "warps": warps}  # fmt: skip
                        row.update(
                            run(torch, benchmark, x, out, chunk, warps, per_sm, ahead, depth,
                                stream)
                        )  # fmt: skip
                        results.append(row)
                    for stages, warps in itertools.product(
                        [int(v) for v in args.tma_stages.split(",") if v],
                        map(int, args.tma_warps.split(",")),
                    ):
                        name = f"c{chunk} w{warps} {per_sm}/SM tma s{stages}"
                        row = {"dtype": dtype, "cols": cols, "config": name, "chunk": chunk,
                               "per_sm": per_sm, "tma_stages": stages, "warps": warps}  # fmt: skip
                        try:
                            row.update(
                                run_tma(torch, benchmark, x, out, chunk, warps, per_sm, stages)
                            )
                        except Exception as exc:  # a config that does not compile is data
                            row["status"] = f"error: {type(exc).__name__}: {str(exc)[:160]}"
                        results.append(row)
            x = out = None  # the next shape's 2 GiB need the room
            torch.cuda.empty_cache()
            (args.out / "softmax_skeleton_copy.json").write_text(
                json.dumps({"gpu": torch.cuda.get_device_name(), "rows": results}, indent=1)
            )
    print("\nskeleton copy (the long-row softmax's pattern, no math), cold, TB/s (read + write)")
    for r in results:
        tbps = f"{r['tbps']:6.3f}" if r.get("tbps") else "     -"
        print(f"  {r['dtype']:5} {r['cols']:>7} {r['config']:28} {tbps}  {r['status']}")
    print(f"wall {time.time() - started:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
