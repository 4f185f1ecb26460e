"""The block's weights and KV cache (random, no download), the checks every path shares, the
float64 reference step and the eager torch block (what a user writes).

Layout: weights as nn.Linear stores them, [out, in]; one fused qkv matrix [(H + 2 Hkv) D,
hidden] and one fused gate/up matrix [2 * intermediate, hidden]. The KV cache is one tensor
kv[batch, 2, Hkv, capacity, D]: kv[:, 0] the keys and kv[:, 1] the values, each sequence's
tokens contiguous along `capacity`, so the attention of a step at KV length L reads the
slices kv[:, i, :, :L + 1] with unit stride over D and a fixed stride over tokens.

A step at KV length L: the token at position L (the L tokens before it are cached) is
normalized, projected to q, k and v, rotated by RoPE at position L, its k and v written into
slot L of the cache, and its q attends over slots 0..L. Slots before L are never written, so
every path can run the same step on the same block and be compared.
"""

from __future__ import annotations

from dataclasses import dataclass

from kernelab.errors import KernelabError
from kernelab.ops.decode_step.config import DecodeConfig

DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}


@dataclass
class DecodeBlock:
    """One block's tensors: weights, the KV cache and the RoPE tables, on one device."""

    config: DecodeConfig
    batch: int
    capacity: int  # tokens the cache holds per sequence
    dtype: str
    attn_norm: object
    wqkv: object
    wo: object
    mlp_norm: object
    w_gate_up: object
    w_down: object
    kv: object  # [batch, 2, kv_heads, capacity, head_dim]
    cos: object  # fp32 [capacity, head_dim / 2]
    sin: object

    @property
    def device(self):
        return self.wqkv.device


def _int_at_least(name: str, value, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise KernelabError(f"decode step: {name} must be an int >= {low}, got {value!r}")
    return value


def build(config: DecodeConfig, *, batch: int = 1, capacity: int, dtype: str = "bf16",
          device="cpu", seed: int = 0) -> DecodeBlock:  # fmt: skip
    """Random weights scaled by 1/sqrt(fan-in) (activations stay of order 1 through the block),
    norm weights near 1, and a cache filled with N(0, 1) keys and values in every slot."""
    import torch

    from kernelab.spec.decode import rope_tables

    if batch == 0:
        raise KernelabError("decode step: empty batch (batch = 0): nothing to decode")
    _int_at_least("batch", batch, 1)
    _int_at_least("capacity", capacity, 1)
    if dtype not in DTYPES:
        raise KernelabError(f"decode step: dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    torch_dtype = getattr(torch, DTYPES[dtype])
    gen = torch.Generator().manual_seed(seed)
    c = config

    def matrix(rows, cols):
        w = torch.randn(rows, cols, generator=gen, dtype=torch.float32) / cols**0.5
        return w.to(device=device, dtype=torch_dtype)

    def norm_weight():
        w = 1.0 + 0.1 * torch.randn(c.hidden, generator=gen, dtype=torch.float32)
        return w.to(device=device, dtype=torch_dtype)

    kv = torch.empty((batch, 2, c.kv_heads, capacity, c.head_dim), dtype=torch_dtype,
                     device=device)  # fmt: skip
    kv.copy_(torch.randn(kv.shape, generator=gen, dtype=torch.float32))  # one host draw, seeded
    cos, sin = rope_tables(capacity, c.head_dim, device, theta=c.theta)
    return DecodeBlock(config=c, batch=batch, capacity=capacity, dtype=dtype,
                       attn_norm=norm_weight(), wqkv=matrix(c.qkv_width, c.hidden),
                       wo=matrix(c.hidden, c.q_width), mlp_norm=norm_weight(),
                       w_gate_up=matrix(2 * c.intermediate, c.hidden),
                       w_down=matrix(c.hidden, c.intermediate), kv=kv, cos=cos,
                       sin=sin)  # fmt: skip


def make_input(block: DecodeBlock, *, seed: int = 1):
    """The residual stream entering the block for this step's token, x[batch, hidden]."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    x = torch.randn((block.batch, block.config.hidden), generator=gen, dtype=torch.float32)
    return x.to(device=block.device, dtype=block.wqkv.dtype)


def check_step(block: DecodeBlock, x, length: int) -> None:
    """One line for every input a step cannot take: wrong shapes, dtypes, devices, an empty
    batch, a KV length the cache cannot hold."""
    if getattr(x, "dim", None) is None or x.dim() != 2:
        raise KernelabError(f"decode step needs x[batch, hidden], got "
                            f"{tuple(getattr(x, 'shape', ()))}")  # fmt: skip
    if x.shape[0] == 0:
        raise KernelabError("decode step: empty batch (x has 0 rows): nothing to decode")
    expected = (block.batch, block.config.hidden)
    if tuple(x.shape) != expected:
        raise KernelabError(f"decode step: x must be [batch, hidden] = {list(expected)} for this "
                            f"block, got {list(x.shape)}")  # fmt: skip
    if x.dtype != block.wqkv.dtype or x.device != block.device:
        raise KernelabError(f"decode step: x must be {block.wqkv.dtype} on {block.device}, got "
                            f"{x.dtype} on {x.device}")  # fmt: skip
    _int_at_least("KV length", length, 0)
    if length + 1 > block.capacity:
        raise KernelabError(f"decode step: KV length {length} is beyond the cache: the step "
                            f"appends at slot {length} and the cache holds {block.capacity} "
                            "tokens")  # fmt: skip


# --- the float64 reference: the specification of one step ---------------------------------


def reference_step(block: DecodeBlock, x, length: int):
    """(out, k, v) in float64 on the CPU: the block's output and the new token's rotated key
    and value [batch, kv_heads, head_dim], from the same weights and cached slots 0..L-1."""
    import torch

    check_step(block, x, length)
    c, f = block.config, (lambda t: t.detach().to("cpu", torch.float64))
    b = x.shape[0]
    x = f(x)

    def rmsnorm(t, weight):
        return t / torch.sqrt(t.pow(2).mean(-1, keepdim=True) + c.eps) * f(weight)

    def rotate(t):  # half-split pairs (x[i], x[i + D/2]) at position L
        half = c.head_dim // 2
        cos, sin = f(block.cos)[length], f(block.sin)[length]
        first, second = t[..., :half], t[..., half:]
        return torch.cat((first * cos - second * sin, first * sin + second * cos), dim=-1)

    qkv = rmsnorm(x, block.attn_norm) @ f(block.wqkv).t()
    q, k, v = qkv.split([c.q_width, c.kv_width, c.kv_width], dim=-1)
    q = rotate(q.reshape(b, c.heads, c.head_dim))
    k = rotate(k.reshape(b, c.kv_heads, c.head_dim))
    v = v.reshape(b, c.kv_heads, c.head_dim)
    cached = f(block.kv[:, :, :, :length])
    keys = torch.cat((cached[:, 0], k[:, :, None]), dim=2)  # [b, Hkv, L + 1, D]
    values = torch.cat((cached[:, 1], v[:, :, None]), dim=2)
    group = c.heads // c.kv_heads  # query head i reads KV head i // group
    keys = keys.repeat_interleave(group, dim=1)
    values = values.repeat_interleave(group, dim=1)
    scores = torch.einsum("bhd,bhtd->bht", q, keys) / c.head_dim**0.5
    attended = torch.einsum("bht,bhtd->bhd", scores.softmax(dim=-1), values)
    h = x + attended.reshape(b, c.q_width) @ f(block.wo).t()
    gate, up = (rmsnorm(h, block.mlp_norm) @ f(block.w_gate_up).t()).chunk(2, dim=-1)
    out = h + (torch.nn.functional.silu(gate) * up) @ f(block.w_down).t()
    return out, k, v


# --- the eager torch block: what a PyTorch user writes --------------------------------------


def eager_module(block: DecodeBlock, length: int):
    """The block as a torch.nn.Module whose forward(x) is one step at KV length `length`. Its
    buffers are the block's own tensors (no copies), so the cache it writes is the block's."""
    import torch
    import torch.nn.functional as F

    c = block.config

    def rmsnorm(t, weight):  # Hugging Face's LlamaRMSNorm: fp32 statistics, then the weight
        t32 = t.float()
        t32 = t32 * torch.rsqrt(t32.pow(2).mean(-1, keepdim=True) + c.eps)
        return weight * t32.to(t.dtype)

    def rotate(t, cos, sin):  # fp32 tables, one rounding: as in the spec's eager RoPE
        half = c.head_dim // 2
        t32 = t.float()
        first, second = t32[..., :half], t32[..., half:]
        rotated = torch.cat((first * cos - second * sin, first * sin + second * cos), dim=-1)
        return rotated.to(t.dtype)

    class EagerBlock(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.length = length
            for name in ("attn_norm", "wqkv", "wo", "mlp_norm", "w_gate_up", "w_down", "kv",
                         "cos", "sin"):  # fmt: skip
                self.register_buffer(name, getattr(block, name), persistent=False)
            positions = torch.full((block.batch,), length, dtype=torch.int64)
            self.register_buffer("positions", positions.to(block.device), persistent=False)

        def forward(self, x):
            b, L = x.shape[0], self.length
            qkv = F.linear(rmsnorm(x, self.attn_norm), self.wqkv)
            q, k, v = qkv.split([c.q_width, c.kv_width, c.kv_width], dim=-1)
            cos, sin = self.cos[self.positions][:, None], self.sin[self.positions][:, None]
            q = rotate(q.view(b, c.heads, c.head_dim), cos, sin)
            k = rotate(k.view(b, c.kv_heads, c.head_dim), cos, sin)
            self.kv[:, 0, :, L] = k  # append to the cache: slot L of every sequence
            self.kv[:, 1, :, L] = v.view(b, c.kv_heads, c.head_dim)
            attended = F.scaled_dot_product_attention(
                q.unsqueeze(2), self.kv[:, 0, :, : L + 1], self.kv[:, 1, :, : L + 1],
                enable_gqa=True,
            )  # fmt: skip
            h = x + F.linear(attended.reshape(b, c.q_width), self.wo)
            gate, up = F.linear(rmsnorm(h, self.mlp_norm), self.w_gate_up).chunk(2, dim=-1)
            return h + F.linear(F.silu(gate) * up, self.w_down)

    return EagerBlock()
