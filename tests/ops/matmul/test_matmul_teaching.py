"""The teaching matmul (ops/matmul/teaching.py): right at shapes that are not multiples of
its tile, transposed operands included, and registered so that `kernelab bench` times it."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
from triton_on_cpu import DEVICE, assert_matches_reference, kernel_module, shape_id  # noqa: E402

pytest.importorskip("triton")

from kernelab.errors import KernelabError  # noqa: E402

SHAPES = [
    {"m": 1, "n": 1, "k": 1},
    {"m": 17, "n": 33, "k": 65},
    {"m": 131, "n": 7, "k": 67},  # more than one tile of rows, a K tail
]


@pytest.fixture(scope="module")
def teaching():
    return kernel_module("matmul.teaching")


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
@pytest.mark.parametrize("shape", SHAPES, ids=shape_id)
def test_teaching_matmul_matches_the_reference(teaching, shape, dtype):
    assert_matches_reference(teaching.matmul, "gemm", shape, dtype)


def test_teaching_matmul_reads_transposed_operands_through_their_strides(teaching):
    a = torch.randn(40, 19, device=DEVICE, dtype=torch.bfloat16)
    b = torch.randn(23, 40, device=DEVICE, dtype=torch.bfloat16)
    expected = (a.t().double() @ b.t().double()).to(torch.bfloat16)
    torch.testing.assert_close(teaching.matmul(a.t(), b.t()), expected, rtol=2e-2, atol=2e-2)


def test_teaching_matmul_is_the_registered_implementation(teaching):
    from kernelab.spec.registry import get

    assert get("triton.matmul.teaching").build() is teaching.matmul


def test_fp32_inputs_are_refused_in_one_line(teaching):
    with pytest.raises(KernelabError, match="bf16 and fp16"):
        teaching.matmul(torch.zeros(2, 2, device=DEVICE), torch.zeros(2, 2, device=DEVICE))
