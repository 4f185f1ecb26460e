"""RMSNorm backward in CuTe-DSL (`cute.rmsnorm_backward`): stack(dx, dweight) [rows + 1,
cols], as the op rmsnorm_backward defines it.

A persistent grid of about two CTAs per SM; each walks every grid-th row with the row's x
and dy in registers (both statistics and dx from one read) and keeps its fp32 dweight
partial in registers across its rows, writing it once at the end (grid x cols x 4 bytes).
torch sums the partials down the columns (a fixed order: dweight is the same on every run)
into the last row. A row lives in one CTA: with x, dy and the partial held, 16 fp32 values
a thread each (ops/cute_rows.py's plan at BACKWARD_HELD), rows of up to 8,192 values;
longer rows are refused in one line (triton.rmsnorm_backward takes any length). The kernel
is cute_dsl_backward_kernel.py. Importing this file imports neither cutlass nor torch.
"""

from __future__ import annotations

from kernelab.errors import KernelabError
from kernelab.ops.cute_rows import (
    MAX_HELD,
    MAX_THREADS,
    aligned,
    check_rows,
    current_stream,
    refuse_partial_vectors,
    row_plan,
    row_tensors,
)

__all__ = ["BACKWARD_HELD", "MAX_COLS", "backward_plan", "rmsnorm_backward"]

BACKWARD_HELD = MAX_HELD // 2
# one CTA of at most half the largest holds the row: at 1,024 threads a thread has 64
# registers, and x, dy and the partial (48) beside the weight and addresses spill (sm_90)
MAX_COLS = MAX_THREADS // 2 * BACKWARD_HELD
CTAS_PER_SM = 2

_compiled: dict[tuple, object] = {}


def backward_plan(cols: int, itemsize: int):
    if cols > MAX_COLS:
        raise KernelabError(
            f"cute rmsnorm_backward holds a row in one CTA: at most {MAX_COLS} columns, got "
            f"{cols} (triton.rmsnorm_backward takes any length)"
        )
    return row_plan(cols, itemsize, max_held=BACKWARD_HELD)


def rmsnorm_backward(x, weight, dy, eps: float = 1e-6, *, bulk: bool = False):
    """stack(dx, dweight) of rmsnorm(x, weight, eps) for the gradient dy; x's dtype. bulk: each
    row's x and dy come into shared memory by cp.async.bulk (the TMA unit), the next row's
    while this one's dx is written, for rows of whole 16-byte vectors."""
    import torch

    from kernelab.runtime.tuner import sm_count

    x = check_rows("cute rmsnorm_backward", x)  # one line when the DSL or the GPU is absent
    from cutlass.cute.runtime import from_dlpack

    for name, t, shape in (("weight", weight, (x.shape[1],)), ("dy", dy, tuple(x.shape))):
        if tuple(t.shape) != shape or t.dtype != x.dtype or t.device != x.device:
            raise KernelabError(
                f"cute rmsnorm_backward: {name} must be {shape} of {x.dtype} on {x.device}, "
                f"got {tuple(t.shape)} of {t.dtype} on {t.device}"
            )
    rows, cols = x.shape
    out = torch.empty((rows + 1, cols), device=x.device, dtype=x.dtype)
    if x.numel() == 0:
        return out.zero_()
    plan = backward_plan(cols, x.element_size())
    refuse_partial_vectors("cute rmsnorm_backward", plan, bulk)
    grid = min(rows, CTAS_PER_SM * sm_count(x.device))
    partial = torch.empty((grid, cols), device=x.device, dtype=torch.float32)
    mx, mdy, mdx = row_tensors(plan, x, aligned(dy), out[:rows])
    mw = row_tensors(plan, aligned(weight).view(1, -1))[0]
    mp = from_dlpack(partial, assumed_align=16).mark_compact_shape_dynamic(
        mode=0, stride_order=(0, 1)
    )
    key = (plan, x.dtype, bulk)
    if key not in _compiled:
        import cutlass.cute as cute
        from cutlass import Float32

        from kernelab.ops.norms import cute_dsl_backward_kernel

        _compiled[key] = cute.compile(
            cute_dsl_backward_kernel.rmsnorm_backward_launch, mx, mw, mdy, mdx, mp, Float32(eps),
            current_stream(), plan.vec, plan.threads, plan.tile_cols, bulk,
        )  # fmt: skip
    _compiled[key](mx, mw, mdy, mdx, mp, float(eps), current_stream())
    out[rows] = partial.sum(dim=0)  # grid x cols x 4 bytes read, cols written
    return out
