"""Softmax with each row waiting in shared memory, not in registers (Gluon, Hopper TMA).

rows.py's single pass keeps a whole row in registers. At rows of 8-64 KiB that fills the
register file with one or two programs per SM, and while a program reduces, nothing else of
that SM is in flight: bf16 rows of 4K-32K values ran at 3.83-4.02 TB/s there (and 3.24 at
32K in the 32-warp single pass). Triton cannot keep a row in shared memory; Gluon, Triton's
lower-level language (triton.experimental.gluon), can:

1. one program per row asks the TMA for the row, as LINES / SUB boxes of SUB lines of 256
   values, straight into shared memory, no registers held, and waits on one mbarrier;
2. three passes over the shared copy, SUB lines at a time: the running max, the running sum
   of 2^(x log2 e - c), then the output, 2^(x log2 e - c) / S, stored from registers.

Bytes: rows x cols x itemsize read from HBM once (the TMA) and written once; shared memory is
read three times. Per value: a max; an FFMA, an ex2 and an add; an FFMA, an ex2 and a
multiply (the exps are taken twice instead of being held).

A row of 64 KiB (32K bf16 values) leaves room for three programs per SM; 27-57 registers
across the configurations (Triton 3.6 and 3.9, compiled for sm_90).
On the H200 (experiments/softmax_gluon_rows_v1.json, one cold median each, same run): bf16
4.10-4.22 TB/s at 4K-32K columns against 3.83-4.02 for the tuned Triton kernels. fp32 ran
at 3.26-3.88 there, reading 32 bytes per lane (by the bank arithmetic a 2-way conflict; not
profiled). Reads are now 16 bytes per lane in every dtype (VEC), and fp32 rows of up to 16K
values took this kernel in the next tuned sweep at 4.11-4.14 (triton_kernels_sweep_20261130-023048).

It runs where the TMA does (compute capability 9.0 and up), never under the interpreter
(Gluon has none), on rows it can address: contiguous, whole steps of 2,048 values, 16-byte
aligned, at most MOST_ROW_BYTES. `fits` says whether a tensor qualifies; the softmax's tuners
offer these configurations only then, and time them beside the register kernels.
"""

from __future__ import annotations

import functools
import warnings

import torch

try:
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
except ImportError:  # a Triton without Gluon: the path is never offered
    gluon = None

from kernelab.runtime.tuner import interpreting

# A TMA box spans at most 256 values along each dimension: a row is seen as lines of 256,
# and read in steps of 8 or 16 lines, so rows are whole steps of 8 lines (2,048 values).
LINE_VALUES = 256
LEAST_STEP_LINES = 8
# One row per program in shared memory: 64 KiB keeps three programs per SM (227 KiB).
MOST_ROW_BYTES = 64 << 10
# (SUB lines per step, warps): each measured on the H200 (softmax_gluon_rows_v1, bf16,
# TB/s at 4K / 8K / 16K / 32K columns): sub8 w8 4.22 / 4.12 / 4.11 / 4.10, sub16 w8
# 4.13 / 4.14 / 4.11 / 4.09, sub8 w4 4.15 / 4.12 / 4.10 / 4.07. The tuner picks per shape.
CONFIGS = (
    {"path": "shared-row", "SUB": 8, "num_warps": 8},
    {"path": "shared-row", "SUB": 16, "num_warps": 8},
    {"path": "shared-row", "SUB": 8, "num_warps": 4},
)


if gluon is not None:
    LINE = gl.constexpr(LINE_VALUES)
    LOG2E = gl.constexpr(1.4426950408889634)
    # Triton 3.6 names the TMA load async_copy_global_to_shared; 3.9 renamed it async_load
    _tma_load = getattr(tma, "async_load", None) or tma.async_copy_global_to_shared

    @gluon.jit
    def _bring_into_shared(x_desc, first_line, steps, LINES: gl.constexpr, SUB: gl.constexpr):
        """TMA lines [first_line, first_line + LINES) of 256 values into `steps` (LINES / SUB
        steps of SUB lines), one box per step on one mbarrier, and wait for all of them: the
        only read from HBM, LINES x 256 x itemsize bytes, no register held while in flight."""
        arrived = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
        mbarrier.init(arrived, count=1)
        mbarrier.expect(arrived, (LINES // SUB) * x_desc.block_type.nbytes)
        for step in range(LINES // SUB):
            _tma_load(x_desc, [first_line + step * SUB, 0], arrived, steps.index(step))
        mbarrier.wait(arrived, phase=0)
        mbarrier.invalidate(arrived)

    @gluon.jit
    def _max_log2(steps, LINES: gl.constexpr, SUB: gl.constexpr, layout: gl.constexpr):
        """The max of the values in shared memory times log2(e), rounded once to fp32 (every
        exp is taken against this c, so its rounding cancels in the normalization); -inf for
        values that are all -inf. One read of shared memory, an elementwise max per value."""
        running = gl.full([SUB, LINE], float("-inf"), gl.float32, layout)
        for step in range(LINES // SUB):
            running = gl.maximum(running, steps.index(step).load(layout).to(gl.float32))
        return gl.max(gl.max(running, axis=1), axis=0) * LOG2E

    @gluon.jit
    def _exp_sum(steps, c, LINES: gl.constexpr, SUB: gl.constexpr, layout: gl.constexpr):
        """The sum of 2^(x log2 e - c) over the values in shared memory (c finite): one read,
        an FFMA, an ex2 and an add per value."""
        total = gl.zeros([SUB, LINE], gl.float32, layout)
        for step in range(LINES // SUB):
            x = steps.index(step).load(layout).to(gl.float32)
            total += gl.exp2(x * LOG2E - c)
        return gl.sum(gl.sum(total, axis=1), axis=0)

    @gluon.jit
    def _write_scaled(
        steps, c, scale, target, LINES: gl.constexpr, SUB: gl.constexpr, layout: gl.constexpr
    ):
        """target[i] = 2^(x_i log2 e - c) * scale for the values in shared memory, in order:
        one read, an FFMA, an ex2 and a multiply per value, and the only write (LINES x 256 x
        itemsize bytes)."""
        lines = gl.arange(0, SUB, layout=gl.SliceLayout(1, layout))
        cols = gl.arange(0, LINE, layout=gl.SliceLayout(0, layout))
        within = lines[:, None] * LINE + cols[None, :]
        for step in range(LINES // SUB):
            x = steps.index(step).load(layout).to(gl.float32)
            y = gl.exp2(x * LOG2E - c) * scale
            gl.store(target + step * SUB * LINE + within, y.to(target.dtype.element_ty))

    @gluon.jit
    def _softmax_shared_row_kernel(
        x_desc,
        out_ptr,
        out_row_stride,
        LINES: gl.constexpr,  # lines of LINE values in a row
        SUB: gl.constexpr,  # lines per step of the passes (and per TMA box)
        VEC: gl.constexpr,  # values per lane per read: 16 bytes
        num_warps: gl.constexpr,
    ):
        row = gl.program_id(0)
        # the row as LINES / SUB steps of SUB lines (a step is indexed at run time):
        # LINES x LINE x itemsize bytes of shared memory
        steps = gl.allocate_shared_memory(x_desc.dtype, [LINES // SUB, SUB, LINE], x_desc.layout)
        _bring_into_shared(x_desc, row * LINES, steps, LINES, SUB)
        # a warp reads whole lines, 16 bytes per lane (no bank conflicts)
        layout: gl.constexpr = gl.BlockedLayout([1, VEC], [1, 32], [num_warps, 1], [1, 0])
        c = _max_log2(steps, LINES, SUB, layout)
        # a row of only -inf: exps of 0, a sum of 0, and NaN out (0 * inf), the documented
        # output; without this, -inf - -inf would give the same NaN one step earlier
        c = gl.where(c == float("-inf"), 0.0, c)
        scale = 1.0 / _exp_sum(steps, c, LINES, SUB, layout)
        target = out_ptr + row.to(gl.int64) * out_row_stride
        _write_scaled(steps, c, scale, target, LINES, SUB, layout)


def shape_fits(n_cols: int, itemsize: int, row_stride: int) -> bool:
    """Whether rows of this length, item size and stride can take this path: 2- or 4-byte
    values, whole steps of 8 lines of 256, contiguous rows, at most MOST_ROW_BYTES per row."""
    return (
        itemsize in (2, 4)
        and n_cols % (LINE_VALUES * LEAST_STEP_LINES) == 0
        and row_stride == n_cols
        and 0 < n_cols * itemsize <= MOST_ROW_BYTES
    )


@functools.cache
def _has_tma(device_index: int) -> bool:
    return torch.cuda.get_device_capability(device_index) >= (9, 0)


def works_here(device_index: int, dtype) -> bool:
    """Whether the Gluon kernels compile and run on this GPU in this dtype: one launch on a
    row of 2,048 values, checked against torch, the first time either path is offered. Gluon
    is experimental (its API moved between Triton 3.6 and 3.9), so a Triton or a GPU where it
    fails gets the register kernels and a warning, not an error. Not asked (and so not
    offered) while a CUDA graph is being captured: the check synchronizes."""
    if torch.cuda.is_available() and torch.cuda.is_current_stream_capturing():
        return False
    return _works_here(device_index, dtype)


@functools.cache
def _works_here(device_index: int, dtype) -> bool:
    def attempt() -> bool:
        n_cols = LINE_VALUES * LEAST_STEP_LINES
        x = torch.randn(1, n_cols, device=f"cuda:{device_index}", dtype=dtype)
        out = torch.empty_like(x)
        _launch_row(x, out, CONFIGS[0])
        expected = torch.softmax(x.float(), dim=-1).to(dtype)
        return bool(torch.allclose(out.float(), expected.float(), rtol=2e-2, atol=1e-6))

    return works_or_warn("the shared-memory (Gluon) kernels are", attempt)


def works_or_warn(what: str, attempt) -> bool:
    """Run attempt(), a test launch of a Gluon kernel that is True where it matched torch; a
    compiler or driver error counts as False. On False, warn "triton softmax: <what> off here
    (<reason>)", so the register kernels serve those rows: Gluon is experimental, and a
    Triton where it breaks must still give answers."""
    try:
        ok = attempt()
        reason = "" if ok else "a wrong answer on a test row"
    except Exception as exc:  # a compiler or driver error of any kind
        ok, reason = False, f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0][:200]}"
    if not ok:
        warnings.warn(
            f"triton softmax: {what} off here ({reason}); the register kernels serve those rows",
            RuntimeWarning,
            stacklevel=3,
        )
    return ok


def fits(x2d) -> bool:
    """Whether this 2-D tensor can take the shared-memory path here (see the module doc)."""
    if gluon is None or interpreting() or x2d.device.type != "cuda":
        return False
    if x2d.dim() != 2 or x2d.stride(1) != 1 or x2d.data_ptr() % 16:
        return False
    if not shape_fits(x2d.shape[1], x2d.element_size(), x2d.stride(0)):
        return False
    if x2d.numel() // LINE_VALUES >= 1 << 31:
        return False  # TMA coordinates are 32-bit
    index = x2d.device.index if x2d.device.index is not None else 0
    return _has_tma(index) and works_here(index, x2d.dtype)


def candidates_for(x2d) -> list[dict]:
    """The configurations the softmax tuners may time for this tensor: those of CONFIGS whose
    step divides its rows, where it fits; none elsewhere."""
    if not fits(x2d):
        return []
    lines = x2d.shape[1] // LINE_VALUES
    return [dict(c) for c in CONFIGS if lines % c["SUB"] == 0]


def launch(x2d, out, config: dict) -> None:
    """Softmax of the rows of x2d into out (same shape and dtype, contiguous rows)."""
    if not fits(x2d):
        raise ValueError("softmax_shared.launch: this tensor does not fit the path (see fits)")
    _launch_row(x2d, out, config)


def _launch_row(x2d, out, config: dict) -> None:
    n_rows, n_cols = x2d.shape
    lines, sub = n_cols // LINE_VALUES, config["SUB"]
    if lines % sub:
        raise ValueError(f"softmax_shared.launch: {lines} lines is not whole steps of {sub}")
    itemsize = x2d.element_size()
    layout = gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=8 * itemsize, rank=2)
    # the rows as lines of 256 values; one TMA box is one step of `sub` lines
    view = x2d.view(n_rows * lines, LINE_VALUES)
    x_desc = TensorDescriptor(
        view, list(view.shape), list(view.stride()), [sub, LINE_VALUES], layout
    )
    _softmax_shared_row_kernel[(n_rows,)](
        x_desc, out, out.stride(0), LINES=lines, SUB=sub, VEC=16 // itemsize,
        num_warps=config["num_warps"],
    )  # fmt: skip
