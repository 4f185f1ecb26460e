"""Rotary position embedding: rotate each pair of x's head_dim by its position's angle.

Per pair (a, b) at frequency i: a' = a cos - b sin, b' = a sin + b cos, with cos and sin of
position * theta^(-2i / head_dim) read from fp32 tables [positions, head_dim / 2]. Pairs are
(x[2i], x[2i + 1]) in the interleaved layout (GPT-J, Meta's original Llama) and
(x[i], x[i + head_dim/2]) in the half-split one (GPT-NeoX, Hugging Face's rotate_half): the
two differ only in the offsets of a and b, a constexpr here.

One program per (token, block of heads): the token's position, one cos and one sin row
(head_dim / 2 fp32 each, shared by all its heads), then x read and written once (2 * heads *
head_dim * itemsize bytes; 3 FLOPs per element). Decode positions are arbitrary (a token deep
into its sequence), so they come from a tensor. In place is safe: every element is read by
the one program that writes it, before it writes. A position outside the tables rotates to
NaN: a loud, defined answer, where a check on the host would cost a device sync per call.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def rope_kernel(x_ptr, out_ptr, cos_ptr, sin_ptr, pos_ptr, heads, half, table_rows,
                sxt, sxh, sot, soh, sct, sst,
                INTERLEAVED: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_HALF: tl.constexpr):  # fmt: skip
    token = tl.program_id(0).to(tl.int64)
    hs = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    i = tl.arange(0, BLOCK_HALF)
    pos = tl.load(pos_ptr + token).to(tl.int64)
    inside = (pos >= 0) & (pos < table_rows)
    pos = tl.where(inside, pos, 0)  # never read outside the tables
    nan = float("nan")
    c = tl.load(cos_ptr + pos * sct + i, mask=i < half, other=0.0)
    s = tl.load(sin_ptr + pos * sst + i, mask=i < half, other=0.0)
    c, s = tl.where(inside, c, nan), tl.where(inside, s, nan)
    if INTERLEAVED:
        a_off, b_off = 2 * i, 2 * i + 1
    else:
        a_off, b_off = i, i + half
    mask = (hs[:, None] < heads) & (i[None, :] < half)
    x_row = x_ptr + token * sxt + hs[:, None] * sxh
    a = tl.load(x_row + a_off[None, :], mask=mask, other=0.0).to(tl.float32)
    b = tl.load(x_row + b_off[None, :], mask=mask, other=0.0).to(tl.float32)
    out_row = out_ptr + token * sot + hs[:, None] * soh
    dtype = out_ptr.dtype.element_ty
    tl.store(out_row + a_off[None, :], (a * c[None, :] - b * s[None, :]).to(dtype), mask=mask)
    tl.store(out_row + b_off[None, :], (a * s[None, :] + b * c[None, :]).to(dtype), mask=mask)
