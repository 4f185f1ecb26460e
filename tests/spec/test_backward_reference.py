"""The backward ops' specifications: the float64 closed forms against torch autograd of the
forward references, the drawn inputs (y a real distribution, NaN row padding), the eager
baselines within the checker's tolerance, and the byte accounting."""

from __future__ import annotations

import pytest
import torch

from kernelab.harness.check import compare
from kernelab.roofline import costs
from kernelab.spec.dense import reference_rmsnorm
from kernelab.spec.reference import OPS

AWKWARD = [
    {"rows": 1, "cols": 1},
    {"rows": 1, "cols": 13},
    {"rows": 7, "cols": 131},
    {"rows": 5, "cols": 97, "stride": 104},
    {"rows": 257, "cols": 3},
]


def _fresh_seed() -> int:
    return int(torch.randint(0, 2**31 - 1, ()).item())


@pytest.mark.parametrize("shape", AWKWARD, ids=str)
def test_softmax_backward_reference_is_autograd_of_softmax(shape):
    y, dy = OPS["softmax_backward"].make_inputs(shape, "fp64", _fresh_seed())
    # the logits this y came from (up to a per-row constant, which softmax ignores)
    x = y.log().clone().requires_grad_(True)
    torch.softmax(x, dim=-1).backward(dy)
    ref = OPS["softmax_backward"].reference(y, dy)
    torch.testing.assert_close(ref, x.grad, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("shape", AWKWARD, ids=str)
def test_rmsnorm_backward_reference_is_autograd_of_rmsnorm(shape):
    x, weight, dy, eps = OPS["rmsnorm_backward"].make_inputs(shape, "fp64", _fresh_seed())
    x_ = x.clone().requires_grad_(True)
    w_ = weight.clone().requires_grad_(True)
    reference_rmsnorm(x_, w_, eps).backward(dy)
    out = OPS["rmsnorm_backward"].reference(x, weight, dy, eps)
    assert out.shape == (shape["rows"] + 1, shape["cols"])
    torch.testing.assert_close(out[:-1], x_.grad, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(out[-1], w_.grad, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("dtype", ["fp32", "bf16", "fp16"])
def test_softmax_backward_draws_real_distributions(dtype):
    y, dy = OPS["softmax_backward"].make_inputs({"rows": 16, "cols": 257}, dtype, 3)
    assert y.dtype == dy.dtype and (y >= 0).all()
    sums = y.double().sum(dim=-1)
    assert torch.allclose(sums, torch.ones_like(sums), atol=257 * 2.0**-8)
    assert float(y.max()) > 10.0 / 257  # peaked, not flat
    assert float(dy.std()) > 0.5


@pytest.mark.parametrize("op", ["softmax_backward", "rmsnorm_backward"])
def test_strided_inputs_are_views_padded_with_nan(op):
    inputs = OPS[op].make_inputs({"rows": 4, "cols": 13, "stride": 16}, "fp32", 0)
    matrices = [t for t in inputs if isinstance(t, torch.Tensor) and t.dim() == 2]
    assert len(matrices) == 2
    for t in matrices:
        assert t.stride() == (16, 1) and torch.isfinite(t).all()
        buffer = torch.empty(0, dtype=t.dtype).set_(t.untyped_storage())
        assert torch.isnan(buffer.view(4, 16)[:, 13:]).all()
    packed = OPS[op].make_inputs({"rows": 4, "cols": 13}, "fp32", 0)
    for a, b in zip(inputs, packed, strict=True):
        assert torch.equal(a, b) if isinstance(a, torch.Tensor) else a == b


@pytest.mark.parametrize("shape", AWKWARD, ids=str)
@pytest.mark.parametrize("dtype", ["fp32", "bf16", "fp16"])
@pytest.mark.parametrize("op", ["softmax_backward", "rmsnorm_backward"])
def test_eager_baselines_pass_the_checker(op, dtype, shape):
    inputs = OPS[op].make_inputs(shape, dtype, _fresh_seed())
    out = OPS[op].torch_eager(*inputs)
    assert out.dtype == inputs[0].dtype
    result = compare(out, OPS[op].reference(*inputs), dtype=dtype)
    assert result.ok, result.message


def test_the_checker_rejects_known_wrong_gradients():
    y, dy = OPS["softmax_backward"].make_inputs({"rows": 8, "cols": 64}, "fp32", 1)
    no_dot = y.double() * dy.double()  # forgot the row's dot product
    assert not compare(no_dot, OPS["softmax_backward"].reference(y, dy), dtype="fp32").ok
    x, w, dy, eps = OPS["rmsnorm_backward"].make_inputs({"rows": 64, "cols": 32}, "fp32", 1)
    ref = OPS["rmsnorm_backward"].reference(x, w, dy, eps)
    no_dw = ref.clone()
    no_dw[-1] = 0.0  # dx right, dweight forgotten
    assert not compare(no_dw, ref, dtype="fp32").ok
    one_row_dw = ref.clone()
    one_row_dw[-1] = ref[-1] / 64  # dweight averaged instead of summed over the rows
    assert not compare(one_row_dw, ref, dtype="fp32").ok
    dx_as_forward = torch.cat([(w.double() * dy.double()), ref[-1:]])  # no xhat correction
    assert not compare(dx_as_forward, ref, dtype="fp32").ok


def test_backward_costs_count_the_tensors_moved():
    soft = OPS["softmax_backward"].cost({"rows": 4, "cols": 1000, "stride": 1024}, "bf16")
    assert soft.bytes == 3 * 4 * 1000 * 2 and soft.flops == 4 * 4 * 1000
    assert soft == costs.softmax_backward(4, 1000, dtype="bf16")
    norm = OPS["rmsnorm_backward"].cost({"rows": 4, "cols": 1000}, "fp32")
    assert norm.bytes == (3 * 4 * 1000 + 2 * 1000) * 4
    for cost in (soft, norm):
        assert cost.explanation and "\n" not in cost.explanation
        assert cost.intensity < 1.0  # memory-bound on every GPU


def test_the_drawn_rows_keep_a_correct_fp32_gradient_within_the_threshold_on_every_seed():
    # A row drawn too peaked makes dy_i - sum(dy * y) cancel, and then a correct fp32 kernel
    # (torch's own) misses the threshold now and then: at the forward's 3x logits, about 1
    # one-row draw in 300.
    spec = OPS["softmax_backward"]
    for seed in range(2000):
        y, dy = spec.make_inputs({"rows": 1, "cols": 13}, "fp32", seed)
        result = compare(spec.torch_eager(y, dy), spec.reference(y, dy), dtype="fp32")
        assert result.ok, (seed, result.message)


def test_one_column_rmsnorm_rows_keep_a_correct_fp32_gradient_within_the_threshold():
    # |x| of a few sqrt(eps) made dx cancel to eps / rms^3, as large as dweight: the draw
    # keeps x away from zero, so torch's own gradient passes on every seed.
    spec = OPS["rmsnorm_backward"]
    for seed in range(2000):
        inputs = spec.make_inputs({"rows": 1, "cols": 1}, "fp32", seed)
        assert float(inputs[0].abs().min()) >= 0.25
        result = compare(spec.torch_eager(*inputs), spec.reference(*inputs), dtype="fp32")
        assert result.ok, (seed, result.message)
