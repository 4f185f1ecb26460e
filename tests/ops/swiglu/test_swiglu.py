"""The fused SwiGLU activation (ops/swiglu): against the float64 reference at awkward shapes
in every dtype (CPU interpreter), the halves of a fused gate_up without a copy, extreme gates,
bad input; on a GPU (marked gpu) Llama-3-8B's intermediate size."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
from triton_on_cpu import DEVICE, assert_matches_reference, kernel_module, shape_id  # noqa: E402

pytest.importorskip("triton")

from kernelab.errors import KernelabError  # noqa: E402

SHAPES = [{"rows": 1, "cols": 1}, {"rows": 1, "cols": 1031}, {"rows": 7, "cols": 33}]


@pytest.fixture(scope="module")
def swiglu():
    return kernel_module("swiglu")


@pytest.mark.parametrize("dtype", ["fp32", "bf16", "fp16"])
@pytest.mark.parametrize("shape", SHAPES, ids=shape_id)
def test_swiglu_matches_the_reference(swiglu, shape, dtype):
    assert_matches_reference(swiglu.swiglu, "swiglu", shape, dtype)


def test_the_halves_of_gate_up_need_no_copy(swiglu):
    gate_up = torch.randn(3, 2 * 40, device=DEVICE)
    gate, up = gate_up[:, :40], gate_up[:, 40:]
    expected = torch.nn.functional.silu(gate) * up
    torch.testing.assert_close(swiglu.swiglu(gate, up), expected)


# exp(1000) overflows to inf on purpose (sigmoid -> 0); the interpreter's numpy says so
@pytest.mark.filterwarnings("ignore:overflow encountered in exp:RuntimeWarning")
def test_extreme_gates_saturate_without_nan(swiglu):
    gate = torch.tensor([[-1000.0, -90.0, 0.0, 90.0, 1000.0]], device=DEVICE)
    out = swiglu.swiglu(gate, torch.ones_like(gate))
    assert out.isfinite().all()
    torch.testing.assert_close(out, torch.nn.functional.silu(gate))


@pytest.mark.parametrize("case", ["shape", "mixed", "fp64", "int"])
def test_bad_input_is_refused_in_one_line(swiglu, case):
    gate, up = torch.zeros(2, 8, device=DEVICE), torch.zeros(2, 8, device=DEVICE)
    if case == "shape":
        up = up[:, :7]
    elif case == "mixed":
        up = up.half()
    elif case == "fp64":
        gate, up = gate.double(), up.double()
    else:
        gate, up = gate.int(), up.int()
    with pytest.raises(KernelabError) as raised:
        swiglu.swiglu(gate, up)
    assert str(raised.value).strip() and "\n" not in str(raised.value)


def test_empty_and_registered(swiglu):
    from kernelab.spec.registry import get

    empty = torch.empty(0, 8, device=DEVICE)
    assert swiglu.swiglu(empty, empty).shape == (0, 8)
    assert get("triton.swiglu").build() is swiglu.swiglu


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
@pytest.mark.parametrize("rows", [1, 16, 64])
def test_gpu_swiglu_at_llama_intermediate_size(swiglu, rows, dtype):
    assert_matches_reference(swiglu.swiglu, "swiglu", {"rows": rows, "cols": 14336}, dtype)
