"""Known-wrong implementations: each one must be rejected by kernelab.harness.check.

They follow the registry's calling convention (take the op's inputs, return the output) and
each breaks exactly one rule, so a test can assert the checker names that rule.
"""

from __future__ import annotations

import torch

from kernelab.spec.reference import OPS


def _correct(op: str, *inputs) -> torch.Tensor:
    return OPS[op].torch_eager(*inputs)


def zeros(op: str):
    """Returns zeros: what a kernel that never stores produces from torch.zeros."""

    def run(*inputs):
        return torch.zeros_like(_correct(op, *inputs))

    return run


def constant(op: str, value: float = 0.5):
    """Returns one value everywhere (the mean of a softmax row, say)."""

    def run(*inputs):
        return torch.full_like(_correct(op, *inputs), value)

    return run


def skips_one_element(op: str, position: int = -1):
    """Writes every element but one, into memory that just held the right answer.

    The correct result is computed into a temporary that is then freed, so a plain
    torch.empty of the same size is likely to get that memory back with the right value
    still in the skipped slot: without the checker's poisoned allocator this passes by luck.
    """

    def run(*inputs):
        answer = _correct(op, *inputs).contiguous()
        scratch = answer.clone()
        del scratch  # leaves the correct bytes in freed memory of the output's size
        out = torch.empty_like(answer)
        flat_out, flat_answer = out.view(-1), answer.view(-1)
        keep = torch.ones(flat_out.numel(), dtype=torch.bool, device=out.device)
        keep[position] = False
        flat_out[keep] = flat_answer[keep]
        return out

    return run


def gemm_in_bf16(a, b):
    """An fp32 GEMM that rounds its inputs to bf16 first: about 2e-3 relative error."""
    return torch.mm(a.to(torch.bfloat16), b.to(torch.bfloat16)).to(a.dtype)


def mutates_input(op: str):
    """Scales input 0 in place and then returns a correct answer for the original data."""

    def run(*inputs):
        answer = _correct(op, *inputs)
        inputs[0].mul_(2)
        return answer

    return run


def writes_nan(op: str, position: int = 0):
    """A correct answer with one NaN in it."""

    def run(*inputs):
        out = _correct(op, *inputs).clone()
        out.view(-1)[position] = float("nan")
        return out

    return run


def writes_inf(op: str, position: int = 0):
    """A correct answer with one +inf in it (an overflowed exp, say)."""

    def run(*inputs):
        out = _correct(op, *inputs).clone()
        out.view(-1)[position] = float("inf")
        return out

    return run


def wrong_shape(op: str):
    """A correct answer with the last row dropped (a grid one block short)."""

    def run(*inputs):
        return _correct(op, *inputs)[:-1]

    return run


def gemm_transposed(a, b):
    """(a @ b) transposed: indexes C as [col, row]; for a square GEMM the shape still fits."""
    return torch.mm(a, b).t().contiguous()


def softmax_zeros_masked_rows(x):
    """Softmax that returns 0 (not NaN) for an all -inf row: not what kernelab specifies."""
    out = torch.softmax(x, dim=-1)
    return torch.nan_to_num(out, nan=0.0)


def ignores_row_stride(x):
    """Softmax that reads x's buffer as if it were contiguous (pointer + row * cols)."""
    rows, cols = x.shape
    flat = torch.empty(0, dtype=x.dtype, device=x.device).set_(x.untyped_storage())
    packed = flat[x.storage_offset() : x.storage_offset() + rows * cols].view(rows, cols)
    return torch.softmax(packed, dim=-1)


def round_to_tf32(x: torch.Tensor) -> torch.Tensor:
    """fp32 values rounded to tf32's 10-bit mantissa (nearest, ties away), kept in fp32."""
    bits = x.contiguous().view(torch.int32)
    # Drop the 13 low mantissa bits after adding half of their weight.
    rounded = (bits + 0x1000) & ~0x1FFF
    return rounded.view(torch.float32).view(x.shape)


def gemm_in_tf32(a, b):
    """An fp32 GEMM with tf32 operands, as tensor cores compute it: wrong for fp32, right
    for math mode tf32."""
    return torch.mm(round_to_tf32(a), round_to_tf32(b))


def gemm_accumulating_in_input_dtype(a, b):
    """A GEMM whose running sum is kept in the input dtype (bf16 or fp16) instead of fp32:
    every one of the K additions rounds, so the error grows like u * sqrt(K / 6)."""
    out = torch.zeros(a.shape[0], b.shape[1], dtype=a.dtype, device=a.device)
    for p in range(a.shape[1]):
        out += a[:, p : p + 1] * b[p : p + 1, :]
    return out
