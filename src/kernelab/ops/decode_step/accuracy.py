"""How far a step may stray from the float64 reference step.

One number per output, as the harness's checker uses: the relative norm error
||out - ref|| / ||ref||, infinite when the output holds a NaN or an infinity (the reference of
finite random inputs never does, so NaN never passes).

The budget is derived, not tuned: the larger of the harness's threshold for the dtype (two
roundings to the working format, kernelab.harness.tolerances) and ERROR_FACTOR times the
error of the plain eager torch block in the same dtype on the same inputs: a step may be as
inexact as what a PyTorch user already runs, with a factor for a different but equally valid
order of roundings (fused kernels keep fp32 where eager rounds, and the other way round).
A structural bug (a wrong RoPE position, KV head, cache slot or residual) costs an error of
order one, a hundred times the bf16 budget.
"""

from __future__ import annotations

import math

ERROR_FACTOR = 2.0


def step_error(out, ref) -> float:
    import torch

    out64 = out.detach().to("cpu", torch.float64)
    if tuple(out64.shape) != tuple(ref.shape) or not bool(torch.isfinite(out64).all()):
        return math.inf
    return float((out64 - ref).norm() / ref.norm())


def error_budget(dtype: str, eager_error: float, *, bf16_truncates: bool = False) -> float:
    """The largest error a correct step in `dtype` may have, given the eager block's."""
    from kernelab.harness.tolerances import threshold

    floor = threshold(dtype, bf16_truncates=bf16_truncates)
    return max(floor, ERROR_FACTOR * eager_error) if math.isfinite(eager_error) else floor
