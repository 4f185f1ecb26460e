"""How the programs of one row exchange their chunks' partials (max, sum of exps) through
global memory, without a fence or a counter.

Each partial travels with its turn number in the same 64-bit word (NCCL's "LL" idea), written
by a relaxed atomic exchange, so a reader sees the old word or the whole new one. Tagged: two
words per chunk (turn in the high half). Packed: one word per chunk, the max in the high half,
the sum in the low half with its sign bit replaced by a turn bit. A poll is a volatile load
from L2 (~1 us); a bounded number of polls turns a broken residency assumption into NaN output
rather than a hang.
"""

from __future__ import annotations

import triton
import triton.language as tl

from kernelab.ops.softmax.primitives import _combine_stats
from kernelab.runtime import turn_words

# The partials of a row are read as one block of this many slots (masked past n_chunks), so
# one binary serves every row length up to MAX_CHUNKS_BLOCK * CHUNK columns.
MAX_CHUNKS_BLOCK = 256
# A poll of the arrival counter is one L2 round trip (~1 us), so ~2^22 polls is seconds:
# long enough for any real wait, short enough that a broken residency assumption ends.
MAX_SPINS = 1 << 22
# The interpreter runs programs one after another, so a peer that has not arrived never
# will: give up at once (the row's chunks before the last come out NaN).
INTERPRETER_MAX_SPINS = 4
MINUS_INF_BITS = tl.constexpr(-8388608)  # float32 -inf as a signed int32 (0xFF800000)
TURN_PERIOD = tl.constexpr(turn_words.TURN_PERIOD)  # slot and tag bit repeat every 8 turns


@triton.jit
def _tagged(turn, value):
    """One 64-bit word: the turn in the high half, the fp32 bits of value in the low half."""
    bits = value.to(tl.int32, bitcast=True).to(tl.int64) & 0xFFFFFFFF
    return (tl.cast(turn, tl.int64) << 32) | bits


@triton.jit
def _untagged(word):
    return (word & 0xFFFFFFFF).to(tl.int32).to(tl.float32, bitcast=True)


@triton.jit
def _late_peers(max_words, sum_words, turn):
    """How many peers have not yet published this turn's partials."""
    stale = ((max_words >> 32) != turn) | ((sum_words >> 32) != turn)
    return tl.sum(stale.to(tl.int32), axis=0)


@triton.jit
def _publish_tagged(buffer, chunk, turn, chunk_max, chunk_sum):
    """Publish this chunk's partials for `turn`: two tagged words, each its own flag.

    Each partial travels with its turn number in one 64-bit word (NCCL's "LL" idea), written
    by a relaxed atomic exchange, so a reader sees the old word or the whole new one. No
    counter, no fence: nothing waits for this program's earlier stores or loads to drain.
    """
    tl.atomic_xchg(buffer + chunk * 2, _tagged(turn, chunk_max), sem="relaxed", scope="gpu")
    tl.atomic_xchg(buffer + chunk * 2 + 1, _tagged(turn, chunk_sum), sem="relaxed", scope="gpu")


@triton.jit
def _gather_tagged(buffer, n_chunks, turn, BLOCK_CHUNKS, MAX_SPINS, BASE2: tl.constexpr):
    """Poll the n_chunks peers' words (volatile loads from L2) until every tag equals `turn`,
    then combine (BASE2: maxima in log2 units): (row max, row sum of exp, whether all arrived
    within the spin budget, how many polls after the first it took: 0 when every peer had
    already published)."""
    max_words, sum_words = _poll(buffer, n_chunks, turn, BLOCK_CHUNKS, False)
    return _settle(
        buffer, max_words, sum_words, n_chunks, turn, BLOCK_CHUNKS, MAX_SPINS, False, BASE2
    )


@triton.jit
def _exchange_tagged(
    buffer,
    chunk,
    n_chunks,
    turn,
    chunk_max,
    chunk_sum,
    BLOCK_CHUNKS,
    MAX_SPINS,
    BASE2: tl.constexpr,
):
    """Publish this chunk's partials, wait until all n_chunks peers have, combine them (the
    tagged protocol: _publish_tagged then _gather_tagged): (row max, row sum of exp, whether
    every peer arrived before the spin budget ran out)."""
    _publish_tagged(buffer, chunk, turn, chunk_max, chunk_sum)
    row_max, row_sum, met, _ = _gather_tagged(
        buffer, n_chunks, turn, BLOCK_CHUNKS, MAX_SPINS, BASE2
    )
    return row_max, row_sum, met


@triton.jit
def _turn_bit(turn):
    """The packed word's whole tag: one bit that flips every four turns (1 for turns 1-4, 0
    for 5-8, ...). In the deferred kernel a slot holds turn t or t - 4 when it is read for t
    (its four-slot argument), and those always differ in this bit; the zeroed workspace reads
    as turns -3..0 (bit 0), which no turn from 1 to 4 matches."""
    return ((turn + 3) // 4) % 2


@triton.jit
def _packed(turn, chunk_max, chunk_sum):
    """One 64-bit word for one chunk's partials: max bits in the high half, sum bits in the
    low half with the sign bit replaced by the turn bit (a sum of exps is never negative, and
    a NaN stays NaN whatever its sign). Half the words of the tagged pair, one atomic."""
    max_bits = chunk_max.to(tl.int32, bitcast=True).to(tl.int64) << 32
    sum_bits = chunk_sum.to(tl.int32, bitcast=True).to(tl.int64) & 0x7FFFFFFF
    return max_bits | (tl.cast(_turn_bit(turn), tl.int64) << 31) | sum_bits


@triton.jit
def _publish(buffer, chunk, turn, chunk_max, chunk_sum, PACKED: tl.constexpr):
    """Publish one chunk's partials for `turn`: one packed word, or the two tagged words."""
    if PACKED:
        tl.atomic_xchg(
            buffer + chunk, _packed(turn, chunk_max, chunk_sum), sem="relaxed", scope="gpu"
        )
    else:
        _publish_tagged(buffer, chunk, turn, chunk_max, chunk_sum)


@triton.jit
def _poll(buffer, n_chunks, turn, BLOCK_CHUNKS, PACKED: tl.constexpr):
    """One volatile read of the n_chunks peers' words for `turn`: (first words, second words);
    packed, both are the one word per chunk. Absent peers read as published (-inf, 0)."""
    peers = tl.arange(0, BLOCK_CHUNKS)
    present = peers < n_chunks
    if PACKED:
        # -inf's fp32 bits (0xFF800000) in the high half, sum 0, this turn's bit
        absent = (tl.cast(MINUS_INF_BITS, tl.int64) << 32) | (
            tl.cast(_turn_bit(turn), tl.int64) << 31
        )
        words = tl.load(buffer + peers, mask=present, other=absent, volatile=True)
        return words, words
    else:
        absent = (tl.cast(turn, tl.int64) << 32) | 0
        max_words = tl.load(buffer + peers * 2, mask=present, other=absent, volatile=True)
        sum_words = tl.load(buffer + peers * 2 + 1, mask=present, other=absent, volatile=True)
        return max_words, sum_words


@triton.jit
def _late(first, second, turn, PACKED: tl.constexpr):
    """How many peers' words in a poll are not yet this turn's."""
    if PACKED:
        stale = ((first >> 31) & 1) != _turn_bit(turn)
        return tl.sum(stale.to(tl.int32), axis=0)
    else:
        return _late_peers(first, second, turn)


@triton.jit
def _settle(
    buffer,
    first,
    second,
    n_chunks,
    turn,
    BLOCK_CHUNKS,
    MAX_SPINS,
    PACKED: tl.constexpr,
    BASE2: tl.constexpr,
):
    """From one poll's words, poll again until every peer's word is this turn's, then combine
    (BASE2: maxima in log2 units): (row max, row sum of exp, whether all arrived within the
    spin budget, the polls beyond the one given)."""
    late = _late(first, second, turn, PACKED)
    spins = 0
    while (late > 0) & (spins < MAX_SPINS):
        first, second = _poll(buffer, n_chunks, turn, BLOCK_CHUNKS, PACKED)
        late = _late(first, second, turn, PACKED)
        spins += 1
    if PACKED:
        maxes = (first >> 32).to(tl.int32).to(tl.float32, bitcast=True)
        sums = (first & 0x7FFFFFFF).to(tl.int32).to(tl.float32, bitcast=True)
    else:
        maxes = _untagged(first)
        sums = _untagged(second)
    present = tl.arange(0, BLOCK_CHUNKS) < n_chunks
    maxes = tl.where(present, maxes, -float("inf"))
    sums = tl.where(present, sums, 0.0)
    row_max, row_sum = _combine_stats(maxes, sums, BASE2)
    return row_max, row_sum, late == 0, spins
