"""The matmul a learner writes first (the form of Triton's tutorial 03-matrix-multiplication).

c[M, N] = a[M, K] @ b[K, N], fp32 accumulation, output in the inputs' dtype. One program per
BLOCK_M x BLOCK_N tile of c walks K in BLOCK_K steps: per step it reads (BLOCK_M + BLOCK_N) x
BLOCK_K x itemsize bytes and does 2 x BLOCK_M x BLOCK_N x BLOCK_K FLOPs on the tensor cores
(tl.dot), so a 128 x 128 tile reuses each loaded byte 64 times (bf16). Tiles are visited
GROUP_M rows of tiles at a time, so the programs in flight share their a and b panels in L2.
__init__.py adds autotuning, TMA descriptors and a persistent grid around the same loop.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernelab.errors import KernelabError
from kernelab.runtime.tuner import interpreting

SUPPORTED_DTYPES = (torch.bfloat16, torch.float16)
TILE = {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8}


@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
                  stride_cm, stride_cn, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                  BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr, DOT_FP32: tl.constexpr):  # fmt: skip
    # grouped order: GROUP_M rows of tiles are finished before the next group starts
    pid = tl.program_id(0)
    tiles_n = tl.cdiv(N, BLOCK_N)
    group = pid // (GROUP_M * tiles_n)
    rows_in_group = min(tl.cdiv(M, BLOCK_M) - group * GROUP_M, GROUP_M)
    tile_m = group * GROUP_M + (pid % (GROUP_M * tiles_n)) % rows_in_group
    tile_n = (pid % (GROUP_M * tiles_n)) // rows_in_group
    rm = (tile_m * BLOCK_M + tl.arange(0, BLOCK_M)).to(tl.int64)
    rn = (tile_n * BLOCK_N + tl.arange(0, BLOCK_N)).to(tl.int64)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        ks = k * BLOCK_K + rk
        # read BLOCK_M x BLOCK_K and BLOCK_K x BLOCK_N values; zeros past the edges add 0
        a = tl.load(a_ptr + rm[:, None] * stride_am + ks[None, :] * stride_ak,
                    mask=(rm[:, None] < M) & (ks[None, :] < K), other=0.0)  # fmt: skip
        b = tl.load(b_ptr + ks[:, None] * stride_bk + rn[None, :] * stride_bn,
                    mask=(ks[:, None] < K) & (rn[None, :] < N), other=0.0)  # fmt: skip
        if DOT_FP32:  # the CPU interpreter multiplies bf16 tiles as raw 16-bit integers
            a, b = a.to(tl.float32), b.to(tl.float32)
        acc = tl.dot(a, b, acc)  # 2 x BLOCK_M x BLOCK_N x BLOCK_K FLOPs
    # write BLOCK_M x BLOCK_N values, once
    tl.store(c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn,
             acc.to(c_ptr.dtype.element_ty), mask=(rm[:, None] < M) & (rn[None, :] < N))  # fmt: skip


def matmul(a, b):
    """a[M, K] @ b[K, N] for bf16 or fp16 inputs of one dtype; a new [M, N] tensor."""
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[0] or a.dtype != b.dtype:
        raise KernelabError(f"matmul needs a[M, K] and b[K, N] of one dtype, got "
                            f"{tuple(a.shape)}/{a.dtype} and {tuple(b.shape)}/{b.dtype}")  # fmt: skip
    if a.dtype not in SUPPORTED_DTYPES:
        raise KernelabError(f"the teaching matmul takes bf16 and fp16, not {a.dtype}")
    (M, K), N = a.shape, b.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=a.dtype)
    if c.numel():
        grid = (triton.cdiv(M, TILE["BLOCK_M"]) * triton.cdiv(N, TILE["BLOCK_N"]),)
        matmul_kernel[grid](a, b, c, M, N, K, *a.stride(), *b.stride(), *c.stride(), **TILE,
                            DOT_FP32=interpreting(), num_warps=8, num_stages=3)  # fmt: skip
    return c
