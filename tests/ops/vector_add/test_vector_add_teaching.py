"""The teaching vector add (ops/vector_add/teaching.py): right at sizes around its block in
every dtype, and registered so that `kernelab bench` times it."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
from triton_on_cpu import DEVICE, assert_matches_reference, kernel_module  # noqa: E402

pytest.importorskip("triton")

from kernelab.errors import KernelabError  # noqa: E402


@pytest.fixture(scope="module")
def teaching():
    return kernel_module("vector_add.teaching")


# one element, a prime, one block, one past it, several blocks and a tail
@pytest.mark.parametrize("n", [1, 7, 1024, 1025, 4099])
@pytest.mark.parametrize("dtype", ["fp32", "bf16", "fp16"])
def test_teaching_vector_add_matches_the_reference(teaching, n, dtype):
    assert_matches_reference(teaching.vector_add, "vector_add", {"n": n}, dtype)


def test_teaching_vector_add_is_the_registered_implementation(teaching):
    from kernelab.spec.registry import get

    assert get("triton.vector_add.teaching").build() is teaching.vector_add


def test_an_empty_input_gives_an_empty_output(teaching):
    x = torch.empty(0, device=DEVICE)
    assert teaching.vector_add(x, x).shape == (0,)


def test_mismatched_inputs_are_refused_in_one_line(teaching):
    with pytest.raises(KernelabError, match="equal shapes"):
        teaching.vector_add(torch.zeros(3, device=DEVICE), torch.zeros(4, device=DEVICE))
