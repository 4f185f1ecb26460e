"""The LayerNorm and RMSNorm a learner writes first: one program per row, the row in registers.

layernorm(x, w, b, eps) = (x - mean) / sqrt(var + eps) * w + b    (biased var, bias optional)
rmsnorm(x, w, eps)      = x / sqrt(mean(x^2) + eps) * w
Bytes per row: one read and one write of the row (2 x n_cols x itemsize) and the weight (and
bias), which stays in L2 after the first rows. Statistics in fp32 whatever the input dtype.
Rows past MAX_COLS are refused (__init__.py tiles and loops over them).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernelab.errors import KernelabError

MAX_COLS = 16384
SUPPORTED_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


@triton.jit
def norm_kernel(x_ptr, w_ptr, b_ptr, out_ptr, n_cols, x_row_stride, out_row_stride, eps,
                IS_RMS: tl.constexpr, HAS_BIAS: tl.constexpr, BLOCK: tl.constexpr):  # fmt: skip
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    # read n_cols x itemsize; the padding reads 0 and adds nothing to the sums
    x = tl.load(x_ptr + row * x_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
    if IS_RMS:
        centered = x
    else:
        # div_rn: "/" compiles to the GPU's approximate division, whose mean of a constant row
        # can miss the constant by an ulp, and the ulp, times rstd ~ 1/sqrt(eps), shows.
        # tl.cast, not .to(): Triton passes an n_cols of 1 as a constexpr, which has no .to()
        mean = tl.div_rn(tl.sum(x, axis=0), tl.cast(n_cols, tl.float32))
        centered = tl.where(mask, x - mean, 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(centered * centered, axis=0) / n_cols + eps)
    y = centered * rstd * tl.load(w_ptr + cols, mask=mask).to(tl.float32)  # w from L2
    if HAS_BIAS:
        y += tl.load(b_ptr + cols, mask=mask).to(tl.float32)
    # write n_cols x itemsize
    tl.store(out_ptr + row * out_row_stride + cols, y.to(out_ptr.dtype.element_ty), mask=mask)


def _normalize(x, weight, bias, eps, is_rms: bool):
    if x.dim() != 2 or weight.shape != (x.shape[1],):
        raise KernelabError(f"a norm needs x[rows, cols] and weight[cols], got "
                            f"{tuple(x.shape)} and {tuple(weight.shape)}")  # fmt: skip
    if x.dtype not in SUPPORTED_DTYPES:
        raise KernelabError(f"the norms support fp32, bf16 and fp16, not {x.dtype}")
    if x.shape[1] > MAX_COLS:
        raise KernelabError(f"the teaching norm holds a row in registers: at most {MAX_COLS} "
                            f"columns, got {x.shape[1]} (triton.layernorm takes any length)")  # fmt: skip
    x = x if x.stride(1) == 1 else x.contiguous()
    out = torch.empty(x.shape, device=x.device, dtype=x.dtype)
    if x.numel():
        block = triton.next_power_of_2(x.shape[1])
        norm_kernel[(x.shape[0],)](
            x, weight.contiguous(), weight if bias is None else bias.contiguous(), out,
            x.shape[1], x.stride(0), out.stride(0), eps, IS_RMS=is_rms,
            HAS_BIAS=bias is not None, BLOCK=block, num_warps=max(1, min(16, block // 256)),
        )  # fmt: skip
    return out


def layernorm(x, weight, bias=None, eps: float = 1e-5):
    return _normalize(x, weight, bias, eps, is_rms=False)


def rmsnorm(x, weight, eps: float = 1e-6):
    return _normalize(x, weight, None, eps, is_rms=True)
