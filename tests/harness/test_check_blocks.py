"""Comparisons a block at a time (kernelab.harness.blocks): compare's verdict and message,
torch.allclose's answer and the account of written inputs do not depend on the block, and the
float64 copies are a block's, never a whole tensor's (what the judge's memory plan counts:
blocks.CHECK_BYTES_PER_ELEMENT per element of a block)."""

from __future__ import annotations

import math

import pytest
import torch

from kernelab.evaluate.footprint import LivePeak
from kernelab.harness import blocks
from kernelab.harness.check import compare, copy_with_layout, mutation

BLOCK = 1 << 10  # elements: small, so that a test tensor is many blocks


def _reference() -> torch.Tensor:
    torch.manual_seed(0)
    return torch.randn(67, 45, dtype=torch.float64)


def _outputs(ref: torch.Tensor) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    noisy = (ref + 0.01 * torch.randn_like(ref)).float()
    holes = ref.float().clone()
    holes[3, 4], holes[60, 1] = float("nan"), float("inf")
    special = ref.clone()
    special[0, 0], special[50, 5] = float("nan"), float("-inf")
    return {
        "right": (ref.float(), ref),
        "wrong": (noisy, ref),
        "NaN and Inf where finite": (holes, ref),
        "non-finite where the reference is": (special.float(), special),
        "constant": (torch.zeros_like(ref, dtype=torch.float32), ref),
        "all NaN as the reference": (
            torch.full_like(ref, math.nan, dtype=torch.float32),
            torch.full_like(ref, math.nan),
        ),
        "transposed strides": (ref.float().t().contiguous().t(), ref),
        "transposed and wrong": (noisy.t().contiguous().t(), ref),
        "fp16": (ref.half(), ref),
        "3-d, rows larger than a block": (
            (torch.randn(3, 40, 50, dtype=torch.float64) * 2).float().transpose(1, 2),
            None,
        ),
    }


@pytest.mark.parametrize("name", list(_outputs(_reference())))
def test_compare_gives_one_verdict_and_message_whatever_the_block(name):
    out, ref = _outputs(_reference())[name]
    if ref is None:  # the wrong answer of a non-contiguous 3-d output
        ref = out.double() + 0.02 * torch.randn(out.shape, dtype=torch.float64)
    dtype = "fp16" if out.dtype == torch.float16 else "fp32"
    whole = compare(out, ref, dtype=dtype, block=out.numel())  # one block
    for block in (7, 50, BLOCK):
        assert out.numel() > block  # many blocks
        found = compare(out, ref, dtype=dtype, block=block)
        assert (found.ok, found.threshold) == (whole.ok, whole.threshold), (block, found)
        assert found.error == pytest.approx(whole.error, rel=1e-12), (block, found)
        assert found.message == whole.message, (block, found.message, whole.message)


def test_the_other_blocked_checks_agree_with_their_whole_forms():
    # torch's own answers (a norm, torch.allclose) on the whole tensors, against the blocks
    ref = _reference()
    right, wrong = ref.float(), (ref * 1.001).float()
    for out in (right, wrong, right.t().contiguous().t()):
        want = (out.double() - ref).norm() / ref.norm()
        assert blocks.relative_error(out, ref, block=7) == pytest.approx(float(want), rel=1e-12)
        ok = torch.allclose(out.double(), ref.float().double(), atol=1e-4, rtol=1e-4)
        found, worst = blocks.allclose(out, ref.float(), tolerance=1e-4, block=7)
        assert found == ok
        if not ok:
            assert worst == float((out.double() - ref.float().double()).abs().max())
    written = right.clone()
    written[10, 10] += 1.0
    padded = torch.zeros(67, 48)[:, :45]
    touched = copy_with_layout(padded)  # its padding bytes too: clone() drops them
    blocks.storage_bytes(touched)[-4:] = 1  # the padding after the last row
    expected = {
        "untouched": None,
        "written": "the implementation wrote into input 0 (fp32[67, 45]): 1 of 3015 elements "
        "changed",
        "padding": "the implementation wrote into input 0 (fp32[67, 45]) outside its elements "
        "(its padding)",
    }
    cases = {"untouched": (right, right.clone()), "written": (right, written),
             "padding": (padded, touched)}  # fmt: skip
    for name, (before, after) in cases.items():
        for block in (7, None):
            assert mutation([before], [after], block=block) == expected[name], (name, block)
    assert mutation([None, right], [right, written], who="the solution", block=7) == (
        "the solution wrote into input 1 (fp32[67, 45]): 1 of 3015 elements changed"
    )


def test_the_blocks_hold_what_the_plan_counts_and_one_block_holds_far_more(monkeypatch):
    monkeypatch.setattr(blocks, "CHECK_BLOCK", BLOCK)
    scratch = BLOCK * blocks.CHECK_BYTES_PER_ELEMENT
    torch.manual_seed(1)
    ref = torch.randn(256, 1000, dtype=torch.float64)  # 250 blocks
    expected = ref.float()
    cases = [ref.float(), (ref * 1.01).float(), (ref * 1.01).float().t().contiguous().t()]
    for out in cases:
        with LivePeak() as whole:
            compare(out, ref, dtype="fp32", block=out.numel())
        with LivePeak() as found:
            compare(out, ref, dtype="fp32")
        assert found.peak <= scratch < whole.peak / 10
        with LivePeak() as found:
            blocks.allclose(out, expected, tolerance=1e-4)
        assert found.peak <= scratch
        with LivePeak() as found:
            blocks.relative_error(out, ref)
        assert found.peak <= scratch
        with LivePeak() as found:
            mutation([expected], [out])
        assert found.peak <= scratch
