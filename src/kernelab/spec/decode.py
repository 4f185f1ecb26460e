"""The decode kernels' specifications: batched GEMV, weight-only quantized GEMV (with the
packing functions and their float64 dequantization) and the fused small ops of a decode step.

| op                   | shape keys              | inputs                                  |
|----------------------|-------------------------|-----------------------------------------|
| gemv                 | m, n, k                 | x[m, k], w[n, k] -> x @ w^T, [m, n]     |
| quant_gemv_int8      | m, n, k                 | x, q int8[n, k], scale fp32[n]          |
| quant_gemv_int4      | m, n, k, group          | x, packed uint8[n, k/2], scales fp16[n, |
|                      |                         | k/group], None, group (symmetric)       |
| quant_gemv_int4_zp   | m, n, k, group          | ... zeros uint8[n, k/group], group      |
| quant_gemv_fp8       | m, n, k                 | x, q float8_e4m3fn[n, k], scale fp32[n] |
| add_rmsnorm          | rows, cols              | x, residual, weight, eps -> stack(h, y) |
| rope / rope_interleaved | tokens, heads, head_dim | x, cos, sin [positions, head_dim/2]  |
|                      |                         | fp32, positions int64[tokens]           |
| swiglu               | rows, cols              | gate, up -> silu(gate) * up             |
| gate_up_swiglu       | m, n, k                 | x[m, k], w_gate[n, k], w_up[n, k] ->    |
|                      |                         | silu(x w_gate^T) * (x w_up^T), [m, n]   |
| decode_attention     | batch, heads, kv_heads, | q[batch, heads, head_dim], k and v      |
|                      | tokens, head_dim        | [batch, kv_heads, tokens + slack,       |
|                      |                         | head_dim], n = tokens -> o like q       |

The quantized ops' reference is the float64 product with the DEQUANTIZED weights, so a
kernel is judged on its arithmetic; the quantization error itself (against the bf16
weights the packing started from) is a separate figure (docs/ops/quant_gemv.md).
add_rmsnorm returns h = x + residual and y = rmsnorm(h) * weight; as one op output they are
stacked, [2, rows, cols] (the kernel writes both halves of one buffer, so the stacked form
costs nothing). RoPE rotates pairs (x[2i], x[2i+1]) when interleaved (GPT-J layout) and
(x[i], x[i + d/2]) in the half-split layout (GPT-NeoX / Llama's rotate_half), by the angle
of the token's position: positions = ROPE_POSITION_OFFSET + arange(tokens), a decode step
deep into a sequence. gate_up_swiglu's w_gate and w_up are the two halves of one
W_gate_up[2n, k] (a Llama MLP's fused weight: views, no copy), scaled by 1/sqrt(k) so that
gate is of order 1 and SiLU's curve, not only its linear and zero tails, is exercised.
"""

from __future__ import annotations

from kernelab.errors import KernelabError
from kernelab.spec.dense import (
    NORM_INPUT_OFFSET,
    RMSNORM_EPS,
    eager_rmsnorm,
    norm_weight,
    reference_rmsnorm,
)
from kernelab.spec.op_spec import FLOAT_DTYPES, OpSpec, as_float64, normals

INT4_SYMMETRIC_ZERO = 8  # signed int4 -8..7 stored as unsigned 0..15 with this implicit zero
ROPE_POSITION_OFFSET = 37
ROPE_THETA = 10000.0


def pack_int8(w):
    """Per-output-channel symmetric int8: (q int8[n, k], scale fp32[n]), w ~ q * scale."""
    import torch

    w32 = w.to(torch.float32)
    scale = w32.abs().amax(dim=1).clamp(min=1e-12) / 127.0
    q = torch.round(w32 / scale[:, None]).clamp(-127, 127).to(torch.int8)
    return q, scale


def dequantize_int8(q, scale):
    return as_float64(q) * as_float64(scale)[:, None]


def _check_group(k: int, group: int) -> None:
    if group <= 0 or group % 2 or k % group:
        raise KernelabError(f"int4 packing needs an even group size dividing K, got K = {k}, "
                            f"group = {group}")  # fmt: skip


def pack_int4(w, group: int, *, zero_points: bool):
    """int4 with one fp16 scale per `group` columns of a row, two values per byte (column 2j in
    the low nibble, 2j + 1 in the high). Symmetric: q in -8..7 stored as q + 8, scale =
    absmax / 7. With zero points: q in 0..15, scale = (max - min) / 15, zero = round(-min /
    scale) as uint8; w ~ (q - zero) * scale. Returns (packed uint8[n, k/2], scales fp16[n,
    k/group], zeros uint8[n, k/group] or None)."""
    import torch

    n, k = w.shape
    _check_group(k, group)
    grouped = w.to(torch.float32).reshape(n, k // group, group)
    if zero_points:
        low, high = grouped.amin(dim=2), grouped.amax(dim=2)
        scale = ((high - low) / 15.0).clamp(min=1e-6).to(torch.float16)
        zero = torch.round(-low / scale.to(torch.float32)).clamp(0, 15)
    else:
        scale = (grouped.abs().amax(dim=2) / 7.0).clamp(min=1e-6).to(torch.float16)
        zero = torch.full_like(scale, INT4_SYMMETRIC_ZERO, dtype=torch.float32)
    q = torch.round(grouped / scale.to(torch.float32)[..., None] + zero[..., None])
    q = q.clamp(0, 15).to(torch.uint8).reshape(n, k)
    packed = q[:, 0::2] | (q[:, 1::2] << 4)
    return packed, scale, zero.to(torch.uint8) if zero_points else None


def unpack_int4(packed):
    """uint8[n, k/2] -> the unsigned nibbles uint8[n, k] in column order."""
    import torch

    return torch.stack((packed & 0xF, packed >> 4), dim=-1).reshape(packed.shape[0], -1)


def dequantize_int4(packed, scales, zeros, group: int):
    import torch

    q = as_float64(unpack_int4(packed))
    n, k = q.shape
    _check_group(k, group)
    zero = as_float64(zeros) if zeros is not None else torch.full_like(as_float64(scales), 8.0)
    grouped = (q.reshape(n, k // group, group) - zero[..., None]) * as_float64(scales)[..., None]
    return grouped.reshape(n, k)


def pack_fp8(w):
    """Per-output-channel float8 e4m3: (q float8_e4m3fn[n, k], scale fp32[n]), the row's absmax
    mapped to e4m3's largest finite value, 448."""
    import torch

    if not hasattr(torch, "float8_e4m3fn"):
        raise KernelabError(f"this torch ({torch.__version__}) has no float8_e4m3fn")
    w32 = w.to(torch.float32)
    scale = w32.abs().amax(dim=1).clamp(min=1e-12) / 448.0
    return (w32 / scale[:, None]).to(torch.float8_e4m3fn), scale


def dequantize_fp8(q, scale):
    return as_float64(q) * as_float64(scale)[:, None]


def _make_gemv(shape, torch_dtype, generator, device):
    x = normals((shape["m"], shape["k"]), generator, device).to(torch_dtype)
    w = normals((shape["n"], shape["k"]), generator, device).to(torch_dtype)
    return x, w


def _quant_weight(shape, torch_dtype, generator, device):
    """x and the bf16 weights the packing starts from (a model's stored weights)."""
    import torch

    x, w = _make_gemv(shape, torch_dtype, generator, device)
    return x, w.to(torch.bfloat16)


def _make_quant_int8(shape, torch_dtype, generator, device):
    x, w = _quant_weight(shape, torch_dtype, generator, device)
    return (x, *pack_int8(w))


def _make_quant_int4(zero_points: bool):
    def make(shape, torch_dtype, generator, device):
        x, w = _quant_weight(shape, torch_dtype, generator, device)
        group = shape["group"]
        return (x, *pack_int4(w, group, zero_points=zero_points), group)

    return make


def _make_quant_fp8(shape, torch_dtype, generator, device):
    x, w = _quant_weight(shape, torch_dtype, generator, device)
    return (x, *pack_fp8(w))


def _reference_gemv(x, w):
    return as_float64(x) @ as_float64(w).t()


def _eager_gemv(x, w):
    return x @ w.t()


def _reference_quant_int8(x, q, scale):
    return as_float64(x) @ dequantize_int8(q, scale).t()


def _reference_quant_int4(x, packed, scales, zeros, group):
    return as_float64(x) @ dequantize_int4(packed, scales, zeros, group).t()


def _reference_quant_fp8(x, q, scale):
    return as_float64(x) @ dequantize_fp8(q, scale).t()


def _eager_dequantized(dequantize):
    """The eager baseline: dequantize into x's dtype, then x @ W^T (cuBLAS on a GPU)."""

    def eager(x, *weights):
        return x @ dequantize(*weights).to(x.dtype).t()

    return eager


def _make_add_rmsnorm(shape, torch_dtype, generator, device):
    rows, cols = shape["rows"], shape["cols"]
    x = normals((rows, cols), generator, device, 1.0, NORM_INPUT_OFFSET).to(torch_dtype)
    residual = normals((rows, cols), generator, device).to(torch_dtype)
    weight = norm_weight(cols, torch_dtype, generator, device, 1.0)
    return x, residual, weight, RMSNORM_EPS


def _reference_add_rmsnorm(x, residual, weight, eps):
    import torch

    h = as_float64(x) + as_float64(residual)
    return torch.stack((h, reference_rmsnorm(h, weight, eps)))


def _eager_add_rmsnorm(x, residual, weight, eps):
    import torch

    h = x + residual
    return torch.stack((h, eager_rmsnorm(h, weight, eps)))


def rope_tables(positions: int, head_dim: int, device="cpu", theta: float = ROPE_THETA):
    """cos and sin fp32[positions, head_dim / 2] of the angles p * theta^(-2i / head_dim)."""
    import torch

    if head_dim % 2:
        raise KernelabError(f"rope needs an even head_dim, got {head_dim}")
    inv_freq = theta ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    angles = torch.arange(positions, dtype=torch.float64)[:, None] * inv_freq[None, :]
    return angles.cos().to(torch.float32).to(device), angles.sin().to(torch.float32).to(device)


def _make_rope(shape, torch_dtype, generator, device):
    import torch

    tokens, heads, head_dim = shape["tokens"], shape["heads"], shape["head_dim"]
    x = normals((tokens, heads, head_dim), generator, device).to(torch_dtype)
    cos, sin = rope_tables(ROPE_POSITION_OFFSET + tokens, head_dim, device)
    positions = torch.arange(tokens, device=device) + ROPE_POSITION_OFFSET
    return x, cos, sin, positions


def _rotate(x, c, s, interleaved: bool):
    import torch

    if interleaved:
        even, odd = x[..., 0::2], x[..., 1::2]
        return torch.stack((even * c - odd * s, even * s + odd * c), dim=-1).reshape(x.shape)
    half = x.shape[-1] // 2
    first, second = x[..., :half], x[..., half:]
    return torch.cat((first * c - second * s, first * s + second * c), dim=-1)


def rope_reference(x, cos, sin, positions, *, interleaved: bool):
    """The rotated x in float64 (out of place)."""
    c, s = as_float64(cos)[positions][:, None, :], as_float64(sin)[positions][:, None, :]
    return _rotate(as_float64(x), c, s, interleaved)


def _eager_rope(interleaved: bool):
    """The plain torch rotation: gathered tables, fp32 math, one rounding (as HF's apply_rotary
    _pos_emb computes it for bf16 models with fp32 tables)."""

    def eager(x, cos, sin, positions):
        import torch

        c, s = cos[positions][:, None, :], sin[positions][:, None, :]
        return _rotate(x.to(torch.float32), c, s, interleaved).to(x.dtype)

    return eager


def _make_swiglu(shape, torch_dtype, generator, device):
    gate = normals((shape["rows"], shape["cols"]), generator, device, 2.0).to(torch_dtype)
    up = normals((shape["rows"], shape["cols"]), generator, device).to(torch_dtype)
    return gate, up


def _reference_swiglu(gate, up):
    import torch

    return torch.nn.functional.silu(as_float64(gate)) * as_float64(up)


def _eager_swiglu(gate, up):
    import torch

    return torch.nn.functional.silu(gate) * up


def _make_gate_up(shape, torch_dtype, generator, device):
    n, k = shape["n"], shape["k"]
    x = normals((shape["m"], k), generator, device).to(torch_dtype)
    w_gate_up = normals((2 * n, k), generator, device, k**-0.5).to(torch_dtype)
    return x, w_gate_up[:n], w_gate_up[n:]


def _reference_gate_up(x, w_gate, w_up):
    import torch

    x64 = as_float64(x)
    return torch.nn.functional.silu(x64 @ as_float64(w_gate).t()) * (x64 @ as_float64(w_up).t())


def _eager_gate_up(x, w_gate, w_up):
    """Two GEMVs (cuBLAS on a GPU), rounded to x's dtype, then silu(gate) * up: the MLP's
    first half as a torch model writes it."""
    import torch

    return torch.nn.functional.silu(x @ w_gate.t()) * (x @ w_up.t())


def _gate_up_cost(shape, dtype):
    from kernelab.roofline import costs

    return costs.gate_up_swiglu(shape["m"], shape["n"], shape["k"], dtype=dtype)


def _decode_cost(model: str, **fixed):
    def cost(shape, dtype):
        from kernelab.roofline import costs

        return getattr(costs, model)(**shape, **fixed, dtype=dtype)

    return cost


def _quant_cost(weight: str, zero_points: bool = False):
    def cost(shape, dtype):
        from kernelab.roofline import costs

        return costs.quant_gemv(shape["m"], shape["n"], shape["k"], weight=weight,
                                group=shape.get("group", 0), zero_points=zero_points,
                                dtype=dtype)  # fmt: skip

    return cost


# decode_attention: the cache holds DECODE_CACHE_SLACK more slots than are attended, filled
# with NaN, so a kernel that reads past n fails loudly.
DECODE_CACHE_SLACK = 7


def _make_decode_attention(shape, torch_dtype, generator, device):
    import torch

    batch, heads, kv_heads = shape["batch"], shape["heads"], shape["kv_heads"]
    tokens, head_dim = shape["tokens"], shape["head_dim"]
    if heads % kv_heads:
        raise KernelabError(f"decode_attention needs heads a multiple of kv_heads, got {heads} "
                            f"and {kv_heads}")  # fmt: skip
    q = normals((batch, heads, head_dim), generator, device).to(torch_dtype)
    cache = (batch, kv_heads, tokens + DECODE_CACHE_SLACK, head_dim)
    k = torch.full(cache, float("nan"), dtype=torch_dtype, device=device)
    v = torch.full(cache, float("nan"), dtype=torch_dtype, device=device)
    k[:, :, :tokens] = normals((batch, kv_heads, tokens, head_dim), generator, device).to(torch_dtype)
    v[:, :, :tokens] = normals((batch, kv_heads, tokens, head_dim), generator, device).to(torch_dtype)
    return q, k, v, tokens


def _reference_decode_attention(q, k, v, n):
    import torch

    group = q.shape[1] // k.shape[1]
    keys = as_float64(k[:, :, :n]).repeat_interleave(group, dim=1)
    values = as_float64(v[:, :, :n]).repeat_interleave(group, dim=1)
    scores = torch.einsum("bhd,bhtd->bht", as_float64(q), keys) / q.shape[-1] ** 0.5
    return torch.einsum("bht,bhtd->bhd", scores.softmax(dim=-1), values)


def _eager_decode_attention(q, k, v, n):
    """torch's fused attention (flash / memory-efficient on a GPU) over the first n slots."""
    import torch.nn.functional as F

    out = F.scaled_dot_product_attention(q[:, :, None], k[:, :, :n], v[:, :, :n],
                                         enable_gqa=q.shape[1] != k.shape[1])  # fmt: skip
    return out[:, :, 0]


_DECODE_DTYPES = ("bf16", "fp16")

DECODE_OPS: dict[str, OpSpec] = (
    {
        spec.name: spec
        for spec in (
            OpSpec("gemv", ("m", "n", "k"), ("fp64", *FLOAT_DTYPES),
                   "x[m, k] @ w[n, k]^T for a decode batch m", _make_gemv, _reference_gemv,
                   _eager_gemv, _decode_cost("gemv_batched")),
            OpSpec("quant_gemv_int8", ("m", "n", "k"), _DECODE_DTYPES,
                   "x @ dequant(q int8, per-channel scale)^T", _make_quant_int8,
                   _reference_quant_int8, _eager_dequantized(dequantize_int8),
                   _quant_cost("int8")),
            OpSpec("quant_gemv_int4", ("m", "n", "k", "group"), _DECODE_DTYPES,
                   "x @ dequant(int4 two per byte, fp16 group scales, symmetric)^T",
                   _make_quant_int4(False), _reference_quant_int4,
                   _eager_dequantized(dequantize_int4), _quant_cost("int4")),
            OpSpec("quant_gemv_int4_zp", ("m", "n", "k", "group"), _DECODE_DTYPES,
                   "x @ dequant(int4 two per byte, fp16 group scales, uint8 zero points)^T",
                   _make_quant_int4(True), _reference_quant_int4,
                   _eager_dequantized(dequantize_int4), _quant_cost("int4", True)),
            OpSpec("quant_gemv_fp8", ("m", "n", "k"), _DECODE_DTYPES,
                   "x @ dequant(float8 e4m3, per-channel scale)^T", _make_quant_fp8,
                   _reference_quant_fp8, _eager_dequantized(dequantize_fp8),
                   _quant_cost("fp8")),
            OpSpec("add_rmsnorm", ("rows", "cols"), ("fp64", *FLOAT_DTYPES),
                   f"h = x + residual, y = rmsnorm(h, eps {RMSNORM_EPS:g}) * weight; "
                   "stacked [2, rows, cols]", _make_add_rmsnorm, _reference_add_rmsnorm,
                   _eager_add_rmsnorm, _decode_cost("add_rmsnorm")),
            OpSpec("rope", ("tokens", "heads", "head_dim"), ("fp64", *FLOAT_DTYPES),
                   "rotary embedding, half-split pairs (x[i], x[i + d/2])", _make_rope,
                   lambda *a: rope_reference(*a, interleaved=False), _eager_rope(False),
                   _decode_cost("rope")),
            OpSpec("rope_interleaved", ("tokens", "heads", "head_dim"),
                   ("fp64", *FLOAT_DTYPES),
                   "rotary embedding, interleaved pairs (x[2i], x[2i + 1])", _make_rope,
                   lambda *a: rope_reference(*a, interleaved=True), _eager_rope(True),
                   _decode_cost("rope")),
            OpSpec("swiglu", ("rows", "cols"), ("fp64", *FLOAT_DTYPES),
                   "silu(gate) * up", _make_swiglu, _reference_swiglu, _eager_swiglu,
                   _decode_cost("swiglu")),
            OpSpec("gate_up_swiglu", ("m", "n", "k"), ("fp64", *FLOAT_DTYPES),
                   "silu(x @ w_gate^T) * (x @ w_up^T): the fused gate/up GEMV and SwiGLU",
                   _make_gate_up, _reference_gate_up, _eager_gate_up, _gate_up_cost),
            OpSpec("decode_attention", ("batch", "heads", "kv_heads", "tokens", "head_dim"),
                   FLOAT_DTYPES, "one query token per sequence over a KV cache (GQA)",
                   _make_decode_attention, _reference_decode_attention,
                   _eager_decode_attention, _decode_cost("decode_attention")),
        )
    }
)  # fmt: skip
