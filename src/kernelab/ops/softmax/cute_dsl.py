"""Softmax in CuTe-DSL (`cute.softmax`): one row per cluster of CTAs, the row held in
registers, its statistics exchanged through distributed shared memory (DSMEM).

Triton has no clusters: a Triton row longer than one program holds must either go through
HBM/L2 twice or exchange partials through global memory (cooperative.py). Here a row of up to
cute_rows.max_cols() values is split over a cluster of up to MAX_CLUSTER CTAs, co-scheduled
on one GPC, each holding cols / C values in registers, and the (max, sum) pairs cross SM to
SM. The kernel is cute_dsl_kernel.py; the plan (pure arithmetic the CPU tests check) is
ops/cute_rows.py; this file launches. Importing it imports neither cutlass nor torch.
"""

from __future__ import annotations

from kernelab.ops.cute_rows import (
    check_rows,
    current_stream,
    refuse_partial_vectors,
    row_plan,
    row_tensors,
)

__all__ = ["row_plan", "softmax"]

_compiled: dict[tuple, object] = {}


def softmax(x, *, mbarrier: bool = True, bulk: bool = False):
    """Softmax over the last dimension of a 2-D CUDA tensor (fp32, bf16, fp16); a new tensor.
    A strided x is copied to contiguous rows first (inside the call). mbarrier: a cluster's
    (max, sum) pairs land on each CTA's mbarrier (st.async), else a cluster barrier closes
    the exchange (ops/cute_cluster.py). bulk: each CTA's slice comes into shared memory by one
    cp.async.bulk (the TMA unit), for rows of whole 16-byte vectors."""
    import torch

    x = check_rows("cute softmax", x)
    out = torch.empty_like(x)
    if x.numel() == 0:
        return out
    plan = row_plan(x.shape[1], x.element_size())
    refuse_partial_vectors("cute softmax", plan, bulk)
    tensors = row_tensors(plan, x, out)
    key = (plan, x.dtype, mbarrier, bulk)
    if key not in _compiled:
        import cutlass.cute as cute

        from kernelab.ops.softmax import cute_dsl_kernel

        _compiled[key] = cute.compile(
            cute_dsl_kernel.softmax_launch, *tensors, current_stream(),
            plan.vec, plan.threads, plan.tile_cols, plan.cluster, mbarrier, bulk,
        )  # fmt: skip
    _compiled[key](*tensors, current_stream())
    return out
