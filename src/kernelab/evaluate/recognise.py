"""What op does a reference compute? A small table of recognisers over the aten ops it runs.

The reference runs once under a dispatch mode that records every aten op. When exactly one
of them does arithmetic (the rest only move, view or allocate data) and it is in the table
below, its cost comes from kernelab.roofline.costs at the shapes it was called with:

    mm, bmm, addmm, baddbmm              gemm (batch for bmm)
    _softmax, softmax                    softmax over the op's dim
    native_layer_norm                    layernorm
    rms_norm, _fused_rms_norm            rmsnorm
    relu, gelu, silu, sigmoid, tanh, ... elementwise, 1 read + 1 write
    add, sub, mul, div, maximum, ...     elementwise, a read per full-size tensor + 1 write

Anything else (two matmuls, a conv, a fused chain) is not placed: a problem can declare its
FLOPs and bytes instead (`roofline_cost`, see kernelbench.py and gpumode.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from kernelab.roofline import costs
from kernelab.roofline.costs import OpCost, canonical_dtype
from kernelab.spec.op_spec import name_of

# Ops that move, view or allocate data but do no arithmetic.
DATA_MOVEMENT = frozenset(
    {
        "view", "_unsafe_view", "reshape", "_reshape_alias", "t", "transpose", "permute",
        "expand", "clone", "contiguous", "copy_", "copy", "empty", "empty_like",
        "empty_strided", "new_empty", "new_empty_strided", "detach", "alias", "as_strided",
        "slice", "select", "unsqueeze", "squeeze", "_to_copy", "lift_fresh",
        "lift_fresh_copy", "zeros", "zeros_like", "fill_", "zero_", "resize_", "unbind",
        "split", "split_with_sizes", "to", "_local_scalar_dense", "unfold", "flatten",
    }
)  # fmt: skip
UNARY = frozenset(
    {"relu", "gelu", "silu", "sigmoid", "tanh", "abs", "neg", "exp", "log", "sqrt", "rsqrt",
     "leaky_relu", "hardtanh", "elu", "softplus", "clamp", "clamp_min", "clamp_max", "relu_"}
)  # fmt: skip
BINARY = frozenset({"add", "sub", "mul", "div", "maximum", "minimum", "pow", "where"})


@dataclass(frozen=True)
class Recognition:
    cost: object | None  # kernelab.roofline.costs.OpCost
    reason: str  # how it was recognised, or why not


def _dtype_name(tensor) -> str:
    return name_of(tensor.dtype)


def _tensor_args(args):
    import torch

    return [a for a in args if isinstance(a, torch.Tensor)]


def _cost_of(name: str, args, out):
    """The OpCost of one recognised aten call, or None when it is not in the table."""

    tensor_args = _tensor_args(args)
    if name == "mm":
        a, b = args[0], args[1]
        return costs.gemm(a.shape[0], b.shape[1], a.shape[1], dtype=_dtype_name(a))
    if name in ("addmm", "baddbmm"):
        a, b = args[1], args[2]
        batch = a.shape[0] if a.dim() == 3 else 1
        return costs.gemm(a.shape[-2], b.shape[-1], a.shape[-1], batch=batch, dtype=_dtype_name(a))
    if name == "bmm":
        a, b = args[0], args[1]
        return costs.gemm(
            a.shape[1], b.shape[2], a.shape[2], batch=a.shape[0], dtype=_dtype_name(a)
        )
    if name in ("_softmax", "softmax"):
        x, dim = args[0], args[1]
        cols = x.shape[dim]
        return costs.softmax(x.numel() // cols, cols, dtype=_dtype_name(x))
    if name == "native_layer_norm":
        x, normalized = args[0], args[1]
        cols = math.prod(normalized)
        bias = len(args) > 3 and args[3] is not None
        return costs.layernorm(x.numel() // cols, cols, dtype=_dtype_name(x), bias=bias)
    if name in ("rms_norm", "_fused_rms_norm"):
        x, normalized = args[0], args[1]
        cols = math.prod(normalized)
        return costs.rmsnorm(x.numel() // cols, cols, dtype=_dtype_name(x))
    if name in UNARY and tensor_args:
        x = tensor_args[0]
        return costs.elementwise(x.numel(), reads=1, writes=1, dtype=_dtype_name(x))
    if name in BINARY and tensor_args:
        import torch

        n = out.numel() if isinstance(out, torch.Tensor) else tensor_args[0].numel()
        reads = sum(1 for t in tensor_args if t.numel() == n) or 1
        return costs.elementwise(n, reads=reads, writes=1, dtype=_dtype_name(tensor_args[0]))
    return None


def _shape_only(value):
    """A tensor as a meta tensor of its shape, strides and dtype (what the table reads),
    so that the record holds none of the reference's tensors alive; anything else as it is."""
    import torch

    if not isinstance(value, torch.Tensor):
        return value
    try:
        return torch.empty_strided(value.shape, value.stride(), dtype=value.dtype, device="meta")
    except Exception:  # no strides (sparse): the shape and dtype are enough
        return torch.empty(value.shape, dtype=value.dtype, device="meta")


def recognise(run, data) -> Recognition:
    """Run `run(data)` once, recording its aten ops; the cost of its one arithmetic op. The
    record keeps the ops' shapes, never their tensors: the reference's intermediates are
    freed as they would be, and nothing it made outlives the call."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_map

    seen: list[tuple[str, tuple, object]] = []

    class Recorder(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            seen.append(
                (
                    func.overloadpacket.__name__,
                    tree_map(_shape_only, args),
                    tree_map(_shape_only, out),
                )
            )
            return out

    with torch.no_grad(), Recorder():
        run(data)
    arithmetic = [(name, args, out) for name, args, out in seen if name not in DATA_MOVEMENT]
    names = sorted({name for name, _, _ in arithmetic})
    if len(arithmetic) != 1:
        listed = ", ".join(names[:8]) or "none"
        return Recognition(None, f"{len(arithmetic)} arithmetic aten ops ({listed}), not one")
    name, args, out = arithmetic[0]
    try:
        cost = _cost_of(name, args, out)
    except Exception as exc:  # an unnamed dtype (int8 ...) or an odd signature: not placed
        return Recognition(None, f"aten.{name} not costed: {exc}")
    if cost is None:
        return Recognition(None, f"aten.{name} is not in the recogniser table")
    return Recognition(cost, f"recognised aten.{name}")


def declared(declared_cost, data, default_dtype: str, name: str) -> Recognition:
    """The cost a problem declares (roofline_cost) as an OpCost."""

    stated = declared_cost(data)
    if not isinstance(stated, dict) or "flops" not in stated or "bytes" not in stated:
        return Recognition(None, "roofline_cost must return a dict with flops and bytes")
    flops, bytes_ = float(stated["flops"]), float(stated["bytes"])
    if flops < 0 or bytes_ <= 0:
        return Recognition(None, f"roofline_cost gave flops={flops}, bytes={bytes_}")
    dtype = canonical_dtype(stated.get("dtype", default_dtype))
    cost = OpCost(str(stated.get("op", name)), {}, dtype, flops, bytes_, "declared by the problem")
    return Recognition(cost, "declared by the problem (roofline_cost)")
