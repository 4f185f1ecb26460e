"""The weight-only int8 GEMV a learner writes first: y = x @ (q * scale)^T, dequantized in
registers.

W is stored as int8 q[n, k] with one fp32 scale per output channel (row of W): N*K bytes of
weights instead of 2*N*K at bf16, so a GEMV that streams W at the same bandwidth finishes in
about half the time. The scale is constant along K, so it leaves the K loop:
y[m, n] = scale[n] * sum_k x[m, k] * q[n, k], one multiply per output, not per weight.

One program per BLOCK_N output columns of one row of x (as ops/gemv/teaching.py); each K step
reads a [BLOCK_N, BLOCK_K] int8 tile (BLOCK_N * BLOCK_K bytes), widens it to fp32 (exact for
|q| <= 127) and accumulates the products in fp32.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernelab.errors import KernelabError

BLOCK_N = 64
BLOCK_K = 128  # 128 int8 = 128 bytes of each W row per step
SUPPORTED_DTYPES = (torch.bfloat16, torch.float16)


@triton.jit
def int8_gemv_kernel(x_ptr, q_ptr, scale_ptr, y_ptr, N, K, sxm, sxk, sqn, sqk, sym,
                     BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):  # fmt: skip
    row = tl.program_id(1).to(tl.int64)
    cols = tl.program_id(0).to(tl.int64) * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = tl.zeros((BLOCK_N,), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        ks = k0 + tl.arange(0, BLOCK_K)
        x = tl.load(x_ptr + row * sxm + ks * sxk, mask=ks < K, other=0.0)
        q = tl.load(q_ptr + cols[:, None] * sqn + ks[None, :] * sqk,
                    mask=(cols[:, None] < N) & (ks[None, :] < K), other=0)  # fmt: skip
        acc += tl.sum(q.to(tl.float32) * x.to(tl.float32)[None, :], axis=1)  # 2 FLOPs / byte
    scale = tl.load(scale_ptr + cols, mask=cols < N, other=0.0)  # 4 bytes per column, once
    tl.store(y_ptr + row * sym + cols, (acc * scale).to(y_ptr.dtype.element_ty), mask=cols < N)


def quant_gemv_int8(x, q, scale):
    """x[m, k] @ (q int8[n, k] * scale fp32[n])^T -> y[m, n] in x's dtype."""
    if x.dim() != 2 or q.dim() != 2 or x.shape[1] != q.shape[1] or scale.shape != q.shape[:1]:
        raise KernelabError(f"quant_gemv_int8 needs x[m, k], q[n, k], scale[n], got "
                            f"{tuple(x.shape)}, {tuple(q.shape)}, {tuple(scale.shape)}")  # fmt: skip
    if x.dtype not in SUPPORTED_DTYPES or q.dtype != torch.int8 or scale.dtype != torch.float32:
        raise KernelabError(f"quant_gemv_int8 needs bf16/fp16 x, int8 q, fp32 scale, got "
                            f"{x.dtype}, {q.dtype}, {scale.dtype}")  # fmt: skip
    (m, k), n = x.shape, q.shape[0]
    y = torch.empty((m, n), dtype=x.dtype, device=x.device)
    if m and n:
        grid = (triton.cdiv(n, BLOCK_N), m)
        int8_gemv_kernel[grid](x, q, scale.contiguous(), y, n, k, x.stride(0), x.stride(1),
                               q.stride(0), q.stride(1), y.stride(0), BLOCK_N=BLOCK_N,
                               BLOCK_K=BLOCK_K, num_warps=4)  # fmt: skip
    return y
