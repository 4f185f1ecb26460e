"""The teaching LayerNorm and RMSNorm (ops/norms/teaching.py): right at awkward shapes in
every dtype, and registered so that `kernelab bench` times them."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
from triton_on_cpu import DEVICE, assert_matches_reference, kernel_module, shape_id  # noqa: E402

pytest.importorskip("triton")

from kernelab.errors import KernelabError  # noqa: E402

SHAPES = [
    {"rows": 1, "cols": 1},
    {"rows": 1, "cols": 1031},
    {"rows": 7, "cols": 127},
    {"rows": 3, "cols": 257, "stride": 263},
]


@pytest.fixture(scope="module")
def teaching():
    return kernel_module("norms.teaching")


@pytest.mark.parametrize("dtype", ["fp32", "bf16", "fp16"])
@pytest.mark.parametrize("shape", SHAPES, ids=shape_id)
@pytest.mark.parametrize("op", ["layernorm", "rmsnorm"])
def test_teaching_norm_matches_the_reference(teaching, op, shape, dtype):
    assert_matches_reference(getattr(teaching, op), op, shape, dtype)


@pytest.mark.parametrize("op", ["layernorm", "rmsnorm"])
def test_teaching_norm_is_the_registered_implementation(teaching, op):
    from kernelab.spec.registry import get

    impl = get(f"triton.{op}.teaching")
    assert impl.op == op and impl.build() is getattr(teaching, op)


def test_layernorm_without_bias_is_the_reference_without_bias(teaching):
    x, w = torch.randn(3, 37, device=DEVICE), torch.randn(37, device=DEVICE)
    expected = torch.nn.functional.layer_norm(x, (37,), w, None, 1e-5)
    torch.testing.assert_close(teaching.layernorm(x, w), expected)


def test_a_constant_row_normalizes_to_the_bias_not_nan(teaching):
    x = torch.full((2, 33), 3.0, device=DEVICE)
    w, b = torch.ones(33, device=DEVICE), torch.arange(33.0, device=DEVICE)
    torch.testing.assert_close(teaching.layernorm(x, w, b), b.expand(2, 33))


def test_a_weight_of_the_wrong_length_is_refused_in_one_line(teaching):
    with pytest.raises(KernelabError, match="weight"):
        teaching.rmsnorm(torch.zeros(2, 8, device=DEVICE), torch.ones(7, device=DEVICE))
