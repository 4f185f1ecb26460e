"""LayerNorm and RMSNorm forward over the last dimension, fp32 statistics, any row stride.

layernorm(x, w, b, eps) = (x - mean) / sqrt(var + eps) * w + b   (biased var, bias optional)
rmsnorm(x, w, eps)      = x / sqrt(mean(x^2) + eps) * w

Both are memory-bound: the ideal traffic is one read and one write of x (2 * rows * cols *
itemsize bytes) plus the weight (and bias) once, which stays in L2 after the first rows.
Read the folder in this order:

    teaching.py   the tutorial kernel: one program per row, the row in registers
    rows.py       rows up to SINGLE_PASS_MAX_COLS: tuned row tiles, one read and one write
    looped.py     longer rows: a loop for the statistics, one to normalize (two reads)

The statistics are accumulated in fp32 whatever the input dtype; the output has x's dtype.
"""

from __future__ import annotations

import torch
import triton

from kernelab.ops.norms import looped, rows
from kernelab.ops.norms.looped import LOOP_BLOCK
from kernelab.ops.norms.rows import candidates_for
from kernelab.runtime.launch_plans import planned
from kernelab.runtime.tuner import row_tile_candidates

__all__ = ["SINGLE_PASS_MAX_COLS", "candidates_for", "config_for", "layernorm", "rmsnorm"]

# the dtypes it takes; a module constant, not a tuple built on every call
SUPPORTED_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
SINGLE_PASS_MAX_COLS = 32768


def _normalize(
    x,
    weight,
    bias,
    eps: float,
    *,
    is_rms: bool,
    single_pass_max_cols: int | None,
    config: dict | None,
):
    if x.dim() != 2:
        raise ValueError(f"norms expect a 2-D tensor [rows, cols], got shape {tuple(x.shape)}")
    if x.dtype not in SUPPORTED_DTYPES:
        # fp32 statistics: fp64 would silently lose precision, integers be rounded
        name = "rmsnorm" if is_rms else "layernorm"
        raise ValueError(f"{name} supports fp32, bf16 and fp16, not {x.dtype}")
    n_rows, n_cols = x.shape
    if weight.shape != (n_cols,) or (bias is not None and bias.shape != (n_cols,)):
        raise ValueError(f"weight and bias must have shape ({n_cols},)")
    x2d = x if x.stride(1) == 1 else x.contiguous()
    weight = weight.contiguous()
    bias_arg = bias.contiguous() if bias is not None else weight  # never read without HAS_BIAS
    # the same new contiguous tensor as torch.empty((n_rows, n_cols), device=, dtype=), for
    # two thirds of its Python cost (0.87 against 1.3 us on the CPU here)
    out = torch.empty_like(x2d, memory_format=torch.contiguous_format)
    if n_rows == 0 or n_cols == 0:
        return out
    if single_pass_max_cols is not None or config is not None:
        _launch(x2d, weight, bias, bias_arg, out, eps, is_rms, single_pass_max_cols, config)
        return out
    # the tuned choice: planned (launch_plans); eps and the flags are replayed as recorded,
    # so they are part of the key. Without a bias the kernel's bias pointer is weight's, which
    # the recording finds among the call's tensors by address: passing weight once keeps one
    # tensor and the aliasing check out of every key.
    if bias is None:
        _planned(x2d, weight, out, float(eps), is_rms, False)
    else:
        _planned_with_bias(x2d, weight, bias_arg, out, float(eps), is_rms, True)
    return out


@planned("triton.norms", tensors=3, untuned=None)
def _planned(x2d, weight, out, eps: float, is_rms: bool, has_bias: bool) -> None:
    """The tuned launch without a bias (the kernel's bias pointer is weight's)."""
    _launch(x2d, weight, None, weight, out, eps, is_rms, None, None)


@planned(_planned.plans, tensors=4, untuned=None)
def _planned_with_bias(x2d, weight, bias, out, eps: float, is_rms: bool, has_bias: bool) -> None:
    """The tuned launch with a bias."""
    _launch(x2d, weight, bias, bias, out, eps, is_rms, None, None)


PLANS = _planned.plans  # the launch plans (tests read and reset them)


def _launch(x2d, weight, bias, bias_arg, out, eps, is_rms, single_pass_max_cols, config) -> None:
    limit = SINGLE_PASS_MAX_COLS if single_pass_max_cols is None else single_pass_max_cols
    if x2d.shape[1] > limit:
        looped.launch(x2d, weight, bias, bias_arg, out, eps, is_rms)
    else:
        rows.launch(x2d, weight, bias, bias_arg, out, eps, is_rms, config)


def layernorm(
    x,
    weight,
    bias=None,
    eps: float = 1e-5,
    *,
    single_pass_max_cols: int | None = None,
    config: dict | None = None,
):
    """LayerNorm of x[rows, cols] over cols; bias may be None. Returns a new tensor.

    config launches one of row_tile_candidates(next_power_of_2(cols)) instead of the tuned one.
    """
    return _normalize(
        x,
        weight,
        bias,
        float(eps),
        is_rms=False,
        single_pass_max_cols=single_pass_max_cols,
        config=config,
    )


def rmsnorm(
    x,
    weight,
    eps: float = 1e-6,
    *,
    single_pass_max_cols: int | None = None,
    config: dict | None = None,
):
    """RMSNorm of x[rows, cols] over cols. Returns a new tensor (config: as for layernorm)."""
    return _normalize(
        x,
        weight,
        None,
        float(eps),
        is_rms=True,
        single_pass_max_cols=single_pass_max_cols,
        config=config,
    )


def config_for(x, weight, bias=None, *, is_rms: bool) -> dict:
    """The path and launch configuration the norm of x uses (the default if not tuned yet)."""
    n_cols = x.shape[-1]
    if n_cols > SINGLE_PASS_MAX_COLS:
        return {"path": "looped", "BLOCK": LOOP_BLOCK}
    key = rows.tuner_key(x, weight, is_rms, bias is not None)
    config = rows.TUNED.get(key) or row_tile_candidates(triton.next_power_of_2(n_cols))[0]
    return {"path": "single-pass", **config}
