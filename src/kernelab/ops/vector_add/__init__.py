"""Vector add, out = x + y: the simplest memory-bound kernel and the bandwidth yardstick.

Per element it reads two operands and writes one (3 * itemsize bytes) and does one add, so
its arithmetic intensity is 1 / (3 * itemsize) FLOP/byte, far left of any ridge point: the
only thing that matters is keeping enough bytes in flight to cover HBM latency. Each program
handles BLOCK contiguous elements; with 16-byte aligned pointers (Triton specializes on it)
every thread issues 128-bit loads (LDG.E.128), and BLOCK / (32 * num_warps) elements per
thread give several of them in flight per thread.
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from kernelab.runtime import tuner as _runtime
from kernelab.runtime.launch_plans import planned
from kernelab.runtime.tuner import autotuner_bench, interpreting

# the dtypes it takes; a module constant, not a tuple built on every call
SUPPORTED_DTYPES = (torch.float32, torch.bfloat16, torch.float16)

# Bytes in flight per SM is what the autotuner is choosing: BLOCK * 3 * itemsize per program
# times the programs resident on an SM.
CONFIGS = [
    triton.Config({"BLOCK": 4096}, num_warps=4),
    triton.Config({"BLOCK": 8192}, num_warps=8),
    triton.Config({"BLOCK": 16384}, num_warps=8),
    triton.Config({"BLOCK": 16384}, num_warps=16),
]
INTERPRETER_CONFIG = {"BLOCK": 64}


@triton.jit
def _vector_add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    # int64 offsets: a 1 GiB fp8 tensor already has 2^30 elements, past int32 at 2^31.
    start = tl.program_id(0).to(tl.int64) * BLOCK
    offsets = start + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)  # read BLOCK * itemsize
    y = tl.load(y_ptr + offsets, mask=mask)  # read BLOCK * itemsize
    # Add in fp32 and round once: the same answer as a native bf16/fp16 add, free in a
    # memory-bound kernel, and right under the CPU interpreter too (Triton 3.9's interpreter
    # adds bf16 tiles as raw 16-bit integers).
    total = x.to(tl.float32) + y.to(tl.float32)  # BLOCK adds
    tl.store(
        out_ptr + offsets, total.to(out_ptr.dtype.element_ty), mask=mask
    )  # write BLOCK * itemsize


_vector_add_tuned = triton.autotune(configs=CONFIGS, key=["n"], do_bench=autotuner_bench)(
    _vector_add_kernel
)


def vector_add(x, y):
    """x + y for two tensors of the same shape and dtype; returns a new contiguous tensor."""
    if x.shape != y.shape or x.dtype != y.dtype:
        raise ValueError(
            f"vector_add needs equal shapes and dtypes, got {x.shape}/{x.dtype} and {y.shape}/{y.dtype}"
        )
    if x.dtype not in SUPPORTED_DTYPES:
        # it adds in fp32: fp64 would silently lose precision, integers be rounded
        raise ValueError(f"vector_add supports fp32, bf16 and fp16, not {x.dtype}")
    # a 1-D input needs no views: each costs the host about a microsecond a call
    flat = x.dim() == 1
    x_flat = x.contiguous() if flat else x.contiguous().view(-1)
    y_flat = y.contiguous() if flat else y.contiguous().view(-1)
    out = torch.empty_like(x_flat)
    n = x_flat.numel()
    if n == 0:
        return out.view(x.shape)
    # a replayed plan skips _launch and its interpreter check (an environment read, ~1.7 us on
    # the H200's host); interpreted launches never install a plan
    _launch(x_flat, y_flat, out)
    return out if flat else out.view(x.shape)


@planned("triton.vector_add", tensors=3)
def _launch(x_flat, y_flat, out) -> None:
    n = out.numel()
    if interpreting():
        block = INTERPRETER_CONFIG["BLOCK"]
        _vector_add_kernel[(triton.cdiv(n, block),)](x_flat, y_flat, out, n, BLOCK=block)
        return
    grid = functools.partial(_grid, n)
    tuner = _vector_add_tuned
    before = _runtime.tuner_state(tuner)
    tuner[grid](x_flat, y_flat, out, n)
    # Triton's tuner timed the configs one after another; the close ones meet again in
    # alternating pairs (as triton.matmul's), launched at Triton's front door, unrecorded
    _runtime.settle_close_choices(
        tuner,
        before,
        functools.partial(_launch_candidate, x_flat, y_flat, out, n),
        op="triton.vector_add",
    )


def _grid(n: int, meta: dict) -> tuple:
    return (triton.cdiv(n, meta["BLOCK"]),)


def _launch_candidate(x_flat, y_flat, out, n, candidate: dict) -> None:
    """One launch with a candidate dict (BLOCK, num_warps, num_stages), outside any plan."""
    grid = (triton.cdiv(n, candidate["BLOCK"]),)
    _vector_add_kernel[grid](x_flat, y_flat, out, n, **candidate)


PLANS = _launch.plans  # the launch plans (tests read and reset them)
