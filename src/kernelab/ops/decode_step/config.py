"""The shape of one Llama-style transformer block at decode, and what one step of it costs.

A decode step feeds one new token per sequence through the block: every weight matrix is
read once for a matrix-vector product per row of the batch, and the attention reads the whole
KV cache of every sequence. At batch 1 almost nothing is reused, so the step is a copy of
(weights + KV cache) with arithmetic hidden in it, and its floor is

    floor = bytes per step / copy bandwidth.

Bytes per step (itemsize b, batch B, KV length L tokens already cached, GQA with Hkv heads):

    weights   b * hidden * ((H + 2 Hkv) D + H D + 3 * intermediate)  + 2 * hidden * b (norms)
    KV read   b * B * 2 * Hkv * (L + 1) * D      (K and V of every cached token and the new one)
    KV write  b * B * 2 * Hkv * D                (the new token's K and V appended)
    activations: a few vectors of hidden / intermediate per row, negligible at B <= 64

Llama-3-8B's block in bf16: 436 MB (416 MiB) of weights; its KV is 4 KiB per token per sequence
(2 * 8 heads * 128 * 2 bytes), 4 MiB at L = 1K and 32 MiB at L = 8K. FLOPs: 2 per weight per
row, and 4 * H * D per cached token per row for q k^T and p v.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from kernelab.errors import KernelabError

ITEMSIZE = {"fp64": 8, "fp32": 4, "bf16": 2, "fp16": 2}


@dataclass(frozen=True)
class DecodeConfig:
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    eps: float = 1e-5  # Llama-3's rms_norm_eps
    theta: float = 500000.0  # Llama-3's rope_theta

    def __post_init__(self):
        for name in ("hidden", "heads", "kv_heads", "head_dim", "intermediate"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise KernelabError(f"decode config: {name} must be a positive int, got {value!r}")
        if self.heads % self.kv_heads:
            raise KernelabError(f"decode config: heads ({self.heads}) must be a multiple of "
                                f"kv_heads ({self.kv_heads}) for grouped-query attention")  # fmt: skip
        if self.head_dim % 2:
            raise KernelabError(f"decode config: RoPE needs an even head_dim, got {self.head_dim}")

    @property
    def q_width(self) -> int:
        return self.heads * self.head_dim

    @property
    def kv_width(self) -> int:
        return self.kv_heads * self.head_dim

    @property
    def qkv_width(self) -> int:
        return self.q_width + 2 * self.kv_width

    def weight_count(self) -> int:
        """Elements of the block's weights: qkv, o, gate/up, down and the two norm vectors."""
        h = self.hidden
        return h * self.qkv_width + self.q_width * h + 3 * self.intermediate * h + 2 * h

    def to_dict(self) -> dict:
        return asdict(self)


LLAMA3_8B = DecodeConfig(hidden=4096, heads=32, kv_heads=8, head_dim=128, intermediate=14336)
# Small enough for the Triton interpreter, with every GQA and tiling feature of the real one:
# 2 query heads per KV head, widths that are no power of two and no multiple of a tile.
TINY = DecodeConfig(hidden=40, heads=4, kv_heads=2, head_dim=10, intermediate=54)


@dataclass(frozen=True)
class StepCost:
    weight_bytes: int
    kv_read_bytes: int
    kv_write_bytes: int
    activation_bytes: int
    flops: int

    @property
    def bytes(self) -> int:
        return self.weight_bytes + self.kv_read_bytes + self.kv_write_bytes + self.activation_bytes

    def floor_us(self, bandwidth_tbps: float) -> float:
        """The memory-bound floor: every byte moved once at the measured copy rate."""
        return self.bytes / (bandwidth_tbps * 1e12) * 1e6

    def to_dict(self) -> dict:
        return {**asdict(self), "bytes": self.bytes}


def step_cost(config: DecodeConfig, batch: int, length: int, dtype: str = "bf16") -> StepCost:
    """Minimum bytes and FLOPs of one decode step of `batch` rows over `length` cached tokens."""
    b = ITEMSIZE[dtype]
    kv_row = 2 * config.kv_width  # K and V elements of one token of one sequence
    # activations: x in, out, qkv, attention out, o, h, y, gate_up, swiglu out, down
    act = batch * (6 * config.hidden + config.qkv_width + config.q_width
                   + 3 * config.intermediate)  # fmt: skip
    attention_flops = 4 * batch * config.q_width * (length + 1)
    weight_flops = 2 * batch * (config.weight_count() - 2 * config.hidden)
    return StepCost(weight_bytes=b * config.weight_count(),
                    kv_read_bytes=b * batch * kv_row * (length + 1),
                    kv_write_bytes=b * batch * kv_row, activation_bytes=b * act,
                    flops=weight_flops + attention_flops)  # fmt: skip
