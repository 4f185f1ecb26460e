"""Decode attention over a KV cache, one query token per sequence, grouped-query heads: the
public entry. Read teaching.py first (one program per query head, the online softmax), then
split_kv.py (the fast path: a GQA group per program, the tokens split over programs).

    decode_attention(q, k, v, n) -> o
        q[batch, heads, head_dim], k and v [batch, kv_heads, >= n tokens, head_dim]: the
        first n tokens of each sequence are attended (the decode step's cache slots 0..L);
        any batch, head and token strides, contiguous head_dim; o[batch, heads, head_dim] in
        q's dtype; query head h reads KV head h // (heads / kv_heads); scale 1 / sqrt(D).

The split count is a rule of thumb (no record under benchmarks/results/ backs it yet): about
PROGRAMS_PER_SM programs per SM over (batch x KV heads x splits), every split at least one
BLOCK_T tile of tokens.
"""

from __future__ import annotations

import torch
import triton

from kernelab.errors import KernelabError
from kernelab.ops.decode_attention.split_kv import attend_split_kernel, combine_kernel
from kernelab.runtime.launch_plans import keep, planned
from kernelab.runtime.tuner import interpreting

SUPPORTED_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
BLOCK_T = 64  # tokens per step: 64 x 128 bf16 = 16 KiB each of K and V in flight
INTERPRETER_BLOCK_T = 16
INTERPRETER_SPLITS = 3  # several splits at tiny shapes, so the tests see the combine
PROGRAMS_PER_SM = 4
MAX_SPLITS = 256
MIN_TILE = 16  # tl.dot's smallest M, N and K


def _validate(q, k, v, n) -> None:
    if q.dim() != 3 or k.dim() != 4 or k.shape != v.shape:
        raise KernelabError(f"decode_attention needs q[batch, heads, head_dim] and k, v [batch, "
                            f"kv_heads, tokens, head_dim] of one shape, got {tuple(q.shape)}, "
                            f"{tuple(k.shape)}, {tuple(v.shape)}")  # fmt: skip
    batch, heads, head_dim = q.shape
    if k.shape[0] != batch or k.shape[3] != head_dim or heads % k.shape[1]:
        raise KernelabError(f"decode_attention: q {tuple(q.shape)} and k {tuple(k.shape)} do not "
                            "fit: one batch, one head_dim, heads a multiple of kv_heads")  # fmt: skip
    if not (q.dtype == k.dtype == v.dtype) or q.dtype not in SUPPORTED_DTYPES:
        raise KernelabError(f"decode_attention needs q, k, v of one dtype among fp32, bf16, fp16, "
                            f"got {q.dtype}, {k.dtype}, {v.dtype}")  # fmt: skip
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= k.shape[2]:
        raise KernelabError(f"decode_attention attends 1 to {k.shape[2]} cached tokens, got "
                            f"n = {n!r}")  # fmt: skip
    if any(t.numel() and t.stride(-1) != 1 for t in (q, k, v)):
        raise KernelabError("decode_attention needs a contiguous head_dim in q, k and v")
    if not (q.device == k.device == v.device):
        raise KernelabError(f"decode_attention needs q, k, v on one device, got {q.device}, "
                            f"{k.device}, {v.device}")  # fmt: skip


def plan(batch: int, kv_heads: int, n: int, sms: int | None) -> dict:
    """Tokens per program (chunk, a multiple of BLOCK_T) and the split count; sms None: the
    interpreter."""
    block_t = INTERPRETER_BLOCK_T if sms is None else BLOCK_T
    tiles = triton.cdiv(n, block_t)
    wanted = INTERPRETER_SPLITS if sms is None else triton.cdiv(PROGRAMS_PER_SM * sms,
                                                                batch * kv_heads)  # fmt: skip
    splits = max(1, min(wanted, tiles, MAX_SPLITS))
    chunk = triton.cdiv(tiles, splits) * block_t
    return {"BLOCK_T": block_t, "chunk": chunk, "splits": triton.cdiv(n, chunk)}


def decode_attention(q, k, v, n: int):
    """softmax(q k[:, :, :n]^T / sqrt(D)) v[:, :, :n] per query head (GQA); see the module."""
    _validate(q, k, v, n)
    batch, heads, head_dim = q.shape
    out = torch.empty((batch, heads, head_dim), dtype=q.dtype, device=q.device)
    if out.numel() == 0:
        return out
    _planned(q, k, v, out, n)
    return out


# Planned (launch_plans): the split plan, the workspaces and Triton's binding run on the first
# calls of a signature, later ones replay both kernels. n reaches the kernel as a scalar, which
# a plan replays as recorded, so n is part of the key: calls at one length (a benchmark, a
# batch held at one length) replay, while a decode loop whose n grows by one a step makes a
# new key every call, recorded and never replayed (a CUDA graph of the step is the answer
# there: benchmarks/decode_step.py's graphed paths).
@planned("triton.decode_attention", tensors=4, untuned=None)
def _planned(q, k, v, out, n: int) -> None:
    """Both passes: attend_split_kernel into the fp32 workspaces, combine_kernel into out."""
    batch, heads, head_dim = q.shape
    kv_heads = k.shape[1]
    interp = interpreting()
    if interp or q.device.type != "cuda":
        sms = None
    else:
        from kernelab.ops.gemv import sm_count

        sms = sm_count(q.device.index or 0)
    p = plan(batch, kv_heads, n, sms)
    splits, group = p["splits"], heads // kv_heads
    # scratch: pass 1 writes every row of both (each split holds a token) before pass 2 reads
    part = torch.empty((batch * heads * splits, head_dim), dtype=torch.float32, device=q.device)
    lse = torch.empty((batch * heads * splits,), dtype=torch.float32, device=q.device)
    keep(part, lse)
    block_d = max(MIN_TILE, triton.next_power_of_2(head_dim))
    attend_split_kernel[(batch * kv_heads, splits)](
        q, k, v, part, lse, n, p["chunk"], splits, head_dim**-0.5, q.stride(0), q.stride(1),
        k.stride(0), k.stride(1), k.stride(2), v.stride(0), v.stride(1), v.stride(2),
        GROUP=group, HEAD_DIM=head_dim, KV_HEADS=kv_heads,
        BLOCK_G=max(MIN_TILE, triton.next_power_of_2(group)), BLOCK_D=block_d,
        BLOCK_T=p["BLOCK_T"], FP32_DOT=interp or q.dtype == torch.float32, num_warps=4,
    )  # fmt: skip
    combine_kernel[(batch * heads,)](part, lse, out, heads, splits, out.stride(0), out.stride(1),
                                     HEAD_DIM=head_dim, BLOCK_S=triton.next_power_of_2(splits),
                                     BLOCK_D=block_d)  # fmt: skip


PLANS = _planned.plans  # the launch plans (tests read and reset them)


def decode_attention_reference(q, k, v, n: int):
    """The float64 specification: the same attention, on the CPU."""
    f = lambda t: t.detach().to("cpu", torch.float64)  # noqa: E731
    group = q.shape[1] // k.shape[1]
    keys = f(k[:, :, :n]).repeat_interleave(group, dim=1)
    values = f(v[:, :, :n]).repeat_interleave(group, dim=1)
    scores = torch.einsum("bhd,bhtd->bht", f(q), keys) / q.shape[-1] ** 0.5
    return torch.einsum("bht,bhtd->bhd", scores.softmax(dim=-1), values)
