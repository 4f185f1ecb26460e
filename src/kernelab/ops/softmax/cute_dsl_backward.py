"""Softmax backward in CuTe-DSL (`cute.softmax_backward`): one row per cluster of CTAs, the
row's y and dy held in registers between their dot product and dx, the dot product's
partials exchanged through distributed shared memory (DSMEM).

The plan is ops/cute_rows.py's with half the values a thread holds (BACKWARD_HELD): two
tensors share the 32 fp32 registers a thread gives the forward's one, so a portable cluster
holds rows of up to cute_rows.max_cols() / 2 values; longer rows are refused in one line
(triton.softmax_backward takes any length). The kernel is cute_dsl_backward_kernel.py.
Importing this file imports neither cutlass nor torch.
"""

from __future__ import annotations

from kernelab.errors import KernelabError
from kernelab.ops.cute_rows import (
    MAX_HELD,
    aligned,
    check_rows,
    current_stream,
    row_plan,
    row_tensors,
)

__all__ = ["BACKWARD_HELD", "backward_plan", "softmax_backward"]

BACKWARD_HELD = MAX_HELD // 2  # y and dy: 2 x 16 fp32 values a thread

_compiled: dict[tuple, object] = {}


def backward_plan(cols: int, itemsize: int):
    return row_plan(cols, itemsize, max_held=BACKWARD_HELD)


def softmax_backward(y, dy):
    """dx of softmax over the last dimension of y[rows, cols] (= softmax(x)) for dy; a new
    tensor of y's dtype. Strided inputs are copied to contiguous rows first (inside the call)."""
    import torch

    y = check_rows("cute softmax_backward", y)
    if dy.shape != y.shape or dy.dtype != y.dtype or dy.device != y.device:
        raise KernelabError(
            f"cute softmax_backward: dy must be {tuple(y.shape)} of {y.dtype} on {y.device}, "
            f"got {tuple(dy.shape)} of {dy.dtype} on {dy.device}"
        )
    dy = aligned(dy)
    dx = torch.empty_like(y)
    if y.numel() == 0:
        return dx
    plan = backward_plan(y.shape[1], y.element_size())
    tensors = row_tensors(plan, y, dy, dx)
    key = (plan, y.dtype)
    if key not in _compiled:
        import cutlass.cute as cute

        from kernelab.ops.softmax import cute_dsl_backward_kernel

        _compiled[key] = cute.compile(
            cute_dsl_backward_kernel.softmax_backward_launch, *tensors, current_stream(),
            plan.vec, plan.threads, plan.tile_cols, plan.cluster,
        )  # fmt: skip
    _compiled[key](*tensors, current_stream())
    return dx
