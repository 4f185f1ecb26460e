"""How fp32 matrix products are computed: full fp32 on the FMA units or tf32 on the tensor
cores. cuBLAS reads torch's flag at call time, so a baseline, a ceiling and a check that
mean "fp32" must all set it the same way."""

from __future__ import annotations

import contextlib


@contextlib.contextmanager
def fp32_matmul(*, tf32: bool):
    """fp32 matmuls in tf32 (tensor cores) or in full fp32 inside the block; restored after."""
    import torch

    before = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = tf32
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before
