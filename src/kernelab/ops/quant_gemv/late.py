"""The quantized GEMVs at m = 1, late-summed: the dequantized products are kept elementwise in
an fp32 accumulator of the weight tile's own layout and summed along K once, after the loop
(the form of ops/gemv/split_k.py's LATE_SUM with X_AS_TILE), so a K step is loads, integer
unpacking and FMAs, with no cross-lane reduction and no shared memory.

Why: the split-K kernels of kernels.py sum each step's products along K at once; at m = 1
every step then ends in a reduction across the lanes that share a row of W (shuffles, and a
layout change through shared memory between barriers). For the bf16 GEMV that cost 1.7-2.1x
against the late-summed form (docs/ops/gemv.md); the quantized kernels stream 2-4x fewer bytes
a weight, so the fixed cost of a step weighs more.

x (one row) is loaded as a tile in W's layout (its pointers broadcast down the rows: each
thread loads the x values of its own weights, the repeats L1 hits) with X_AS_TILE; off, as a
row that Triton brings into W's layout through shared memory (two barriers a step), the form
the bf16 tile sweep found fastest at some shapes: the sweep (sweep.py) times both.

Integers become floats without the conversion unit (I2F issues at a quarter of the FMA rate
on sm_90): a value v in [0, 2^23) or'ed into the bits of 2^23 (0x4B000000) reads as the
float 2^23 + v, so one integer op and one FADD give v exactly, and the FADD subtracts the
zero point as well: (0x4B000000 | nibble) - (2^23 + zero) = nibble - zero.

int4 keeps its packed bytes' loads 16 bytes wide: the weight tile is [BLOCK_N, GROUPS, G/2]
bytes (whole groups a step, so one group scale a thread a group, not a gather per weight),
and x is read as 32-bit words [BLOCK_N, GROUPS, G/2], each the bf16/fp16 pair (2j, 2j + 1)
that byte j's low and high nibbles multiply: no interleave of the nibbles (which costs a
layout change through shared memory in Triton 3.9) and no strided loads of x.

Partials as in kernels.py: fp32 [SPLIT, 1, N] summed in a fixed order by ops/gemv's
sum_splits_kernel; unsplit the kernel writes y.
"""

from __future__ import annotations

import triton
import triton.language as tl

MAGIC = tl.constexpr(0x4B000000)  # the bits of 2^23 in fp32
MAGIC_F = tl.constexpr(8388608.0)  # 2^23


@triton.jit
def _int8_exact(q):
    """int8 -> fp32 exactly: (2^23 + 128 + q) - (2^23 + 128), on the integer and FMA units."""
    bits = q.to(tl.int32) + (MAGIC + 128)
    return bits.to(tl.float32, bitcast=True) - (MAGIC_F + 128.0)


@triton.jit
def per_channel_late_kernel(x_ptr, q_ptr, scale_ptr, out_ptr, N, K, k_per_split, sxk, sqn,
                            sqk, s_split, INT8: tl.constexpr, BLOCK_N: tl.constexpr,
                            BLOCK_K: tl.constexpr, X_AS_TILE: tl.constexpr,
                            STAGES: tl.constexpr):  # fmt: skip
    pid_n, split = tl.program_id(0), tl.program_id(1)
    cols = pid_n.to(tl.int64) * BLOCK_N + tl.arange(0, BLOCK_N)
    k_start = split * k_per_split  # k_per_split is a multiple of BLOCK_K
    k_end = tl.minimum(k_start + k_per_split, K)
    col_ok = cols[:, None] < N
    wide = tl.zeros((BLOCK_N, BLOCK_K), dtype=tl.float32)  # the products, summed at the end
    for k0 in tl.range(k_start, k_end, BLOCK_K, num_stages=STAGES):
        ks = (k0 + tl.arange(0, BLOCK_K))[None, :]
        k_ok = ks < k_end
        if X_AS_TILE:  # x's row as a [BLOCK_N, BLOCK_K] tile in W's layout
            x = tl.load(x_ptr + cols[:, None] * 0 + ks * sxk, mask=k_ok, other=0.0)
        else:
            x = tl.load(x_ptr + ks * sxk, mask=k_ok, other=0.0)
        q = tl.load(q_ptr + cols[:, None] * sqn + ks * sqk, mask=col_ok & k_ok, other=0.0)
        if INT8:
            w = _int8_exact(q)
        else:  # e4m3 values are exact in fp32
            w = q.to(tl.float32)
        wide += w * x.to(tl.float32)  # BLOCK_N * BLOCK_K bytes of W a step
    scale = tl.load(scale_ptr + cols, mask=cols < N, other=0.0)
    acc = tl.sum(wide, axis=1) * scale  # the per-channel scale once per column
    out = out_ptr + split.to(tl.int64) * s_split + cols
    tl.store(out, acc.to(out_ptr.dtype.element_ty), mask=cols < N)


@triton.jit
def _x_pair(words, X_BF16: tl.constexpr):
    """A 32-bit word of x's row -> its (even, odd) columns in fp32."""
    if X_BF16:  # a bf16 is the top half of its fp32
        even = (words << 16).to(tl.float32, bitcast=True)
        odd = (words & -65536).to(tl.float32, bitcast=True)
    else:
        even = (words & 0xFFFF).to(tl.int16).to(tl.float16, bitcast=True).to(tl.float32)
        odd = (words >> 16).to(tl.int16).to(tl.float16, bitcast=True).to(tl.float32)
    return even, odd


@triton.jit
def int4_late_kernel(xw_ptr, p_ptr, s_ptr, z_ptr, out_ptr, N, K, k_per_split, spn, ssn, ssg,
                     szn, szg, s_split, GROUP: tl.constexpr, HAS_ZEROS: tl.constexpr,
                     ZERO: tl.constexpr, X_BF16: tl.constexpr, BLOCK_N: tl.constexpr,
                     GROUPS: tl.constexpr, X_AS_TILE: tl.constexpr,
                     STAGES: tl.constexpr):  # fmt: skip
    # xw_ptr: x's row as int32 words (columns 2j, 2j + 1); packed bytes contiguous along K
    HALF: tl.constexpr = GROUP // 2  # bytes of a group
    pid_n, split = tl.program_id(0), tl.program_id(1)
    cols = pid_n.to(tl.int64) * BLOCK_N + tl.arange(0, BLOCK_N)
    rows3 = cols[:, None, None]
    groups3 = tl.arange(0, GROUPS)[None, :, None]
    bytes3 = tl.arange(0, HALF)[None, None, :]
    k_start = split * k_per_split  # a multiple of GROUPS * GROUP
    k_end = tl.minimum(k_start + k_per_split, K)  # K and so k_end: multiples of GROUP
    col_ok = rows3 < N
    wide = tl.zeros((BLOCK_N, GROUPS, HALF), dtype=tl.float32)
    for k0 in tl.range(k_start, k_end, GROUPS * GROUP, num_stages=STAGES):
        g = k0 // GROUP + groups3
        g_ok = g < k_end // GROUP
        p = tl.load(p_ptr + rows3 * spn + g * HALF + bytes3, mask=col_ok & g_ok, other=0)
        scale = tl.load(s_ptr + rows3 * ssn + g * ssg, mask=col_ok & g_ok, other=0.0)
        if HAS_ZEROS:
            zero = tl.load(z_ptr + rows3 * szn + g * szg, mask=col_ok & g_ok, other=0)
            offset = zero.to(tl.float32) + MAGIC_F  # 2^23 + zero, one a group
        else:
            offset = MAGIC_F + ZERO
        if X_AS_TILE:  # x's words as a [BLOCK_N, GROUPS, HALF] tile in W's layout
            words = tl.load(xw_ptr + rows3 * 0 + g * HALF + bytes3, mask=g_ok, other=0)
        else:
            words = tl.load(xw_ptr + g * HALF + bytes3, mask=g_ok, other=0)
        x_even, x_odd = _x_pair(words, X_BF16)
        nibbles = p.to(tl.int32)
        w_even = ((nibbles & 0xF) | MAGIC).to(tl.float32, bitcast=True) - offset
        w_odd = ((nibbles >> 4) | MAGIC).to(tl.float32, bitcast=True) - offset
        # the group scale once per pair: s * (x_2j w_2j + x_2j+1 w_2j+1)
        wide += scale.to(tl.float32) * (x_even * w_even + x_odd * w_odd)
    acc = tl.sum(tl.sum(wide, axis=2), axis=1)
    out = out_ptr + split.to(tl.int64) * s_split + cols
    tl.store(out, acc.to(out_ptr.dtype.element_ty), mask=cols < N)
