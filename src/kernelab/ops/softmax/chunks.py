"""A split-row program's chunk: how it is loaded (masked, whole, or as bf16 pairs in 32-bit
words) and its max and exps, kept in registers until the row's statistics are known.

Bytes: each chunk is read once from HBM (CHUNK x itemsize, evict_first) and never again.
"""

from __future__ import annotations

import triton
import triton.language as tl

from kernelab.ops.softmax.primitives import LOG2E, _exp2


@triton.jit
def _chunk_max(x):
    """The max of a chunk."""
    return tl.max(x, axis=0)


@triton.jit
def _exps_and_sum(x, chunk_max, FTZ: tl.constexpr):
    """(e, c, sum of e) of one chunk whose max is chunk_max, with c = max * log2(e) rounded
    once to fp32 and e = 2^(x * log2(e) - c) in fp32 (one FFMA and one ex2 per value).
    The exps stay in registers: once the row's (C, S) are known the output is
    e * (2^(c - C) / S) (_chunk_scale), one FMUL per value. The max travels in log2 units
    because every exp of the chunk was taken against that rounded c: a row combined from
    exact maxima instead (exp(max - M)) is off by the rounding of c (up to half an ulp: 5e-4
    at logits of 1e4, a factor of up to 1 +- 3.4e-4 on every probability of the chunk).
    (0, -inf, 0) for a chunk of only -inf."""
    c = chunk_max * LOG2E
    e = _exps_against(x, c, FTZ)
    return e, c, tl.sum(e, axis=0)


@triton.jit
def _chunk_exp_stats(x, FTZ: tl.constexpr):
    """(e, c, sum of e) of one fp32 chunk (_exps_and_sum of its max)."""
    return _exps_and_sum(x, _chunk_max(x), FTZ)


@triton.jit
def _exps_against(x, c, FTZ: tl.constexpr):
    """2^(x * log2(e) - c) in fp32 for a chunk x (any dtype) whose max is c / log2(e); all 0
    for a chunk of only -inf (c = -inf). One FFMA and one ex2 per value."""
    return _exp2(x.to(tl.float32) * LOG2E - tl.where(c == -float("inf"), 0.0, c), FTZ)


@triton.jit
def _load_chunk(x_ptr, row, n_rows, n_cols, x_row_stride, cols, EVEN: tl.constexpr = False):
    """One program's chunk of `row` in the input dtype; nothing is read past the last row.
    EVEN (every chunk is whole: n_cols % CHUNK == 0): no mask and no -inf fill, one select
    and a compare fewer per value; a row past the last reads the last row again instead
    (its values are never used: once per program at the end, CHUNK * itemsize)."""
    if EVEN:
        last = tl.minimum(row, n_rows - 1)
        # read CHUNK * itemsize, used once
        return tl.load(
            x_ptr + tl.cast(last, tl.int64) * x_row_stride + cols, eviction_policy="evict_first"
        )
    cols_in_row = tl.where(row < n_rows, n_cols, 0)
    # read CHUNK * itemsize, used once
    return tl.load(
        x_ptr + tl.cast(row, tl.int64) * x_row_stride + cols,
        mask=cols < cols_in_row,
        other=-float("inf"),
        eviction_policy="evict_first",
    )


@triton.jit
def _load_pairs(x_ptr, row, n_rows, x_row_stride, chunk, CHUNK: tl.constexpr):
    """One program's whole chunk of a bf16 `row` as CHUNK / 2 32-bit words, two values each
    (the layout bf16 pairs have in memory), widened later by _unpaired without the PRMT per
    value that Triton's own bf16 conversion spends (the kernel's total registers stayed
    within 2 of the plain loads', compiled for sm_90). A row past the last reads the last one
    again, as _load_chunk's EVEN does. Rows of whole chunks and an even row stride."""
    words = x_ptr.to(tl.pointer_type(tl.uint32))
    last = tl.minimum(row, n_rows - 1)
    cols = chunk * (CHUNK // 2) + tl.arange(0, CHUNK // 2)
    # read CHUNK * 2 bytes, used once
    return tl.load(
        words + tl.cast(last, tl.int64) * (x_row_stride // 2) + cols, eviction_policy="evict_first"
    )


@triton.jit
def _unpaired(words):
    """The fp32 values of words of bf16 pairs (_load_pairs), in memory order. A bf16 is the
    high half of its fp32, so each value is one integer op: the low one shifted up (IMAD.U32
    by 0x10000), the high one masked (LOP3). Triton's own conversion first moves each half
    into a register of its own (a PRMT), then shifts: two ops per value."""
    low = (words << 16).to(tl.float32, bitcast=True)
    high = (words & 0xFFFF0000).to(tl.float32, bitcast=True)
    return tl.reshape(tl.join(low, high), [2 * words.shape[0]])


@triton.jit
def _max_of_pairs(a, b):
    """Elementwise max of two words of bf16 pairs: one HMNMX2 for two values. Like FMNMX, a
    NaN loses to a number (the max of a chunk with a NaN is still its largest number; the
    NaN then reaches the output through its exp)."""
    return tl.inline_asm_elementwise(
        "max.bf16x2 $0, $1, $2;", "=r,r,r", [a, b], dtype=tl.uint32, is_pure=True, pack=1
    )


@triton.jit
def _max_of_words(words, PTX: tl.constexpr):
    """The max of a chunk of bf16 pairs (_load_pairs), exact (a max does not round). PTX: taken
    on the pairs, about half the max instructions (ptxas makes the words' tree of HMNMX2 seven
    3-input VHMNMX per 16 words); the interpreter, which runs no inline PTX, takes it of the
    fp32 values."""
    if PTX:
        top = tl.reduce(words, 0, _max_of_pairs)
        low = (top << 16).to(tl.float32, bitcast=True)
        high = (top & 0xFFFF0000).to(tl.float32, bitcast=True)
        return tl.maximum(low, high)
    else:
        return tl.max(_unpaired(words), axis=0)


@triton.jit
def _load_step(
    x_ptr, row, n_rows, n_cols, x_row_stride, cols, chunk, CHUNK: tl.constexpr,
    EVEN: tl.constexpr, PAIRS: tl.constexpr,
):  # fmt: skip
    """The deferred kernel's chunk of `row` as it travels between steps: bf16 pairs in words
    (PAIRS, _load_pairs) or values in the input dtype (_load_chunk)."""
    if PAIRS:
        return _load_pairs(x_ptr, row, n_rows, x_row_stride, chunk, CHUNK)
    else:
        return _load_chunk(x_ptr, row, n_rows, n_cols, x_row_stride, cols, EVEN)
