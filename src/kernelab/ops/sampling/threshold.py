"""Sampling without a sort, for vocabularies of 32K-256K: one program per row walks the row
in tiles of BLOCK logits, and every question about the distribution is a pass of reductions.

Every filter keeps the tokens at or above a logit threshold (kernelab.spec.sampling), so a
threshold is found by bisection on the logit itself, exactly: fp32 values map to int32 keys
in the same order (flip the magnitude bits of negatives), and the largest key K with
count(key >= K) >= k (top-k) or mass(key >= K) >= p * M_k (top-p) is reached in at most 32
halvings of the key range, each a pass that counts or sums over the row.

`sampling_probs` does exactly that (the exact distribution, for checks). `sample` needs no
top-p threshold: it draws a candidate from the survivors of top-k and min-p by inverse CDF
(prefix sums over the tiles, stopping at the tile that holds the draw), then one pass sums
the mass strictly above the candidate's logit: below p * M_k, the candidate is in the
nucleus and is the answer; otherwise every token at or below it is out, the floor rises above
it and the next candidate is drawn from what is left. Since the nucleus holds at least p of
the mass still in play, a round accepts with probability >= p (0.9 -> 1.1 rounds expected),
and each rejection strictly shrinks the set, so the loop ends.

Bytes: each pass reads the row, vocab x itemsize (a 128K fp32 row: 512 KiB, then from L2).
top-p sampling = online max and normaliser, which draws the first candidate as it goes (1
pass), + per round a check (1 pass) and, after a rejection (probability <= 1 - p), a redraw
(half a pass on average): about 2.2 passes at p = 0.9. top-k adds up to 32 counting
passes and one summing pass; min-p one summing pass; the exact probabilities up to 32
summing passes and one write of fp32[vocab].
"""

from __future__ import annotations

import triton
import triton.language as tl

LOG2E = tl.constexpr(1.4426950408889634)
KEY_MIN = tl.constexpr(-(1 << 31))
INDEX_NONE = tl.constexpr((1 << 31) - 1)  # "no index": larger than any column


@triton.jit
def _param(value, row, PER_ROW: tl.constexpr, DTYPE: tl.constexpr):
    """A per-row parameter: value[row] from a tensor, or the scalar every row shares."""
    if PER_ROW:
        return tl.load(value + row).to(DTYPE)
    else:
        return tl.cast(value, DTYPE)


@triton.jit
def _clean(x, inf_row):
    """NaN -> -inf; in a row with +inf, +inf -> 0 and the rest -> -inf; -0.0 -> +0.0 (one key)."""
    x = tl.where(x != x, float("-inf"), x)
    x = tl.where(inf_row, tl.where(x == float("inf"), 0.0, float("-inf")), x)
    return tl.where(x == 0.0, 0.0, x)


@triton.jit
def _key(x):
    """An int32 in the order of the fp32 x: negatives get their magnitude bits flipped."""
    bits = x.to(tl.int32, bitcast=True)
    return bits ^ ((bits >> 31) & 0x7FFFFFFF)


@triton.jit
def _tile(row_ptr, start, vocab, inf_row, BLOCK: tl.constexpr):
    cols = start + tl.arange(0, BLOCK)
    x = tl.load(row_ptr + cols, mask=cols < vocab, other=float("-inf")).to(tl.float32)
    return cols, _clean(x, inf_row)  # read BLOCK x itemsize


@triton.jit
def _pick(cols, w, weight, total, u_pick, u_within, candidate):
    """One step of a weighted reservoir: the tile whose weights `w` sum to `weight` replaces
    the candidate with probability weight / total (total: the mass seen so far, this tile's
    included), its token drawn by inverse CDF within the tile. Every token then ends up the
    candidate with probability w / (the row's mass): exact, whatever the order of the tiles.
    A tile of no weight (0 / 0 is NaN) is never picked."""
    if u_pick < weight / total:
        cum = tl.cumsum(w, 0)
        hit = tl.min(tl.where(cum > u_within * weight, cols, INDEX_NONE))
        last = tl.max(tl.where(w > 0.0, cols, -1))  # the draw rounded past the tile's sum
        candidate = tl.where(hit < INDEX_NONE, hit, last)
    return candidate


@triton.jit
def _max_and_mass(row_ptr, vocab, scale, seed, offset, DRAW: tl.constexpr, BLOCK: tl.constexpr):
    """One pass: the largest logit, its first index and sum(exp2((x - max) * scale)), the
    sum rescaled as the maximum grows (online softmax). NaN is -inf; +inf is left to the
    caller (the sum is then NaN). Two tiles an iteration, as in _mass_ge.

    DRAW: the same pass also draws a token from the whole row's distribution (a weighted
    reservoir over the tiles, _pick; the rescaling as the max grows changes every weight by
    one factor, so the picks stay exact), with the uniforms tl.rand(seed, offset + 2 * tile
    + 0 or 1). Without top-k, min-p or a +inf logit that is the sampler's first candidate,
    and top-p sampling needs one pass less. -1 without DRAW or a drawable token."""
    top = tl.full((), float("-inf"), tl.float32)
    mass = tl.full((), 0.0, tl.float32)
    first = tl.full((), 0, tl.int32)
    candidate = tl.full((), -1, tl.int32)
    for start in range(0, vocab, 2 * BLOCK):
        ca, xa = _tile(row_ptr, start, vocab, False, BLOCK)
        cb, xb = _tile(row_ptr, start + BLOCK, vocab, False, BLOCK)
        tile_top = tl.maximum(tl.max(xa), tl.max(xb))
        at = tl.minimum(tl.min(tl.where(xa == tile_top, ca, INDEX_NONE)),
                        tl.min(tl.where(xb == tile_top, cb, INDEX_NONE)))  # fmt: skip
        first = tl.where(tile_top > top, at, first)
        new_top = tl.maximum(top, tile_top)
        base = tl.where(new_top == float("-inf"), 0.0, new_top)
        wa = tl.exp2((xa - base) * scale)
        wb = tl.exp2((xb - base) * scale)
        sum_a = tl.sum(wa)
        sum_b = tl.sum(wb)
        mass = mass * tl.exp2((top - base) * scale)
        if DRAW:
            tile = start // BLOCK
            u = tl.rand(seed, offset + 2 * tile)  # 4 uniforms per iteration
            u_within = tl.rand(seed, offset + 2 * tile + 1)
            candidate = _pick(ca, wa, sum_a, mass + sum_a, u, u_within, candidate)
            u = tl.rand(seed, offset + 2 * tile + 2)
            u_within = tl.rand(seed, offset + 2 * tile + 3)
            candidate = _pick(cb, wb, sum_b, mass + sum_a + sum_b, u, u_within, candidate)
        mass = mass + sum_a + sum_b
        top = new_top
    return top, mass, first, candidate


@triton.jit
def _count_ge(row_ptr, vocab, inf_row, floor, BLOCK: tl.constexpr):
    count = tl.full((), 0, tl.int32)
    for start in range(0, vocab, 2 * BLOCK):
        ca, xa = _tile(row_ptr, start, vocab, inf_row, BLOCK)
        cb, xb = _tile(row_ptr, start + BLOCK, vocab, inf_row, BLOCK)
        count += tl.sum(((_key(xa) >= floor) & (ca < vocab)).to(tl.int32))
        count += tl.sum(((_key(xb) >= floor) & (cb < vocab)).to(tl.int32))
    return count


@triton.jit
def _mass_ge(row_ptr, vocab, inf_row, top, scale, floor, min_p, BLOCK: tl.constexpr):
    """sum of e = exp2((x - top) * scale) over key >= floor, and over those with e >= min_p.
    Two tiles an iteration, both loads issued before either is used: twice the bytes in
    flight of one program (the loop is not software-pipelined)."""
    every = tl.full((), 0.0, tl.float32)
    kept = tl.full((), 0.0, tl.float32)
    for start in range(0, vocab, 2 * BLOCK):
        _, xa = _tile(row_ptr, start, vocab, inf_row, BLOCK)
        _, xb = _tile(row_ptr, start + BLOCK, vocab, inf_row, BLOCK)
        ea = tl.exp2((xa - top) * scale)  # 0 for -inf and the padding
        eb = tl.exp2((xb - top) * scale)
        wa = tl.where(_key(xa) >= floor, ea, 0.0)
        wb = tl.where(_key(xb) >= floor, eb, 0.0)
        every += tl.sum(wa) + tl.sum(wb)
        kept += tl.sum(tl.where(ea >= min_p, wa, 0.0)) + tl.sum(tl.where(eb >= min_p, wb, 0.0))
    return every, kept


@triton.jit
def _top_k_floor(row_ptr, vocab, inf_row, k, top, BLOCK: tl.constexpr):
    """The key of the k-th largest logit: the largest K with count(key >= K) >= k."""
    lo = tl.full((), KEY_MIN, tl.int64)  # count(key >= KEY_MIN) = vocab >= k
    hi = _key(top).to(tl.int64) + 1  # count = 0 < k
    while hi - lo > 1:
        mid = lo + (hi - lo) // 2
        enough = _count_ge(row_ptr, vocab, inf_row, mid.to(tl.int32), BLOCK) >= k
        lo, hi = tl.where(enough, mid, lo), tl.where(enough, hi, mid)
    return lo.to(tl.int32)


@triton.jit
def _top_p_floor(row_ptr, vocab, inf_row, top, scale, floor, target, BLOCK: tl.constexpr):
    """The largest key K >= floor with mass(key >= K) >= target (mass(floor) >= target)."""
    lo = floor.to(tl.int64)
    hi = _key(top).to(tl.int64) + 1
    while hi - lo > 1:
        mid = lo + (hi - lo) // 2
        mass, _ = _mass_ge(row_ptr, vocab, inf_row, top, scale, mid.to(tl.int32), 0.0, BLOCK)
        enough = mass >= target
        lo, hi = tl.where(enough, mid, lo), tl.where(enough, hi, mid)
    return lo.to(tl.int32)


@triton.jit
def _draw(row_ptr, vocab, inf_row, top, scale, floor, min_p, target, BLOCK: tl.constexpr):
    """Inverse CDF over w = e on key >= floor and e >= min_p: the first token whose running
    sum exceeds target, tiles read only up to the one that holds it."""
    run = tl.full((), 0.0, tl.float32)
    token = tl.full((), -1, tl.int32)
    last = tl.full((), -1, tl.int32)  # the last positive weight: target rounded past the sum
    start = tl.full((), 0, tl.int32)
    while (start < vocab) & (token < 0):
        cols, x = _tile(row_ptr, start, vocab, inf_row, BLOCK)
        e = tl.exp2((x - top) * scale)
        w = tl.where((_key(x) >= floor) & (e >= min_p), e, 0.0)
        cum = tl.cumsum(w, 0) + run
        hit = tl.min(tl.where(cum > target, cols, INDEX_NONE))
        token = tl.where(hit < INDEX_NONE, hit, -1)
        last = tl.maximum(last, tl.max(tl.where(w > 0.0, cols, -1)))
        run = tl.max(cum)
        start += BLOCK
    return tl.where(token >= 0, token, last)


@triton.jit
def _row_setup(x_ptr, t_ptr, k_ptr, row, stride, vocab, seed, offset, T_ROWS: tl.constexpr,
               K_ROWS: tl.constexpr, DRAW: tl.constexpr, BLOCK: tl.constexpr):  # fmt: skip
    """(row pointer, temperature, scale, max, normaliser, first argmax, +inf row?, top-k
    floor key, the mass above it, a token drawn from the whole row or -1); the +inf row
    already mapped to logits 0 / -inf. DRAW, seed and offset: _max_and_mass's; the drawn
    token holds only where the floor stayed KEY_MIN and the row has no +inf."""
    row_ptr = x_ptr + row.to(tl.int64) * stride
    t = _param(t_ptr, row, T_ROWS, tl.float32)
    k = _param(k_ptr, row, K_ROWS, tl.int32)
    scale = LOG2E / tl.where(t == 0.0, 1.0, t)
    top, mass, first, drawn = _max_and_mass(row_ptr, vocab, scale, seed, offset, DRAW, BLOCK)
    inf_row = top == float("inf")
    floor = tl.full((), KEY_MIN, tl.int32)
    if inf_row:
        top = tl.full((), 0.0, tl.float32)
        mass, _ = _mass_ge(row_ptr, vocab, inf_row, top, scale, floor, 0.0, BLOCK)
    if (k > 0) & (k < vocab) & (t > 0.0) & (top > float("-inf")):
        floor = _top_k_floor(row_ptr, vocab, inf_row, k, top, BLOCK)
        mass, _ = _mass_ge(row_ptr, vocab, inf_row, top, scale, floor, 0.0, BLOCK)
    return row_ptr, t, scale, top, mass, first, inf_row, floor, drawn


@triton.jit
def probs_kernel(x_ptr, out_ptr, t_ptr, k_ptr, p_ptr, mp_ptr, vocab, stride,
                 T_ROWS: tl.constexpr, K_ROWS: tl.constexpr, P_ROWS: tl.constexpr,
                 MP_ROWS: tl.constexpr, BLOCK: tl.constexpr):  # fmt: skip
    """The exact filtered distribution of one row: fp32[vocab] written once."""
    row = tl.program_id(0)
    row_ptr, t, scale, top, mass, first, inf_row, floor, no_draw = _row_setup(
        x_ptr, t_ptr, k_ptr, row, stride, vocab, 0, 0, T_ROWS, K_ROWS, False, BLOCK)  # fmt: skip
    p = _param(p_ptr, row, P_ROWS, tl.float32)
    min_p = _param(mp_ptr, row, MP_ROWS, tl.float32)
    total = mass
    live = (t > 0.0) & (top > float("-inf"))
    if live & (p < 1.0):
        floor = _top_p_floor(row_ptr, vocab, inf_row, top, scale, floor, p * mass, BLOCK)
    if live & ((p < 1.0) | (min_p > 0.0)):
        _, total = _mass_ge(row_ptr, vocab, inf_row, top, scale, floor, min_p, BLOCK)
    out_row = out_ptr + row.to(tl.int64) * vocab
    for start in range(0, vocab, BLOCK):
        cols, x = _tile(row_ptr, start, vocab, inf_row, BLOCK)
        e = tl.exp2((x - top) * scale)
        w = tl.where((_key(x) >= floor) & (e >= min_p), e, 0.0)
        probs = tl.where(t == 0.0, tl.where(cols == first, 1.0, 0.0), w / total)
        probs = tl.where(top == float("-inf"), float("nan"), probs)  # nothing to draw
        tl.store(out_row + cols, probs, mask=cols < vocab)  # write BLOCK x 4
