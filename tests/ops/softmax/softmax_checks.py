"""Checks the softmax test modules share."""

from __future__ import annotations

import torch


def huge_logit_rows(n_rows: int, n_cols: int) -> torch.Tensor:
    """fp32 rows whose softmax is easy to get wrong with split rows: 1e4 + N(0, 1) (every chunk
    contributes, and a max rounded in log2 units must be the one the exps were taken
    against), 1e4 * N(0, 1) (one-hot), -1000 + N(0, 1) with the first 4,096 columns -inf (a
    chunk of only -inf in a row whose exp(0 - max) overflows), and one row of only -inf."""
    x = 1e4 + torch.randn(n_rows, n_cols, device="cuda")
    x[1::4] = 1e4 * torch.randn_like(x[1::4])
    x[2::4] = -1000 + torch.randn_like(x[2::4])
    x[2::4, :4096] = float("-inf")
    x[3] = float("-inf")
    return x


def assert_precise_at_huge_logits(fn, config, n_cols: int = 70_001) -> None:
    x = huge_logit_rows(24, n_cols)
    y = fn(x)
    expected = torch.softmax(x.double(), dim=-1)
    finite = [r for r in range(x.shape[0]) if r != 3]
    assert torch.isnan(y[3]).all(), config
    assert torch.isfinite(y[finite]).all(), config
    assert (y[2::4, :4096] == 0).all(), config
    # fp32: within 1e-5 of each probability (a max taken in log2 units but not carried as
    # the exps' shift bounds the error at only ~3e-4 of a probability at 1e4: _exps_and_sum)
    error = (y[finite].double() - expected[finite]).abs()
    bound = 1e-5 * expected[finite] + 1e-9
    assert (error <= bound).all(), (
        f"{config}: worst {float((error / (expected[finite] + 1e-30)).max()):.2e}"
    )
