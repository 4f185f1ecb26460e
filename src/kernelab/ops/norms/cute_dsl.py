"""RMSNorm forward in CuTe-DSL (`cute.rmsnorm`): one row per cluster of CTAs, the row held in
registers between its sum of squares and its output, the partial sums exchanged through
distributed shared memory (DSMEM) for rows longer than one CTA holds.

The plan (vector width, cluster size, threads, held values) is ops/cute_rows.py, the same as
the CuTe-DSL softmax's; the kernel is cute_dsl_kernel.py. Importing this file imports neither
cutlass nor torch. The backward pass is cute_dsl_backward.py.
"""

from __future__ import annotations

from kernelab.errors import KernelabError
from kernelab.ops.cute_rows import (
    aligned,
    check_rows,
    current_stream,
    refuse_partial_vectors,
    row_plan,
    row_tensors,
)

__all__ = ["rmsnorm", "row_plan"]

_compiled: dict[tuple, object] = {}


def rmsnorm(x, weight, eps: float = 1e-6, *, mbarrier: bool = True, bulk: bool = False):
    """RMSNorm of x[rows, cols] over cols with weight[cols]; a new tensor of x's dtype.
    A strided x is copied to contiguous rows first (inside the call). mbarrier: a cluster's
    sums land on each CTA's mbarrier (st.async), else a cluster barrier closes the exchange
    (ops/cute_cluster.py). bulk: each CTA's slice of x comes into shared memory by one
    cp.async.bulk (the TMA unit), for rows of whole 16-byte vectors."""
    import torch

    x = check_rows("cute rmsnorm", x)
    if weight.shape != (x.shape[1],) or weight.dtype != x.dtype or weight.device != x.device:
        raise KernelabError(
            f"cute rmsnorm: weight must be [{x.shape[1]}] of {x.dtype}, got "
            f"{tuple(weight.shape)} of {weight.dtype} on {weight.device}"
        )
    out = torch.empty_like(x)
    if x.numel() == 0:
        return out
    plan = row_plan(x.shape[1], x.element_size())
    refuse_partial_vectors("cute rmsnorm", plan, bulk)
    tensors = row_tensors(plan, x, aligned(weight).view(1, -1), out)
    key = (plan, x.dtype, mbarrier, bulk)
    if key not in _compiled:
        import cutlass.cute as cute
        from cutlass import Float32

        from kernelab.ops.norms import cute_dsl_kernel

        _compiled[key] = cute.compile(
            cute_dsl_kernel.rmsnorm_launch, *tensors, Float32(eps), current_stream(),
            plan.vec, plan.threads, plan.tile_cols, plan.cluster, mbarrier, bulk,
        )  # fmt: skip
    _compiled[key](*tensors, float(eps), current_stream())
    return out
