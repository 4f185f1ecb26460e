"""Decode attention, the form a learner writes first: one program per (sequence, query head)
walks its n cached tokens in blocks with the online softmax of flash attention.

Per block of T tokens: s = q . k_t / sqrt(D) for each token, the running max m moves to
max(m, max s), the running sum l and the accumulator acc (sum of exp(s - m) v_t) are rescaled
by exp(m_old - m) and take the block's terms; the answer is acc / l. Query head h reads KV
head h // (heads / kv_heads) (GQA). Bytes: every query head reads its KV head's K and V once,
2 * n * D * itemsize: a GQA group of G reads them G times, which the split-KV kernel
(split_kv.py) avoids by giving one program all G heads, and with one program per head a
batch-1 decode fills a few dozen SMs. Both are what the fast path fixes.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernelab.ops.decode_attention import _validate

BLOCK_T = 16


@triton.jit
def attend_kernel(q_ptr, k_ptr, v_ptr, o_ptr, n, scale, heads, group,
                  sqb, sqh, skb, skh, skt, svb, svh, svt, sob, soh,
                  HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_T: tl.constexpr):  # fmt: skip
    b, h = tl.program_id(0).to(tl.int64), tl.program_id(1).to(tl.int64)
    kv = h // group
    d = tl.arange(0, BLOCK_D)
    d_ok = d < HEAD_DIM
    q = tl.load(q_ptr + b * sqb + h * sqh + d, mask=d_ok, other=0.0).to(tl.float32)
    m = float("-inf")
    l_sum = 0.0
    acc = tl.zeros((BLOCK_D,), tl.float32)
    for t0 in range(0, n, BLOCK_T):
        t = t0 + tl.arange(0, BLOCK_T)
        mask = (t < n)[:, None] & d_ok[None, :]
        k = tl.load(k_ptr + b * skb + kv * skh + t[:, None] * skt + d[None, :], mask=mask, other=0.0)
        v = tl.load(v_ptr + b * svb + kv * svh + t[:, None] * svt + d[None, :], mask=mask, other=0.0)
        s = tl.sum(q[None, :] * k.to(tl.float32), axis=1) * scale
        s = tl.where(t < n, s, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, axis=0))
        rescale = tl.exp(m - m_new)
        p = tl.exp(s - m_new)
        l_sum = l_sum * rescale + tl.sum(p, axis=0)
        acc = acc * rescale + tl.sum(p[:, None] * v.to(tl.float32), axis=0)
        m = m_new
    out = acc / l_sum
    tl.store(o_ptr + b * sob + h * soh + d, out.to(o_ptr.dtype.element_ty), mask=d_ok)


def decode_attention(q, k, v, n: int):
    """softmax(q k[:, :, :n]^T / sqrt(D)) v[:, :, :n] per query head (GQA)."""
    _validate(q, k, v, n)
    batch, heads, head_dim = q.shape
    out = torch.empty_like(q, memory_format=torch.contiguous_format)
    if out.numel() == 0:
        return out
    attend_kernel[(batch, heads)](
        q, k, v, out, n, head_dim**-0.5, heads, heads // k.shape[1],
        q.stride(0), q.stride(1), k.stride(0), k.stride(1), k.stride(2),
        v.stride(0), v.stride(1), v.stride(2), out.stride(0), out.stride(1),
        HEAD_DIM=head_dim, BLOCK_D=triton.next_power_of_2(head_dim), BLOCK_T=BLOCK_T,
    )  # fmt: skip
    return out
