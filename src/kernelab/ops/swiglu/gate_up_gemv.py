"""The MLP's first half of a decode step in one kernel: y = silu(x W_gate^T) * (x W_up^T).

Unfused, a Llama layer runs gate_up = x W_gate_up^T (one GEMV over both weights), writes
gate_up[m, 2n], then the SwiGLU kernel reads it back and writes y[m, n]. At m = 1 that round
trip is 4 * n * itemsize bytes (gate_up written, then read) against 2 * n * k * itemsize of
weights (0.05 % at Llama-3-8B's 14336 x 4096): the bytes hardly matter, the second launch
does (its few microseconds, and one more kernel in the decode step's graph).

Here one program owns BLOCK_N columns of the output: it streams the matching BLOCK_N rows
of W_gate AND of W_up over its slice of K, with one load of the x tile feeding both
products, so each weight byte is read once and x is read half as often as by two GEMVs.
The work is cut like ops/gemv's split-K path over the 2n rows of W_gate_up: a program
holds BLOCK_N / 2 rows of each weight, the bytes per program of the plain GEMV.

Where K is split, the fp32 partial sums of both products go to a workspace
[SPLIT, 2, M, N] and the second kernel adds them in a fixed order (the same bits on every
run), then applies silu(g) * u: SwiGLU needs the whole sum, so it can only run after the
reduction. Unsplit, the first kernel applies it and writes y directly.

At m = 1 (bf16/fp16) gate_up_late_kernel runs instead: the late-summed form of ops/gemv's
LATE_SUM with X_AS_TILE, for two weights. Each product stays elementwise in an fp32
accumulator of the W tile's layout and is summed along K once, after the loop, with x's row
loaded as a tile in that layout: a K step is 16-byte loads of both weights and of x, and FMAs,
with no cross-lane reduction and no barrier (the step-summed form's every step ended in one,
1.7-2.1x slower for the bf16 GEMV). The launches come from gate_up_tiles.json beside this file,
in ops/gemv's tile-table format and read through its plan() (the m = 1 entry: derived, not
measured, until ops/quant_gemv/sweep.py's candidates are timed on a GPU); buckets without an
entry take the GEMV's GPU_TILES. Calls replay their launches through runtime.launch_plans.
"""

from __future__ import annotations

from pathlib import Path

import torch
import triton
import triton.language as tl

from kernelab.errors import KernelabError
from kernelab.ops.gemv import MAX_M, SUPPORTED_DTYPES, sm_count, tiles
from kernelab.ops.gemv import plan as gemv_plan
from kernelab.runtime.launch_plans import keep, planned
from kernelab.runtime.tuner import interpreting

TABLE_PATH = Path(__file__).with_name("gate_up_tiles.json")


def load_table() -> dict:
    """gate_up_tiles.json, in ops/gemv/tiles.json's format: checked by its check_table, read
    once."""
    return tiles.load_table(TABLE_PATH)


@triton.jit
def _silu_mul(g, u):
    # sigmoid(g) = 1 / (1 + exp(-g)): 0 (not NaN) for g = -1000, 1 for g = +1000
    return g * (1.0 / (1.0 + tl.exp(-g))) * u


@triton.jit
def gate_up_split_kernel(x_ptr, wg_ptr, wu_ptr, out_ptr, M, N, K, k_per_split,
                         sxm, sxk, sgn, sgk, sun, suk, s_split, s_half, som,
                         BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                         USE_DOT: tl.constexpr, IEEE: tl.constexpr, FUSE: tl.constexpr):  # fmt: skip
    pid_n, split, pid_m = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    rows = pid_m.to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n.to(tl.int64) * BLOCK_N + tl.arange(0, BLOCK_N)
    k_start = split * k_per_split  # k_per_split is a multiple of BLOCK_K
    k_end = tl.minimum(k_start + k_per_split, K)
    acc_g = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    acc_u = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    w_rows = cols[:, None] < N
    for k0 in range(k_start, k_end, BLOCK_K):
        ks = k0 + tl.arange(0, BLOCK_K)
        k_ok = ks < k_end
        x = tl.load(
            x_ptr + rows[:, None] * sxm + ks[None, :] * sxk,
            mask=(rows[:, None] < M) & k_ok[None, :],
            other=0.0,
        )  # BLOCK_M*BLOCK_K, once
        wg = tl.load(
            wg_ptr + cols[:, None] * sgn + ks[None, :] * sgk, mask=w_rows & k_ok[None, :], other=0.0
        )  # BLOCK_N*BLOCK_K of W_gate
        wu = tl.load(
            wu_ptr + cols[:, None] * sun + ks[None, :] * suk, mask=w_rows & k_ok[None, :], other=0.0
        )  # BLOCK_N*BLOCK_K of W_up
        if USE_DOT:
            if IEEE:  # fp32 inputs, or any input on the interpreter (its bf16 dot is wrong)
                x, wg, wu = x.to(tl.float32), wg.to(tl.float32), wu.to(tl.float32)
                acc_g = tl.dot(x, tl.trans(wg), acc_g, input_precision="ieee")
                acc_u = tl.dot(x, tl.trans(wu), acc_u, input_precision="ieee")
            else:
                acc_g = tl.dot(x, tl.trans(wg), acc_g)
                acc_u = tl.dot(x, tl.trans(wu), acc_u)
        else:
            # products in fp32 on the CUDA cores: at M < 16 an MMA would waste most rows
            xf = x.to(tl.float32)[:, None, :]
            acc_g += tl.sum(xf * wg.to(tl.float32)[None, :, :], axis=2)
            acc_u += tl.sum(xf * wu.to(tl.float32)[None, :, :], axis=2)
    mask = (rows[:, None] < M) & (cols[None, :] < N)
    if FUSE:  # K unsplit: the sums are whole, y written once (M*N*itemsize)
        out = out_ptr + rows[:, None] * som + cols[None, :]
        tl.store(out, _silu_mul(acc_g, acc_u).to(out_ptr.dtype.element_ty), mask=mask)
    else:  # fp32 partials of both products: 2*M*N*4 bytes per split
        out = out_ptr + split.to(tl.int64) * s_split + rows[:, None] * som + cols[None, :]
        tl.store(out, acc_g, mask=mask)
        tl.store(out + s_half, acc_u, mask=mask)


@triton.jit
def gate_up_late_kernel(x_ptr, wg_ptr, wu_ptr, out_ptr, N, K, k_per_split, sxk, sgn, sgk, sun,
                        suk, s_split, s_half, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                        X_AS_TILE: tl.constexpr, STAGES: tl.constexpr, FUSE: tl.constexpr):  # fmt: skip
    pid_n, split = tl.program_id(0), tl.program_id(1)
    cols = pid_n.to(tl.int64) * BLOCK_N + tl.arange(0, BLOCK_N)
    k_start = split * k_per_split  # a multiple of BLOCK_K
    k_end = tl.minimum(k_start + k_per_split, K)
    w_rows = cols[:, None] < N
    wide_g = tl.zeros((BLOCK_N, BLOCK_K), dtype=tl.float32)  # the products, summed at the end
    wide_u = tl.zeros((BLOCK_N, BLOCK_K), dtype=tl.float32)
    for k0 in tl.range(k_start, k_end, BLOCK_K, num_stages=STAGES):
        ks = (k0 + tl.arange(0, BLOCK_K))[None, :]
        k_ok = ks < k_end
        if X_AS_TILE:  # x's row as a [BLOCK_N, BLOCK_K] tile in W's layout
            x = tl.load(x_ptr + cols[:, None] * 0 + ks * sxk, mask=k_ok, other=0.0)
        else:
            x = tl.load(x_ptr + ks * sxk, mask=k_ok, other=0.0)
        wg = tl.load(wg_ptr + cols[:, None] * sgn + ks * sgk, mask=w_rows & k_ok, other=0.0)
        wu = tl.load(wu_ptr + cols[:, None] * sun + ks * suk, mask=w_rows & k_ok, other=0.0)
        xf = x.to(tl.float32)
        wide_g += wg.to(tl.float32) * xf
        wide_u += wu.to(tl.float32) * xf
    g, u = tl.sum(wide_g, axis=1), tl.sum(wide_u, axis=1)
    if FUSE:  # K unsplit: the sums are whole, y written once
        tl.store(out_ptr + cols, _silu_mul(g, u).to(out_ptr.dtype.element_ty), mask=cols < N)
    else:  # fp32 partials of both products, [SPLIT, 2, 1, N]
        out = out_ptr + split.to(tl.int64) * s_split + cols
        tl.store(out, g, mask=cols < N)
        tl.store(out + s_half, u, mask=cols < N)


@triton.jit
def swiglu_splits_kernel(part_ptr, y_ptr, count, SPLIT: tl.constexpr, BLOCK: tl.constexpr):
    # reads SPLIT * 2 * BLOCK * 4 bytes of partials, writes BLOCK * itemsize of y
    offsets = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < count
    g = tl.zeros((BLOCK,), dtype=tl.float32)
    u = tl.zeros((BLOCK,), dtype=tl.float32)
    for s in tl.static_range(SPLIT):  # a fixed order: the same bits on every run
        g += tl.load(part_ptr + (2 * s) * count + offsets, mask=mask, other=0.0)
        u += tl.load(part_ptr + (2 * s + 1) * count + offsets, mask=mask, other=0.0)
    tl.store(y_ptr + offsets, _silu_mul(g, u).to(y_ptr.dtype.element_ty), mask=mask)


def plan(m: int, n: int, k: int, sms: int | None, *, interpreter: bool = False,
         itemsize: int | None = None, table: dict | None = None) -> dict:  # fmt: skip
    """The GEMV's plan for the 2n rows of W_gate_up, each program's rows shared between the
    two weights (BLOCK_N / 2 of each; the interpreter keeps its 16 to see several blocks).
    itemsize: bytes of x's elements; the launch then comes from `table` (default
    gate_up_tiles.json), GPU_TILES where it has no entry. None: GPU_TILES."""
    if itemsize is not None and table is None:
        table = load_table()
    launch = gemv_plan(m, 2 * n, k, sms, interpreter=interpreter, itemsize=itemsize,
                       table=table if itemsize is not None else None)  # fmt: skip
    if not interpreter:
        floor = 1 if launch["LATE_SUM"] else 16
        launch["BLOCK_N"] = max(floor, launch["BLOCK_N"] // 2)
    return launch


def _validate(x, w_gate, w_up) -> None:
    if x.dim() != 2 or w_gate.dim() != 2 or w_gate.shape != w_up.shape or (
            x.shape[1] != w_gate.shape[1]):  # fmt: skip
        raise KernelabError(f"gate_up_swiglu needs x[m, k] and w_gate, w_up of one shape "
                            f"[n, k], got {tuple(x.shape)}, {tuple(w_gate.shape)} and "
                            f"{tuple(w_up.shape)}")  # fmt: skip
    if not (x.dtype == w_gate.dtype == w_up.dtype) or x.dtype not in SUPPORTED_DTYPES:
        raise KernelabError(f"gate_up_swiglu needs x, w_gate and w_up of one dtype among fp32, "
                            f"bf16, fp16, got {x.dtype}, {w_gate.dtype} and {w_up.dtype}")  # fmt: skip
    if x.shape[0] > MAX_M:
        raise KernelabError(f"gate_up_swiglu is the decode path for m <= {MAX_M}, got m = "
                            f"{x.shape[0]}; use a GEMM and swiglu")  # fmt: skip
    if not (x.device == w_gate.device == w_up.device):
        raise KernelabError("gate_up_swiglu needs x, w_gate and w_up on one device")


def gate_up_swiglu(x, w_gate, w_up, *, launch: dict | None = None):
    """silu(x @ w_gate^T) * (x @ w_up^T) -> y[m, n] in x's dtype, fp32 accumulation and
    activation; any strides (w_gate and w_up may be the halves of one W_gate_up).

    launch: a plan() dict to use instead of the table's (the tests pin the forms, the sweep
    times them; LATE_SUM: the m = 1 late-summed form).
    """
    _validate(x, w_gate, w_up)
    (m, k), n = x.shape, w_gate.shape[0]
    y = torch.empty((m, n), dtype=x.dtype, device=x.device)
    if m == 0 or n == 0:
        return y
    if k == 0:
        return y.zero_()  # silu(0) * 0
    _dispatch(x, w_gate, w_up, y, launch)
    return y


@planned("triton.gate_up_swiglu", tensors=4, untuned=(None,))
def _dispatch(x, w_gate, w_up, y, launch) -> None:
    """Launch the form gate_up_swiglu() chose into y (launch: as gate_up_swiglu takes it)."""
    (m, k), n = x.shape, w_gate.shape[0]
    interp = interpreting()
    if launch is None:
        sms = None if interp or x.device.type != "cuda" else sm_count(x.device.index or 0)
        launch = plan(m, n, k, sms, interpreter=interp, itemsize=x.element_size())
    if launch.get("LATE_SUM"):
        if m != 1 or launch["BLOCK_M"] != 1 or launch["USE_DOT"]:
            raise KernelabError("gate_up_swiglu: the late-summed form is for m = 1, BLOCK_M = 1")
        _late(x, w_gate, w_up, y, launch)
        return
    split = launch["split"]
    fuse = split == 1
    out = y if fuse else torch.empty((split, 2, m, n), dtype=torch.float32, device=x.device)
    keep(out)  # every split writes its whole slice before the reduction reads it
    grid = (triton.cdiv(n, launch["BLOCK_N"]), split, triton.cdiv(m, launch["BLOCK_M"]))
    gate_up_split_kernel[grid](
        x, w_gate, w_up, out, m, n, k, launch["k_per_split"], x.stride(0), x.stride(1),
        w_gate.stride(0), w_gate.stride(1), w_up.stride(0), w_up.stride(1),
        0 if fuse else 2 * m * n, 0 if fuse else m * n, n, BLOCK_M=launch["BLOCK_M"],
        BLOCK_N=launch["BLOCK_N"], BLOCK_K=launch["BLOCK_K"], USE_DOT=launch["USE_DOT"],
        IEEE=x.dtype == torch.float32 or interp, FUSE=fuse, num_warps=4,
    )  # fmt: skip
    if not fuse:
        _reduce(out, y, split)


PLANS = _dispatch.plans  # the launch plans (tests read and reset them)


def _reduce(out, y, split: int) -> None:
    count = y.numel()
    block = 64 if interpreting() else 1024
    swiglu_splits_kernel[(triton.cdiv(count, block),)](out, y, count, SPLIT=split, BLOCK=block)


def _late(x, w_gate, w_up, y, p: dict) -> None:
    """The m = 1 late form into y (through [SPLIT, 2, 1, N] fp32 partials when K is split)."""
    (_, k), n = x.shape, w_gate.shape[0]
    split = p["split"]
    fuse = split == 1
    out = y if fuse else torch.empty((split, 2, 1, n), dtype=torch.float32, device=x.device)
    keep(out)
    gate_up_late_kernel[(triton.cdiv(n, p["BLOCK_N"]), split)](
        x, w_gate, w_up, out, n, k, p["k_per_split"], x.stride(1), w_gate.stride(0),
        w_gate.stride(1), w_up.stride(0), w_up.stride(1), 0 if fuse else 2 * n,
        0 if fuse else n, BLOCK_N=p["BLOCK_N"], BLOCK_K=p["BLOCK_K"],
        X_AS_TILE=p.get("X_AS_TILE", False), STAGES=p["num_stages"], FUSE=fuse,
        num_warps=p["num_warps"], num_stages=p["num_stages"],
    )  # fmt: skip
    if not fuse:
        _reduce(out, y, split)
