"""Top-p sampling by rejection, the fast path of `sample` (the argument is in threshold.py's
docstring): no top-p threshold is ever computed, only the mass above each candidate.

Per row: the online max and normaliser, which also draws the first candidate from the whole
row (a weighted reservoir over the tiles: threshold._max_and_mass) (1 pass); top-k's floor by
bisection when top-k is on and min-p's normaliser when min-p is on, after which the first
candidate is drawn again from what they keep (inverse CDF, stops at the tile holding the
draw); then rounds of check (1 pass) + redraw, the check skipped when top_p = 1. The uniform of
redraw r of row i is Philox's tl.rand(key, r * rows + i), the setup pass's from DRAWN_OFFSET
on: one key per call (params.philox_key(seed, offset)), so a seed and offset give the same
tokens on every run.
"""

from __future__ import annotations

import triton
import triton.language as tl

from kernelab.ops.sampling.threshold import (
    KEY_MIN,
    _clean,
    _draw,
    _key,
    _mass_ge,
    _param,
    _row_setup,
)

# the first uniform of the setup pass's draw (threshold._max_and_mass): the rounds take
# offsets attempt * rows + row, below it for any batch and vocabulary a GPU holds
DRAWN_OFFSET = tl.constexpr(1 << 30)


@triton.jit
def sample_kernel(x_ptr, out_ptr, t_ptr, k_ptr, p_ptr, mp_ptr, vocab, stride, seed, rows,
                  T_ROWS: tl.constexpr, K_ROWS: tl.constexpr, P_ROWS: tl.constexpr,
                  MP_ROWS: tl.constexpr, BLOCK: tl.constexpr):  # fmt: skip
    row = tl.program_id(0)
    # the setup pass's own draw takes uniforms from offset 2^30 on, past every round's
    tiles = tl.cdiv(vocab, BLOCK)
    drawn_at = DRAWN_OFFSET + row * (2 * tiles + 2)
    row_ptr, t, scale, top, mass, first, inf_row, floor, drawn = _row_setup(
        x_ptr, t_ptr, k_ptr, row, stride, vocab, seed, drawn_at, T_ROWS, K_ROWS, True, BLOCK)  # fmt: skip
    p = _param(p_ptr, row, P_ROWS, tl.float32)
    min_p = _param(mp_ptr, row, MP_ROWS, tl.float32)
    token = first  # greedy: the first largest logit
    if (t > 0.0) & (top > float("-inf")):
        total = mass
        if min_p > 0.0:
            _, total = _mass_ge(row_ptr, vocab, inf_row, top, scale, floor, min_p, BLOCK)
        if (min_p > 0.0) | (floor != KEY_MIN) | inf_row | (drawn < 0):
            # a filter the setup pass's draw did not see: draw again from what is kept
            u = tl.rand(seed, row)
            token = _draw(row_ptr, vocab, inf_row, top, scale, floor, min_p, u * total, BLOCK)
        else:
            token = drawn  # drawn from the whole row in the setup pass: no pass of its own
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
