"""The weight-only quantized GEMVs' fast paths: the split-K GEMV of ops/gemv/split_k.py with
the weights dequantized in registers on their way from memory to the multiply.

What changes against the bf16 GEMV is only the bytes of W: 1 per weight for int8 and fp8,
0.5 (+ 2/g for the fp16 group scale, + 1/g for a zero point) for int4. The x and y traffic
and the FLOPs are the same, and at m <= 64 the GEMV stays far left of the ridge, so the
speedup is bounded by the ratio of W bytes: 2x for int8/fp8, about 3.8x for int4 at g = 128.
The dequantization costs a few integer and float ops per weight, which the CUDA cores hide
under the memory stream as long as they stay below ~10 per byte (H100: ~60 TFLOP/s of fp32
against 3.35 TB/s).

Per-channel (int8, fp8): the scale is constant along K, so partial sums of q * x are scaled
once per output column. int4: each byte holds columns 2j (low nibble) and 2j + 1 (high), so
the kernel loads x's even and odd columns separately and never interleaves the nibbles; the
group scale and zero point of column 2j are gathered per element ((k0 + 2j) // GROUP), so
BLOCK_K is free of the group size.

Partials: fp32 [SPLIT, M, N], summed in a fixed order by ops/gemv's sum_splits_kernel (why
atomic-free: see ops/gemv/split_k.py). With SPLIT = 1 the kernel writes y directly.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _product_half(acc, x, w, USE_DOT: tl.constexpr, FP32_DOT: tl.constexpr):
    """acc += x @ w^T with w in fp32; tensor cores take w rounded to x's dtype (the round of
    a dequantized weight, as every weight-only kernel does), the interpreter fp32."""
    if USE_DOT:
        if FP32_DOT:
            return tl.dot(x.to(tl.float32), tl.trans(w), acc, input_precision="ieee")
        return tl.dot(x, tl.trans(w.to(x.dtype)), acc)
    return acc + tl.sum(x.to(tl.float32)[:, None, :] * w[None, :, :], axis=2)


@triton.jit
def per_channel_kernel(x_ptr, q_ptr, scale_ptr, out_ptr, M, N, K, k_per_split,
                       sxm, sxk, sqn, sqk, s_split, som,
                       BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                       USE_DOT: tl.constexpr, FP32_DOT: tl.constexpr):  # fmt: skip
    pid_n, split, pid_m = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    rows = pid_m.to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n.to(tl.int64) * BLOCK_N + tl.arange(0, BLOCK_N)
    k_start = split * k_per_split
    k_end = tl.minimum(k_start + k_per_split, K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(k_start, k_end, BLOCK_K):
        ks = k0 + tl.arange(0, BLOCK_K)
        k_ok = ks < k_end
        x = tl.load(
            x_ptr + rows[:, None] * sxm + ks[None, :] * sxk,
            mask=(rows[:, None] < M) & k_ok[None, :],
            other=0.0,
        )
        q = tl.load(
            q_ptr + cols[:, None] * sqn + ks[None, :] * sqk,
            mask=(cols[:, None] < N) & k_ok[None, :],
            other=0.0,
        )  # 1 byte per weight
        # int8 and e4m3 values are exact in bf16/fp16 and fp32: widening loses nothing
        acc = _product_half(acc, x, q.to(tl.float32), USE_DOT, FP32_DOT)
    scale = tl.load(scale_ptr + cols, mask=cols < N, other=0.0)
    acc = acc * scale[None, :]
    out = out_ptr + split.to(tl.int64) * s_split + rows[:, None] * som + cols[None, :]
    tl.store(out, acc.to(out_ptr.dtype.element_ty), mask=(rows[:, None] < M) & (cols[None, :] < N))


@triton.jit
def int4_kernel(x_ptr, p_ptr, s_ptr, z_ptr, out_ptr, M, N, K, k_per_split,
                sxm, sxk, spn, spk, ssn, ssg, szn, szg, s_split, som,
                GROUP: tl.constexpr, HAS_ZEROS: tl.constexpr, ZERO: tl.constexpr,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                USE_DOT: tl.constexpr, FP32_DOT: tl.constexpr):  # fmt: skip
    pid_n, split, pid_m = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    rows = pid_m.to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n.to(tl.int64) * BLOCK_N + tl.arange(0, BLOCK_N)
    k_start = split * k_per_split  # a multiple of BLOCK_K, itself even
    k_end = tl.minimum(k_start + k_per_split, K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    row_ok, col_ok = rows[:, None] < M, cols[:, None] < N
    for k0 in range(k_start, k_end, BLOCK_K):
        even = k0 + 2 * tl.arange(0, BLOCK_K // 2)  # the low nibbles' columns; K is even
        k_ok = even < k_end
        p = tl.load(
            p_ptr + cols[:, None] * spn + (even // 2)[None, :] * spk,
            mask=col_ok & k_ok[None, :],
            other=0,
        )  # BLOCK_N * BLOCK_K / 2 bytes
        group = (even // GROUP)[None, :]
        scale = tl.load(
            s_ptr + cols[:, None] * ssn + group * ssg, mask=col_ok & k_ok[None, :], other=0.0
        ).to(tl.float32)  # fp16, one per GROUP columns (cached)
        if HAS_ZEROS:
            zero = tl.load(
                z_ptr + cols[:, None] * szn + group * szg, mask=col_ok & k_ok[None, :], other=0
            ).to(tl.float32)
        else:
            zero = ZERO
        # two nibbles per byte: and, shift, two subtracts and two multiplies per byte
        w_even = ((p & 0xF).to(tl.float32) - zero) * scale
        w_odd = ((p >> 4).to(tl.float32) - zero) * scale
        x_even = tl.load(
            x_ptr + rows[:, None] * sxm + even[None, :] * sxk,
            mask=row_ok & k_ok[None, :],
            other=0.0,
        )
        x_odd = tl.load(
            x_ptr + rows[:, None] * sxm + (even + 1)[None, :] * sxk,
            mask=row_ok & k_ok[None, :],
            other=0.0,
        )
        acc = _product_half(acc, x_even, w_even, USE_DOT, FP32_DOT)
        acc = _product_half(acc, x_odd, w_odd, USE_DOT, FP32_DOT)
    out = out_ptr + split.to(tl.int64) * s_split + rows[:, None] * som + cols[None, :]
    tl.store(out, acc.to(out_ptr.dtype.element_ty), mask=row_ok & (cols[None, :] < N))
