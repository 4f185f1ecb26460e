"""Top-p sampling by rejection, the fast path of `sample` (the argument is in threshold.py's
docstring): no top-p threshold is ever computed, only the mass above each candidate.

Per row: the online max and normaliser (1 pass); top-k's floor by bisection when top-k is on
and min-p's normaliser when min-p is on; then rounds of draw (inverse CDF, stops at the tile
holding the draw) + check (1 pass), skipped when top_p = 1. The uniform of round r of row i
is Philox's tl.rand(key, r * rows + i): one key per call (params.philox_key(seed, offset)),
so a seed and offset give the same tokens on every run.
"""

from __future__ import annotations

import triton
import triton.language as tl

from kernelab.ops.sampling.threshold import _clean, _draw, _key, _mass_ge, _param, _row_setup


@triton.jit
def sample_kernel(x_ptr, out_ptr, t_ptr, k_ptr, p_ptr, mp_ptr, vocab, stride, seed, rows,
                  T_ROWS: tl.constexpr, K_ROWS: tl.constexpr, P_ROWS: tl.constexpr,
                  MP_ROWS: tl.constexpr, BLOCK: tl.constexpr):  # fmt: skip
    row = tl.program_id(0)
    row_ptr, t, scale, top, mass, first, inf_row, floor = _row_setup(
        x_ptr, t_ptr, k_ptr, row, stride, vocab, T_ROWS, K_ROWS, BLOCK)  # fmt: skip
    p = _param(p_ptr, row, P_ROWS, tl.float32)
    min_p = _param(mp_ptr, row, MP_ROWS, tl.float32)
    token = first  # greedy: the first largest logit
    if (t > 0.0) & (top > float("-inf")):
        total = mass
        if min_p > 0.0:
            _, total = _mass_ge(row_ptr, vocab, inf_row, top, scale, floor, min_p, BLOCK)
        u = tl.rand(seed, row)
        token = _draw(row_ptr, vocab, inf_row, top, scale, floor, min_p, u * total, BLOCK)
        # done unless a check is needed; no candidate (nothing left, which only an unchecked
        # min_p >= 1 can cause) is final too, rather than a read before the row
        done = ((p >= 1.0) | (token < 0)).to(tl.int32)
        attempt = 1
        while done == 0:
            x = _clean(tl.load(row_ptr + token).to(tl.float32), inf_row)
            above_key = _key(x) + 1  # strictly above the candidate
            above, above_kept = _mass_ge(row_ptr, vocab, inf_row, top, scale, above_key, min_p,
                                         BLOCK)  # fmt: skip
            rejected = above >= p * mass  # false for a NaN p: accepted, never an endless loop
            done = (~rejected).to(tl.int32)
            if rejected:
                floor = above_key
                u = tl.rand(seed, attempt * rows + row)
                token = _draw(row_ptr, vocab, inf_row, top, scale, floor, min_p, u * above_kept,
                              BLOCK)  # fmt: skip
                done = (token < 0).to(tl.int32)
            attempt += 1
    token = tl.where(top == float("-inf"), -1, token)  # no drawable token
    tl.store(out_ptr + row, token.to(tl.int64))
