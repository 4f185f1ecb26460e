"""Sampling, the teaching kernel: one program per row, the whole row in registers, the
definition of kernelab.spec.sampling read off a sorted copy of the row: top-k's threshold is
the k-th largest logit, top-p's the logit of the first sorted survivor whose inclusive
cumulative mass reaches p times the survivors' mass, min-p's is e >= min_p. The kept tokens
are renormalised and written (PROBS) or drawn by inverse CDF with one Philox uniform per row.
Bytes: the row is read once (vocab x itemsize); the sort costs O(vocab log^2 vocab)
compare-swaps in registers, why this form stops at 16K tokens and threshold.py sorts nothing.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernelab.errors import KernelabError
from kernelab.ops.sampling.params import TEACHING_MAX_VOCAB, philox_key, prepare


@triton.jit
def sampling_teaching_kernel(x_ptr, out_ptr, t_ptr, k_ptr, p_ptr, mp_ptr, vocab, stride, seed,
                             PROBS: tl.constexpr, BLOCK: tl.constexpr):  # fmt: skip
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    neg_inf = float("-inf")
    x = tl.load(x_ptr + row * stride + cols, mask=cols < vocab, other=neg_inf).to(tl.float32)
    x = tl.where(x != x, neg_inf, x)  # NaN: never drawn
    inf_row = tl.max(x) == float("inf")
    x = tl.where(inf_row, tl.where(x == float("inf"), 0.0, neg_inf), x)
    top = tl.max(x)
    t, k = tl.load(t_ptr + row), tl.load(k_ptr + row)
    p, min_p = tl.load(p_ptr + row), tl.load(mp_ptr + row)
    e = tl.exp((x - top) / tl.where(t == 0.0, 1.0, t))
    xs = tl.sort(x, descending=True)
    floor = tl.max(tl.where(cols == k - 1, xs, neg_inf))  # the k-th largest logit
    floor = tl.where((k > 0) & (k < vocab), floor, neg_inf)
    es = tl.where(xs >= floor, tl.exp((xs - top) / tl.where(t == 0.0, 1.0, t)), 0.0)
    cum = tl.cumsum(es, 0)
    first = tl.min(tl.where(cum >= p * tl.sum(es), cols, BLOCK))  # first to reach p * M_k
    floor_p = tl.max(tl.where(cols == first, xs, neg_inf))
    floor = tl.where(p < 1.0, tl.maximum(floor, floor_p), floor)
    w = tl.where((x >= floor) & (e >= min_p), e, 0.0)
    total = tl.sum(w)
    argmax = tl.min(tl.where(x == top, cols, BLOCK))  # the first index of the largest
    if PROBS:
        probs = tl.where(t == 0.0, tl.where(cols == argmax, 1.0, 0.0), w / total)
        probs = tl.where(top == neg_inf, float("nan"), probs)  # no drawable token
        tl.store(out_ptr + row * vocab + cols, probs, mask=cols < vocab)
    else:
        target = tl.rand(seed, row.to(tl.int32)) * total
        hit = tl.min(tl.where(tl.cumsum(w, 0) > target, cols, BLOCK))
        last = tl.max(tl.where(w > 0.0, cols, -1))  # u * total rounded past the sum
        token = tl.where(hit < BLOCK, hit, last)
        token = tl.where(t == 0.0, argmax, token)
        tl.store(out_ptr + row, tl.where(top == neg_inf, -1, token).to(tl.int64))


def _launch(logits, temperature, top_k, top_p, min_p, seed: int, probs: bool):
    logits, params = prepare(logits, temperature, top_k, top_p, min_p, per_row=True)
    batch, vocab = logits.shape
    if vocab > TEACHING_MAX_VOCAB:
        raise KernelabError(f"the teaching sampler keeps a row in registers: vocab <= "
                            f"{TEACHING_MAX_VOCAB}, got {vocab} (use kernelab.ops.sampling)")  # fmt: skip
    shape, dtype = ((batch, vocab), torch.float32) if probs else ((batch,), torch.int64)
    out = torch.empty(shape, dtype=dtype, device=logits.device)
    if batch:
        sampling_teaching_kernel[(batch,)](logits, out, *params, vocab, logits.stride(0), seed,
                                           PROBS=probs, BLOCK=triton.next_power_of_2(vocab))  # fmt: skip
    return out


def sampling_probs(logits, temperature, top_k, top_p, min_p):
    """The filtered distribution, fp32[batch, vocab] (vocab <= params.TEACHING_MAX_VOCAB)."""
    return _launch(logits, temperature, top_k, top_p, min_p, 0, True)


def sample(logits, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, *, seed=0, offset=0):
    """Token ids int64[batch] drawn from the filtered distribution."""
    return _launch(logits, temperature, top_k, top_p, min_p, philox_key(seed, offset), False)
