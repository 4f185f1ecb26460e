"""Residual add + RMSNorm (ops/fused_norm): h and y against the float64 reference at awkward
shapes in every dtype (CPU interpreter), the pair form, bad input; on a GPU (marked gpu) the
hidden sizes of decode."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
from triton_on_cpu import DEVICE, assert_matches_reference, kernel_module, shape_id  # noqa: E402

pytest.importorskip("triton")

from kernelab.errors import KernelabError  # noqa: E402

SHAPES = [{"rows": 1, "cols": 1}, {"rows": 1, "cols": 1031}, {"rows": 7, "cols": 127}]


@pytest.fixture(scope="module")
def fused():
    return kernel_module("fused_norm")


@pytest.mark.parametrize("dtype", ["fp32", "bf16", "fp16"])
@pytest.mark.parametrize("shape", SHAPES, ids=shape_id)
def test_add_rmsnorm_matches_the_reference(fused, shape, dtype):
    assert_matches_reference(fused.add_rmsnorm_stacked, "add_rmsnorm", shape, dtype)


def test_the_pair_is_h_and_the_norm_of_h(fused):
    from kernelab.spec.reference import OPS

    x, residual, weight, eps = OPS["add_rmsnorm"].make_inputs({"rows": 3, "cols": 40}, "fp32",
                                                              seed=1, device=DEVICE)  # fmt: skip
    h, y = fused.add_rmsnorm(x, residual, weight, eps)
    torch.testing.assert_close(h, x + residual)
    expected = torch.nn.functional.rms_norm(x + residual, (40,), weight, eps)
    torch.testing.assert_close(y, expected, rtol=1e-5, atol=1e-6)


def test_leading_dimensions_and_strided_rows_are_taken(fused):
    x = torch.randn(2, 3, 16, device=DEVICE)
    r = torch.randn(2, 3, 16, device=DEVICE)
    w = torch.randn(16, device=DEVICE)
    h, y = fused.add_rmsnorm(x, r, w)
    assert h.shape == y.shape == (2, 3, 16)
    wide = torch.randn(6, 32, device=DEVICE)
    h2, _ = fused.add_rmsnorm(wide[:, :16], r.reshape(6, 16), w)
    torch.testing.assert_close(h2, wide[:, :16] + r.reshape(6, 16))


def test_nan_in_a_row_stays_in_that_row_and_empty_input_is_empty(fused):
    x, r = torch.randn(3, 8, device=DEVICE), torch.randn(3, 8, device=DEVICE)
    w = torch.ones(8, device=DEVICE)
    x[1, 2] = float("inf")
    h, y = fused.add_rmsnorm(x, r, w)
    assert y[1].isnan().any() and y[[0, 2]].isfinite().all()
    h, y = fused.add_rmsnorm(x[:0], r[:0], w)
    assert h.shape == (0, 8) and y.shape == (0, 8)


@pytest.mark.parametrize("case", ["shape", "weight", "dtype", "fp64"])
def test_bad_input_is_refused_in_one_line(fused, case):
    x, r, w = torch.zeros(2, 8, device=DEVICE), torch.zeros(2, 8, device=DEVICE), torch.ones(8)
    w = w.to(DEVICE)
    if case == "shape":
        r = r[:1]
    elif case == "weight":
        w = w[:7]
    elif case == "dtype":
        r = r.half()
    else:
        x, r, w = x.double(), r.double(), w.double()
    with pytest.raises(KernelabError) as raised:
        fused.add_rmsnorm(x, r, w)
    assert str(raised.value).strip() and "\n" not in str(raised.value)


def test_registered(fused):
    from kernelab.spec.registry import get

    assert get("triton.add_rmsnorm").build() is fused.add_rmsnorm_stacked
    assert get("torch.add_rmsnorm").is_baseline


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp32"])
@pytest.mark.parametrize("rows", [1, 16, 64])
@pytest.mark.parametrize("cols", [4096, 8192, 16384])
def test_gpu_add_rmsnorm_at_decode_hidden_sizes(fused, rows, cols, dtype):
    assert_matches_reference(fused.add_rmsnorm_stacked, "add_rmsnorm",
                             {"rows": rows, "cols": cols}, dtype)  # fmt: skip
