"""Long softmax rows held by a thread-block cluster: each CTA keeps a slice in shared memory.

The question (issue 5, bf16 rows of 64K-256K values at 3.80-3.97 TB/s, fp32 256K at 3.98):
the shared-row kernel (softmax_shared.py) runs bf16 rows of up to 32K values at 4.10-4.22
TB/s, but a longer row does not fit one CTA's shared memory. The split kernel
(softmax_shared_split.py) cuts it over several programs that meet through global atomics,
and its programs sit on their shared memory while the row's last chunk is scheduled. A
Hopper cluster removes that wait: the CTAS CTAs of a cluster are started together (the
hardware guarantees co-scheduling), so one cluster per row can hold the whole row in its
CTAs' shared memory and meet at one cluster barrier.

Triton's own model of a cluster (num_ctas) is used: every tensor is split across the CTAs
(the layouts' cga_layout), so a step of CTAS x SUB lines of 256 values has SUB lines in each
CTA. Per row, per CTA:
  1. TMA its lines (Triton offsets each CTA's box by its rank) into shared memory;
  2. the max of each line, then each line's sum of 2^(x log2 e - line max): both passes read
     shared memory and stay inside the CTA (reductions along the line only);
  3. publish SUB packed (max, sum) words to global memory, the cluster barrier
     (barrier.cluster arrive.release / wait.acquire), read all CTAS x SUB words, combine
     them into the row's C and S (softmax._combine_stats);
  4. write 2^(x log2 e - C) / S from shared memory.

Bytes: one read (TMA) and one write of the tensor; per row CTAS x SUB x 8 bytes of words
written and read CTAS times (L2). Shared memory: the row's slice, row bytes / CTAS per CTA.

    PYTHONPATH=src python3 benchmarks/experiments/softmax_gluon_cluster.py --out $OUT

Each configuration is checked against the float64 reference (kernelab's check, 3 fresh
inputs) before it is timed cold beside the library's tuned softmax and torch's copy.
Compiled here for sm_90 with Triton 3.6 before its first run (PTX read: each CTA's TMA
coordinate is row x LINES + step x CTAS x SUB + rank x SUB; 16-byte stores; no store masked
to one CTA). Run in session 9 (softmax_gluon_cluster_v1): correct everywhere (28 of 28 edge
cases) and slower everywhere: bf16 65K-262K 3.24-3.65 TB/s against 3.80-3.99 for the tuned
library, 32K bf16 in two CTAs 3.70-3.77 against 4.07. Refuted.
"""

from __future__ import annotations

import argparse
import functools
import json
from pathlib import Path

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

from kernelab.ops import softmax as _softmax
from kernelab.ops.softmax import shared as shared

LINE = shared.LINE
LOG2E = shared.LOG2E


@gluon.jit
def _cluster_barrier():
    """Every thread of every CTA of the cluster: arrive (release), wait (acquire). The global
    writes before it are visible to the cluster's reads after it. Returns 0, which the reads'
    addresses add, so the compiler cannot move them above the barrier."""
    return gl.inline_asm_elementwise(
        "barrier.cluster.arrive.release.aligned;\n"
        "barrier.cluster.wait.acquire.aligned;\n"
        "mov.u32 $0, 0;",
        "=r", [], dtype=gl.int32, is_pure=False, pack=1,
    )  # fmt: skip


@gluon.jit
def _cluster_row_kernel(
    x_desc, out_ptr, out_row_stride, words_ptr, LINES: gl.constexpr, SUB: gl.constexpr,
    CTAS: gl.constexpr, layout: gl.constexpr, every: gl.constexpr, bar_layout: gl.constexpr,
    num_warps: gl.constexpr,
):  # fmt: skip
    # a program is a cluster, one row; a step is CTAS x SUB lines, SUB of them in each CTA
    row = gl.program_id(0)
    STEPS: gl.constexpr = LINES // (CTAS * SUB)
    WIDTH: gl.constexpr = CTAS * SUB
    steps = gl.allocate_shared_memory(x_desc.dtype, [STEPS, WIDTH, LINE], x_desc.layout)
    arrived = gl.allocate_shared_memory(gl.int64, [1], bar_layout)
    mbarrier.init(arrived, count=1)
    # the bytes that land in this CTA: its SUB lines of each step
    mbarrier.expect(arrived, STEPS * SUB * LINE * x_desc.dtype.primitive_bitwidth // 8)
    for step in range(STEPS):
        shared._tma_load(x_desc, [row * LINES + step * WIDTH, 0], arrived, steps.index(step))
    mbarrier.wait(arrived, phase=0)
    mbarrier.invalidate(arrived)

    running = gl.full([WIDTH, LINE], float("-inf"), gl.float32, layout)
    for step in range(STEPS):
        running = gl.maximum(running, steps.index(step).load(layout).to(gl.float32))
    line_c = gl.max(running, axis=1) * LOG2E  # each line's max, log2 units; inside the CTA
    line_c_safe = gl.where(line_c == float("-inf"), 0.0, line_c)
    total = gl.zeros([WIDTH, LINE], gl.float32, layout)
    for step in range(STEPS):
        x = steps.index(step).load(layout).to(gl.float32)
        total += gl.exp2(x * LOG2E - line_c_safe[:, None])
    line_sum = gl.sum(total, axis=1)

    lines = gl.arange(0, WIDTH, layout=gl.SliceLayout(1, layout))
    slots = words_ptr + row.to(gl.int64) * WIDTH
    gl.store(slots + lines, _softmax._packed(1, line_c, line_sum))
    after = _cluster_barrier()
    got = gl.load(slots + after + gl.arange(0, WIDTH, layout=every), volatile=True)
    maxes = (got >> 32).to(gl.int32).to(gl.float32, bitcast=True)
    sums = (got & 0x7FFFFFFF).to(gl.int32).to(gl.float32, bitcast=True)
    # a line of only -inf: max -inf, sum 0, weight 0; a row of only -inf: C = -inf, S NaN,
    # and NaN out (the documented output)
    row_c, row_sum = _softmax._combine_stats(maxes, sums, True)
    scale = 1.0 / row_sum

    cols = gl.arange(0, LINE, layout=gl.SliceLayout(0, layout))
    within = lines[:, None] * LINE + cols[None, :]
    target = out_ptr + row.to(gl.int64) * out_row_stride
    for step in range(STEPS):
        x = steps.index(step).load(layout).to(gl.float32)
        y = gl.exp2(x * LOG2E - row_c) * scale
        gl.store(target + step * (WIDTH * LINE) + within, y.to(target.dtype.element_ty))


def _layouts(ctas: int, sub: int, warps: int, itemsize: int):
    """(shared, registers, every-CTA-holds-all, barrier) layouts for a cluster of ctas CTAs.
    cga_layout bases are in CTA tiles: bit k of the CTA rank moves 2^k tiles along the lines."""
    split = [[1 << k, 0] for k in range(ctas.bit_length() - 1)]
    copies = [[0] for _ in range(ctas.bit_length() - 1)]  # each CTA its own copy
    smem = gl.NVMMASharedLayout(
        swizzle_byte_width=0, element_bitwidth=8 * itemsize, rank=2, cga_layout=split
    )
    regs = gl.BlockedLayout([1, 16 // itemsize], [1, 32], [warps, 1], [1, 0], cga_layout=split)
    every = gl.BlockedLayout([1], [32], [warps], [0], cga_layout=copies)
    return smem, regs, every, mbarrier.MBarrierLayout(cga_layout=copies)


def launch(x, config: dict):
    n_rows, n_cols = x.shape
    ctas, sub, warps = config["ctas"], config["SUB"], config["num_warps"]
    lines = n_cols // shared.LINE_VALUES
    assert x.is_contiguous() and n_cols % shared.LINE_VALUES == 0 and lines % (ctas * sub) == 0
    smem, regs, every, bar = _layouts(ctas, sub, warps, x.element_size())
    view = x.view(n_rows * lines, shared.LINE_VALUES)
    # the cluster's box is CTAS x SUB lines; the compiler gives each CTA its SUB
    box = [ctas * sub, shared.LINE_VALUES]
    x_desc = TensorDescriptor(view, list(view.shape), list(view.stride()), box, smem)
    out = torch.empty_like(x)
    words = torch.empty(n_rows * ctas * sub, device=x.device, dtype=torch.int64)
    _cluster_row_kernel[(n_rows,)](
        x_desc, out, out.stride(0), words, LINES=lines, SUB=sub, CTAS=ctas, layout=regs,
        every=every, bar_layout=bar, num_warps=warps, num_ctas=ctas,
    )  # fmt: skip
    return out


def configs_for(n_cols: int, itemsize: int) -> list[dict]:
    """Clusters whose CTAs hold 32 or 64 KiB of the row each (at most 16 CTAs)."""
    row_bytes = n_cols * itemsize
    found = []
    for slice_kib in (64, 32):
        ctas = row_bytes // (slice_kib << 10)
        if 2 <= ctas <= 16 and ctas & (ctas - 1) == 0:
            for sub, warps in ((8, 8), (8, 4)):
                found.append({"ctas": ctas, "SUB": sub, "num_warps": warps})
    return found


def edge_cases(n_cols: int, dtype) -> torch.Tensor:
    """Five rows of n_cols: random, a row of only -inf, a row whose first half is -inf (whole
    lines and CTAs of -inf), logits near 1e4, and a row with one huge value."""
    x = torch.randn(5, n_cols, device="cuda", dtype=torch.float32)
    x[1] = float("-inf")
    x[2, : n_cols // 2] = float("-inf")
    x[3] = x[3] * 10 + 1e4
    x[4, n_cols // 3] = 3e4
    return x.to(dtype)


def check_edges(cols: str, dtypes: str) -> list[dict]:
    """Each configuration on edge_cases against torch's float64 softmax; NaN only where the
    reference has NaN (the row of only -inf)."""
    torch_dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}
    found = []
    for dtype in dtypes.split(","):
        for n_cols in (int(c) for c in cols.split(",")):
            x = edge_cases(n_cols, torch_dtype[dtype])
            expected = torch.softmax(x.double(), dim=-1)
            for config in configs_for(n_cols, x.element_size()):
                got = launch(x, config).double()
                same_nan = bool(torch.equal(got.isnan(), expected.isnan()))
                finite = ~expected.isnan()
                error = float((got[finite] - expected[finite]).abs().max())
                ok = same_nan and error < (1e-2 if dtype == "bf16" else 1e-5)
                found.append({"dtype": dtype, "cols": n_cols, **config, "ok": ok,
                              "same_nan": same_nan, "max_abs_error": error})  # fmt: skip
                print("edges", found[-1], flush=True)
    return found


def main(argv=None) -> int:
    from softmax_gluon_rows import run_experiment  # this folder's script

    from kernelab.ops import softmax as library

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("."))
    parser.add_argument("--cols", default="65536,131072,262144,32768")
    parser.add_argument("--dtypes", default="bf16,fp32")
    args = parser.parse_args(argv)
    edges = check_edges(args.cols, args.dtypes)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "softmax_gluon_cluster_edges.json").write_text(json.dumps(edges, indent=1))

    def entries_for(x) -> list:
        entries = [("library (tuned)", library.softmax, None)]
        for config in configs_for(x.shape[1], x.element_size()):
            name = "cluster{} sub{} w{}".format(config["ctas"], config["SUB"], config["num_warps"])
            entries.append((name, functools.partial(launch, config=config), None))
        return entries

    return run_experiment(
        args.out, args.dtypes, args.cols, entries_for, "softmax_gluon_cluster.json"
    )


if __name__ == "__main__":
    raise SystemExit(main())
