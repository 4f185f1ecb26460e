"""The cost model of an aten op whose input shapes the profiler recorded.

torch.profiler with `record_shapes=True` stores, for each op, `Input Dims` (one list per
argument, [] for a scalar or None) and `Input type` ("c10::BFloat16", "float", "Scalar").
That is enough to count the FLOPs and minimum bytes of the ops that dominate a model:
GEMMs, attention, softmax, the norms and binary elementwise ops. Any other op, or one whose
shapes were not recorded, has no cost: None, never a guess.
"""

from __future__ import annotations

import math

from kernelab.errors import KernelabError
from kernelab.roofline import costs
from kernelab.timeline.trace import OpCall, dtype_of

# Index of `is_causal` in each attention op's arguments (from its aten schema).
_CAUSAL_ARG = {
    "aten::scaled_dot_product_attention": 5,
    "aten::_scaled_dot_product_flash_attention": 4,
    "aten::_scaled_dot_product_flash_attention_for_cpu": 4,
    "aten::_scaled_dot_product_efficient_attention": 6,
    "aten::_scaled_dot_product_cudnn_attention": 6,
}  # (their inner _flash_attention_forward takes [B, S, H, D]: the walk up reaches these)
_GEMM_OPERANDS = {
    # op: index of A, index of B (the rest: bias, alpha, beta)
    "aten::mm": (0, 1),
    "aten::addmm": (1, 2),
    "aten::_addmm_activation": (1, 2),
    "aten::bmm": (0, 1),
    "aten::baddbmm": (1, 2),
}
_NORMS = {
    "aten::native_layer_norm": "layernorm",
    "aten::layer_norm": "layernorm",
    "aten::_fused_rms_norm": "rmsnorm",
    "aten::rms_norm": "rmsnorm",
}
_SOFTMAX = ("aten::_softmax", "aten::softmax", "aten::_safe_softmax")
_BINARY = ("add", "sub", "mul", "div")


def _tensor(op: OpCall, i: int) -> list[int] | None:
    dims = op.input_dims[i] if i < len(op.input_dims) else None
    if not isinstance(dims, list) or not dims or not all(isinstance(d, int) for d in dims):
        return None
    return dims


def _dtype(op: OpCall) -> str | None:
    for i, kind in enumerate(op.input_types):
        if _tensor(op, i) is not None and dtype_of(kind):
            return dtype_of(kind)
    return None


def _rows_cols(dims: list[int]) -> tuple[int, int]:
    return math.prod(dims[:-1]) if len(dims) > 1 else 1, dims[-1]


def _gemm(op: OpCall, dtype: str):
    a_at, b_at = _GEMM_OPERANDS[op.name]
    a, b = _tensor(op, a_at), _tensor(op, b_at)
    if a is None or b is None or len(a) != len(b) or len(a) not in (2, 3) or a[-1] != b[-2]:
        return None
    batch = a[0] if len(a) == 3 else 1
    return costs.gemm(a[-2], b[-1], a[-1], batch=batch, dtype=dtype)


def _attention(op: OpCall, dtype: str):
    q, k = _tensor(op, 0), _tensor(op, 1)
    if q is None or k is None or len(q) != 4 or len(k) != 4:
        return None
    batch, heads, seq_q, head_dim = q
    at = _CAUSAL_ARG[op.name]
    causal = at < len(op.concrete_inputs) and str(op.concrete_inputs[at]) == "True"
    return costs.attention(batch, heads, seq_q, k[2], head_dim, causal=causal, dtype=dtype)


def _binary(op: OpCall, dtype: str):
    x, y = _tensor(op, 0), _tensor(op, 1)
    if x is None:
        return None
    n = math.prod(x)
    if y is not None and math.prod(y) == n:
        return costs.elementwise(n, reads=2, writes=1, dtype=dtype)
    if y is None:  # tensor op scalar
        return costs.elementwise(n, reads=1, writes=1, dtype=dtype)
    return None  # broadcasting: the bytes depend on which operand is expanded


def costed_op(op: OpCall | None, *, levels: int = 4):
    """(the op, its OpCost) for the nearest op from `op` up through its callers that has a
    cost model (aten::_flash_attention_forward -> aten::_scaled_dot_product_flash_attention),
    or (None, None)."""
    while op is not None and levels > 0:
        cost = op_cost(op)
        if cost is not None:
            return op, cost
        op, levels = op.parent, levels - 1
    return None, None


def op_cost(op: OpCall | None):
    """The OpCost of one recorded op call, or None when no cost model fits it."""
    if op is None:
        return None
    dtype = _dtype(op)
    if dtype is None:
        return None
    base = op.name.removeprefix("aten::").rstrip("_")
    try:
        if op.name in _GEMM_OPERANDS:
            return _gemm(op, dtype)
        if op.name in _CAUSAL_ARG:
            return _attention(op, dtype)
        x = _tensor(op, 0)
        if x is None:
            return None
        if op.name in _NORMS:
            rows, cols = _rows_cols(x)
            if _NORMS[op.name] == "rmsnorm":
                return costs.rmsnorm(rows, cols, dtype=dtype)
            return costs.layernorm(rows, cols, dtype=dtype, bias=_tensor(op, 3) is not None)
        if op.name in _SOFTMAX:
            rows, cols = _rows_cols(x)
            return costs.softmax(rows, cols, dtype=dtype)
        if op.name.startswith("aten::") and base in _BINARY:
            return _binary(op, dtype)
    except KernelabError:
        return None  # a zero-sized dimension or a dtype the cost models do not know
    return None
