"""Decode attention split over the KV length (flash decoding), grouped-query heads together.

One query token per sequence attends to its n cached keys: o = softmax(q K^T / sqrt(D)) V.
The work is a read of K and V (2 * n * D * itemsize bytes per KV head) for 4 * n * D FLOPs
per query head: at GQA group G that is 2G FLOPs per byte, far left of any ridge, so the time is
the bytes, and the bytes must come from enough programs at once to fill the GPU. One program
per (sequence, KV head) would be 8 programs at batch 1 for Llama-3-8B's 8 KV heads; splitting
the n tokens into S chunks gives 8 * S programs, each streaming its chunk of K and V once.

Why the G query heads of one KV head share a program: they read the same K and V, so each
chunk is loaded once for all of them (GQA's whole point), and their G rows, padded to 16,
make a tensor-core tile: q[16, D] @ K^T[D, BLOCK_T] and p[16, BLOCK_T] @ V[BLOCK_T, D].

Pass 1 (attend_split_kernel): per chunk, the online softmax of flash attention: a running
max m, a running sum l of exp(s - m) and an accumulator of exp(s - m) V, all fp32; it writes
the chunk's normalized output acc / l and its log-sum-exp m + log l (fp32 workspace,
[batch, heads, S, D] and [batch, heads, S]).
Pass 2 (combine_kernel): per query head, o = sum_s exp(lse_s - max) o_s / sum_s exp(lse_s -
max), cast to the output dtype: S * (D + 1) * 4 bytes read per head, small against K and V.

FP32_DOT: fp32 inputs multiply in ieee precision (not tf32), and the interpreter, whose bf16
dot multiplies raw 16-bit integers (Triton 3.9), gets operands widened to fp32 first, as in
ops/gemv/split_k.py.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def attend_split_kernel(q_ptr, k_ptr, v_ptr, part_ptr, lse_ptr, n, chunk, splits, scale,
                        sqb, sqh, skb, skh, skt, svb, svh, svt,
                        GROUP: tl.constexpr, HEAD_DIM: tl.constexpr, KV_HEADS: tl.constexpr,
                        BLOCK_G: tl.constexpr, BLOCK_D: tl.constexpr,
                        BLOCK_T: tl.constexpr, FP32_DOT: tl.constexpr):  # fmt: skip
    pid, split = tl.program_id(0), tl.program_id(1)
    b, kv_head = (pid // KV_HEADS).to(tl.int64), (pid % KV_HEADS).to(tl.int64)
    g, d = tl.arange(0, BLOCK_G), tl.arange(0, BLOCK_D)
    heads = kv_head * GROUP + g  # the query heads that read this KV head
    g_ok, d_ok = g < GROUP, d < HEAD_DIM
    # G * D * itemsize of q, once
    q = tl.load(q_ptr + b * sqb + heads[:, None] * sqh + d[None, :],
                mask=g_ok[:, None] & d_ok[None, :], other=0.0)  # fmt: skip
    start = split * chunk
    end = tl.minimum(start + chunk, n)
    m = tl.full((BLOCK_G,), float("-inf"), tl.float32)
    l_sum = tl.zeros((BLOCK_G,), tl.float32)
    acc = tl.zeros((BLOCK_G, BLOCK_D), tl.float32)
    k_base, v_base = k_ptr + b * skb + kv_head * skh, v_ptr + b * svb + kv_head * svh
    for t0 in range(start, end, BLOCK_T):
        t = t0 + tl.arange(0, BLOCK_T)
        t_ok = t < end
        mask = t_ok[:, None] & d_ok[None, :]
        k = tl.load(k_base + t[:, None] * skt + d[None, :], mask=mask, other=0.0)  # T*D bytes
        v = tl.load(v_base + t[:, None] * svt + d[None, :], mask=mask, other=0.0)  # T*D bytes
        if FP32_DOT:
            s = tl.dot(q.to(tl.float32), tl.trans(k.to(tl.float32)), input_precision="ieee")
        else:
            s = tl.dot(q, tl.trans(k))
        s = tl.where(t_ok[None, :], s * scale, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, axis=1))
        alpha = tl.exp(m - m_new)
        p = tl.exp(s - m_new[:, None])
        l_sum = l_sum * alpha + tl.sum(p, axis=1)
        if FP32_DOT:
            pv = tl.dot(p, v.to(tl.float32), input_precision="ieee")
        else:
            pv = tl.dot(p.to(v.dtype), v)
        acc = acc * alpha[:, None] + pv
        m = m_new
    # every split holds at least one token (the launcher sizes them), so l_sum > 0
    row = (b * KV_HEADS * GROUP + heads) * splits + split
    tl.store(part_ptr + row[:, None] * HEAD_DIM + d[None, :], acc / l_sum[:, None],
             mask=g_ok[:, None] & d_ok[None, :])  # fmt: skip
    tl.store(lse_ptr + row, m + tl.log(l_sum), mask=g_ok)


@triton.jit
def combine_kernel(part_ptr, lse_ptr, out_ptr, heads, splits, sob, soh,
                   HEAD_DIM: tl.constexpr, BLOCK_S: tl.constexpr,
                   BLOCK_D: tl.constexpr):  # fmt: skip
    row = tl.program_id(0).to(tl.int64)  # b * heads + head
    b, head = row // heads, row % heads
    s, d = tl.arange(0, BLOCK_S), tl.arange(0, BLOCK_D)
    s_ok = s < splits
    lse = tl.load(lse_ptr + row * splits + s, mask=s_ok, other=float("-inf"))
    weight = tl.exp(lse - tl.max(lse, axis=0))  # padding splits weigh exp(-inf) = 0
    weight = weight / tl.sum(weight, axis=0)
    part = tl.load(part_ptr + (row * splits + s)[:, None] * HEAD_DIM + d[None, :],
                   mask=s_ok[:, None] & (d[None, :] < HEAD_DIM), other=0.0)  # fmt: skip
    o = tl.sum(part * weight[:, None], axis=0)
    tl.store(out_ptr + b * sob + head * soh + d, o.to(out_ptr.dtype.element_ty), mask=d < HEAD_DIM)
