"""The jitted pieces every softmax path shares: the exp in base 2, reductions of a chunk, the
combination of per-chunk partials and the L2 prefetch.

Every path computes exp(x - max) as 2^(x * log2(e) - max * log2(e)): one FFMA and one
MUFU.EX2 per value. Split rows publish (max * log2(e), sum of exps) per chunk and combine
them in base 2 (_combine_stats), so the rounding of the shift is the one every exp used.
"""

from __future__ import annotations

import triton
import triton.language as tl

LOG2E = tl.constexpr(1.4426950408889634)


@triton.jit
def _exp2(x, FTZ: tl.constexpr):
    """2^x. FTZ: one MUFU.EX2 (ex2.approx.ftz); without it Triton's ex2.approx.f32 costs an
    FSETP and two predicated FMULs more per value to keep denormal results, which a softmax
    (results <= 1, summed to >= 1) never needs. The interpreter runs the plain exp2."""
    if FTZ:
        return tl.inline_asm_elementwise(
            "ex2.approx.ftz.f32 $0, $1;", "=r,r", [x], dtype=tl.float32, is_pure=True, pack=1
        )
    else:
        return tl.exp2(x)


@triton.jit
def _exp_shifted(x, shift, FTZ: tl.constexpr):
    """exp(x - shift) as 2^(x * log2(e) - shift * log2(e)): one FFMA and one MUFU.EX2 per value
    where tl.exp(x - shift) costs an FADD, an FMUL by log2(e), then the ex2. Within one row
    tile the rounding of shift * log2(e) is one common factor, which the normalization divides
    out; split rows carry the rounded value instead (chunks._exps_and_sum)."""
    return _exp2(x * LOG2E - shift * LOG2E, FTZ)


@triton.jit
def _prefetch_to_l2(x_ptr, row, n_rows, n_cols, x_row_stride, first_col, SPAN: tl.constexpr):
    """Ask the L2 for the 128-byte lines of row's columns [first_col, first_col + SPAN) and go
    on: prefetch.global.L2 has no result, so those bytes are in flight from HBM without a
    register waiting for them; the later load of the same columns finds them in L2.
    evict_last keeps them there until that load (whose evict_first then lets them go).
    Nothing past the last row or column is asked for. GPU only (inline PTX)."""
    VALUES_PER_LINE: tl.constexpr = 1024 // x_ptr.dtype.element_ty.primitive_bitwidth
    lines = first_col + tl.arange(0, SPAN // VALUES_PER_LINE) * VALUES_PER_LINE
    inside = (lines < tl.where(row < n_rows, n_cols, 0)).to(tl.int32)
    tl.inline_asm_elementwise(
        "{ .reg .pred p; setp.ne.b32 p, $2, 0; @p prefetch.global.L2::evict_last [$1]; "
        "mov.b32 $0, 0; }",
        "=r,l,r",
        [x_ptr + tl.cast(row, tl.int64) * x_row_stride + lines, inside],
        dtype=tl.int32,
        is_pure=False,
        pack=1,
    )


@triton.jit
def _chunk_stats(x):
    """(max, sum of exp(x - max)) of one fp32 chunk; (-inf, 0) for a chunk of only -inf."""
    chunk_max = tl.max(x, axis=0)
    shift = tl.where(chunk_max == -float("inf"), 0.0, chunk_max)
    return chunk_max, tl.sum(tl.exp(x - shift), axis=0)


@triton.jit
def _chunk_scale(c, row_c, row_sum, FTZ: tl.constexpr):
    """What a chunk's exps (_chunk_exp_stats) are multiplied by: 2^(c - C) / S, with C and S
    combined in base 2 (_combine_stats). 0 for a chunk of only -inf (its exps are 0, and
    2^(0 - C) could overflow to inf when C is very negative); NaN for a row of only -inf,
    whose S is NaN (the documented output)."""
    return tl.where(c == -float("inf"), 0.0, _exp2(c - row_c, FTZ)) / row_sum


@triton.jit
def _combine_stats(maxes, sums, BASE2: tl.constexpr = False):
    """The row's max and sum of exp from its chunks' partials (padding: -inf, 0). BASE2: the
    maxima are in log2 units (max * log2(e), as the split-row kernels publish them) and the sums
    are of 2^(x * log2(e) - max)."""
    row_max = tl.max(maxes, axis=0)
    # all -inf row: exp(-inf - -inf) = NaN here, and NaN is the documented output
    if BASE2:
        return row_max, tl.sum(sums * tl.exp2(maxes - row_max), axis=0)
    return row_max, tl.sum(sums * tl.exp(maxes - row_max), axis=0)
