"""Residual add + RMSNorm in one pass: h = x + residual, y = h / sqrt(mean(h^2) + eps) * w.

A decoder layer does this twice per token: the sum h is the next residual stream and y the
input of the next GEMV. Unfused it is an add (read x and residual, write h) and an RMSNorm
(read h, write y): 5 * cols * itemsize bytes per row. Fused, h never makes the round trip:
read x and residual, write h and y, 4 * cols * itemsize (+ the weight, once per program,
from L2), a fifth less traffic. The op is deep in memory-bound land (5 FLOPs per 8 bytes at
bf16), so the time is the bytes.

One program per row, the whole row in registers (BLOCK = next power of two >= cols; one warp
per 256 values up to 16 warps: 8 fp32 values a thread at 4096, 32 at 16384): load both inputs,
add in fp32, store h, reduce the mean square in fp32 and scale. y is normalized from the
fp32 sum, not from h rounded to the storage dtype, so it is the float64 reference's up to
one rounding of y. h and y go to the two halves of one [2, rows, cols] buffer.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def add_rmsnorm_kernel(x_ptr, r_ptr, w_ptr, out_ptr, rows, cols, sx, sr, eps,
                       BLOCK: tl.constexpr):  # fmt: skip
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    mask = offs < cols
    x = tl.load(x_ptr + row * sx + offs, mask=mask, other=0.0).to(tl.float32)  # cols * itemsize
    r = tl.load(r_ptr + row * sr + offs, mask=mask, other=0.0).to(tl.float32)  # cols * itemsize
    h = x + r
    h_out = out_ptr + row * cols + offs
    tl.store(h_out, h.to(out_ptr.dtype.element_ty), mask=mask)  # cols * itemsize
    rstd = 1.0 / tl.sqrt(tl.sum(h * h, axis=0) / cols + eps)  # padding lanes hold 0
    w = tl.load(w_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    y = h * rstd * w
    tl.store(h_out + rows * cols, y.to(out_ptr.dtype.element_ty), mask=mask)  # cols * itemsize
