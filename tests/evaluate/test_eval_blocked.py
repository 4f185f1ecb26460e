"""The judge's comparisons a block at a time (kernelab.evaluate.blocked): the verdicts and
messages of kernelab.harness.check.compare, torch.allclose and the check for written inputs,
with float64 copies of a block, never of a whole tensor (what the memory plan counts:
blocked.CHECK_BYTES_PER_ELEMENT per element of a block)."""

from __future__ import annotations

import math

import pytest
import torch

from kernelab.evaluate import blocked
from kernelab.evaluate.footprint import LivePeak
from kernelab.harness.check import _mutation, _storage_bytes, compare

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
def test_a_blocked_comparison_gives_comparess_verdict_and_message(name):
    out, ref = _outputs(_reference())[name]
    if ref is None:  # the wrong answer of a non-contiguous 3-d output
        ref = out.double() + 0.02 * torch.randn(out.shape, dtype=torch.float64)
    dtype = "fp16" if out.dtype == torch.float16 else "fp32"
    whole = compare(out, ref, dtype=dtype)
    for block in (7, 50, BLOCK):
        assert out.numel() > block  # the blocked path, not compare itself
        found = blocked.compare(out, ref, dtype=dtype, block=block)
        assert (found.ok, found.threshold) == (whole.ok, whole.threshold), (block, found)
        assert found.error == pytest.approx(whole.error, rel=1e-12), (block, found)
        assert found.message == whole.message, (block, found.message, whole.message)


def test_the_other_blocked_checks_agree_with_their_whole_forms():
    ref = _reference()
    right, wrong = ref.float(), (ref * 1.001).float()
    for out in (right, wrong, right.t().contiguous().t()):
        want = (out.double() - ref).norm() / ref.norm()
        assert blocked.relative_error(out, ref, block=7) == pytest.approx(float(want), rel=1e-12)
        ok = torch.allclose(out.double(), ref.float().double(), atol=1e-4, rtol=1e-4)
        found, worst = blocked.allclose(out, ref.float(), tolerance=1e-4, block=7)
        assert found == ok
        if not ok:
            assert worst == float((out.double() - ref.float().double()).abs().max())
    written = right.clone()
    written[10, 10] += 1.0
    padded = torch.zeros(67, 48)[:, :45]
    touched = padded.clone()
    _storage_bytes(touched)[-4:] = 1  # the padding after the last row
    for before, after in ((right, right.clone()), (right, written), (padded, touched)):
        found = blocked.mutation([before], [after], block=7)
        whole = _mutation([before], [after])
        assert found == (whole and whole.replace("the implementation", "the solution"))
    assert blocked.mutation([None, right], [right, written], block=7).startswith(
        "the solution wrote into input 1 (fp32[67, 45]): 1 of 3015 elements changed"
    )


def test_the_blocks_hold_what_the_plan_counts_and_compare_holds_far_more(monkeypatch):
    monkeypatch.setattr(blocked, "CHECK_BLOCK", BLOCK)
    scratch = BLOCK * blocked.CHECK_BYTES_PER_ELEMENT
    torch.manual_seed(1)
    ref = torch.randn(256, 1000, dtype=torch.float64)  # 250 blocks
    expected = ref.float()
    cases = [ref.float(), (ref * 1.01).float(), (ref * 1.01).float().t().contiguous().t()]
    for out in cases:
        with LivePeak() as whole:
            compare(out, ref, dtype="fp32")
        with LivePeak() as found:
            blocked.compare(out, ref, dtype="fp32")
        assert found.peak <= scratch < whole.peak / 10
        with LivePeak() as found:
            blocked.allclose(out, expected, tolerance=1e-4)
        assert found.peak <= scratch
        with LivePeak() as found:
            blocked.relative_error(out, ref)
        assert found.peak <= scratch
        with LivePeak() as found:
            blocked.mutation([expected], [out])
        assert found.peak <= scratch
