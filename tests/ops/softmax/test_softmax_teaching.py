"""The teaching softmax (ops/softmax/teaching.py): right at awkward shapes in every dtype,
NaN exactly where torch gives NaN, and registered so that `kernelab bench` times it."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
from triton_on_cpu import DEVICE, assert_matches_reference, kernel_module, shape_id  # noqa: E402

pytest.importorskip("triton")

from kernelab.errors import KernelabError  # noqa: E402
from kernelab.harness.check import check_implementation  # noqa: E402

# primes, one row, one column, a row past a power of two, a row stride that is not the width
SHAPES = [
    {"rows": 1, "cols": 1},
    {"rows": 1, "cols": 1031},
    {"rows": 7, "cols": 127},
    {"rows": 3, "cols": 2053},
    {"rows": 5, "cols": 100, "stride": 131},
]


@pytest.fixture(scope="module")
def teaching():
    return kernel_module("softmax.teaching")


@pytest.mark.parametrize("dtype", ["fp32", "bf16", "fp16"])
@pytest.mark.parametrize("shape", SHAPES, ids=shape_id)
def test_teaching_softmax_matches_the_reference(teaching, shape, dtype):
    assert_matches_reference(teaching.softmax, "softmax", shape, dtype)


def test_teaching_softmax_is_the_registered_implementation(teaching):
    from kernelab.spec.registry import get

    impl = get("triton.softmax.teaching")
    assert impl.op == "softmax" and impl.build() is teaching.softmax


def test_a_row_of_only_minus_inf_is_nan_and_the_others_are_not(teaching):
    x = torch.randn(3, 37, device=DEVICE)
    x[1] = -float("inf")
    x[2, :5] = -float("inf")  # some -inf entries: probability 0
    out = teaching.softmax(x)
    assert out[1].isnan().all()
    assert not out[[0, 2]].isnan().any()
    assert (out[2, :5] == 0).all()
    torch.testing.assert_close(out[[0, 2]], torch.softmax(x[[0, 2]], dim=-1))


def test_huge_logits_do_not_overflow(teaching):
    x = torch.randn(4, 200, device=DEVICE) * 1e4
    out = teaching.softmax(x)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out.sum(dim=-1), torch.ones(4, device=DEVICE))


def test_the_check_rejects_the_kernel_if_it_wrote_nan(teaching):
    def poisoned(x):
        out = teaching.softmax(x)
        out[0, 0] = float("nan")
        return out

    report = check_implementation(poisoned, "softmax", {"rows": 2, "cols": 31}, "fp32",
                                  trials=1, device=DEVICE)  # fmt: skip
    assert not report.ok


def test_rows_past_the_register_budget_are_refused_in_one_line(teaching):
    with pytest.raises(KernelabError, match=f"at most {teaching.MAX_COLS} columns"):
        teaching.softmax(torch.zeros(1, teaching.MAX_COLS + 1, device=DEVICE))
