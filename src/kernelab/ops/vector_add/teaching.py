"""The vector add a learner writes first (the form of Triton's tutorial 01-vector-add).

Per element: two reads and one write (3 x itemsize bytes) for one add, so the kernel is a
measure of bandwidth alone. One program per BLOCK elements, a fixed BLOCK and no tuning:
__init__.py adds the autotuned BLOCK / warps and the launch machinery around the same body.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernelab.errors import KernelabError

BLOCK = 1024  # 4 warps x 32 threads x 8 values: two 16-byte loads per thread for fp32
SUPPORTED_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n  # the last program's tail
    x = tl.load(x_ptr + offsets, mask=mask)  # read BLOCK x itemsize
    y = tl.load(y_ptr + offsets, mask=mask)  # read BLOCK x itemsize
    total = x.to(tl.float32) + y.to(tl.float32)  # one add, rounded once to the output dtype
    tl.store(out_ptr + offsets, total.to(out_ptr.dtype.element_ty), mask=mask)  # write


def vector_add(x, y):
    """x + y for two tensors of the same shape and dtype; a new contiguous tensor."""
    if x.shape != y.shape or x.dtype != y.dtype:
        raise KernelabError(f"vector_add needs equal shapes and dtypes, got {x.shape}/{x.dtype}"
                            f" and {y.shape}/{y.dtype}")  # fmt: skip
    if x.dtype not in SUPPORTED_DTYPES:
        raise KernelabError(f"vector_add supports fp32, bf16 and fp16, not {x.dtype}")
    x, y = x.contiguous(), y.contiguous()
    out = torch.empty_like(x)
    n = x.numel()
    if n:
        add_kernel[(triton.cdiv(n, BLOCK),)](x, y, out, n, BLOCK=BLOCK, num_warps=4)
    return out
