"""The GEMV a learner writes first: y[m, n] = sum_k x[m, k] * W[n, k]  (y = x W^T).

Decode multiplies one token (or a handful) by a weight matrix, so W is the only large
operand: N*K*itemsize bytes read once against 2*M*N*K FLOPs, an intensity of about M FLOP per
byte at bf16. At M = 1 that is ~1 FLOP/byte, hundreds of times left of any ridge: the kernel
is a copy of W with a dot product hidden in it, and speed means streaming W at full bandwidth.

One program per BLOCK_N output columns of one row of x; a loop over K in BLOCK_K steps reads a
[BLOCK_N, BLOCK_K] tile of W (contiguous along K, so each row of the tile is a coalesced
read) and the matching BLOCK_K of x, multiplies them and sums along K into an fp32
accumulator. For M > 1 the grid's second axis repeats the sweep per row of x: W is fetched
from DRAM once and re-read from L2 by the other rows (the fast path in __init__ keeps all
rows in one program instead, and splits K when N / BLOCK_N programs cannot fill the GPU).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernelab.errors import KernelabError

BLOCK_N = 64  # output columns per program: 4096 columns -> 64 programs per row of x
BLOCK_K = 64  # 64 bf16 = 128 bytes of each W row per step
SUPPORTED_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


@triton.jit
def gemv_kernel(x_ptr, w_ptr, y_ptr, N, K, sxm, sxk, swn, swk, sym,
                BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):  # fmt: skip
    row = tl.program_id(1).to(tl.int64)
    cols = tl.program_id(0).to(tl.int64) * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = tl.zeros((BLOCK_N,), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        ks = k0 + tl.arange(0, BLOCK_K)
        x = tl.load(x_ptr + row * sxm + ks * sxk, mask=ks < K, other=0.0)  # BLOCK_K * itemsize
        w = tl.load(w_ptr + cols[:, None] * swn + ks[None, :] * swk,
                    mask=(cols[:, None] < N) & (ks[None, :] < K), other=0.0)  # fmt: skip
        # BLOCK_N * BLOCK_K * itemsize of W: the bytes that matter; 2 FLOPs per element
        acc += tl.sum(w.to(tl.float32) * x.to(tl.float32)[None, :], axis=1)
    tl.store(y_ptr + row * sym + cols, acc.to(y_ptr.dtype.element_ty), mask=cols < N)


def gemv(x, w):
    """x[m, k] @ w[n, k]^T -> y[m, n] in x's dtype (fp32 accumulation)."""
    if x.dim() != 2 or w.dim() != 2 or x.shape[1] != w.shape[1]:
        raise KernelabError(f"gemv needs x[m, k] and w[n, k], got {tuple(x.shape)} and "
                            f"{tuple(w.shape)}")  # fmt: skip
    if x.dtype != w.dtype or x.dtype not in SUPPORTED_DTYPES:
        raise KernelabError(f"gemv needs x and w of one dtype among fp32, bf16, fp16, got "
                            f"{x.dtype} and {w.dtype}")  # fmt: skip
    (m, k), n = x.shape, w.shape[0]
    y = torch.empty((m, n), dtype=x.dtype, device=x.device)
    if m == 0 or n == 0:
        return y
    if k == 0:
        return y.zero_()  # an empty sum
    grid = (triton.cdiv(n, BLOCK_N), m)
    gemv_kernel[grid](x, w, y, n, k, x.stride(0), x.stride(1), w.stride(0), w.stride(1),
                      y.stride(0), BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, num_warps=4)  # fmt: skip
    return y
