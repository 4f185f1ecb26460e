"""RMSNorm backward (stack(dx, dweight)) against the float64 reference: the single pass and
the long-row path on the CPU interpreter at awkward shapes, with one and several programs
sharing dweight's partials; full sizes of 1K-256K columns on a GPU; known-wrong kernels."""

from __future__ import annotations

import functools

import pytest

torch = pytest.importorskip("torch")
from triton_on_cpu import DEVICE, assert_matches_reference, kernel_module  # noqa: E402

pytest.importorskip("triton")

from kernelab.harness.check import check_implementation  # noqa: E402
from kernelab.spec.reference import OPS  # noqa: E402


@pytest.fixture(scope="module")
def backward():
    return kernel_module("norms.backward")


OP = "rmsnorm_backward"
SHAPES = [
    {"rows": 1, "cols": 1},
    {"rows": 1, "cols": 13},
    {"rows": 3, "cols": 127},
    {"rows": 19, "cols": 64},
    {"rows": 5, "cols": 131, "stride": 140},
]


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", ["fp32", "bf16", "fp16"])
def test_single_pass(backward, shape, dtype):
    assert_matches_reference(backward.rmsnorm_backward, OP, shape, dtype)


@pytest.mark.parametrize("programs", [1, 3])
@pytest.mark.parametrize("shape", SHAPES[1:], ids=str)
def test_long_row_path_at_small_size(backward, shape, programs):
    # a limit of 16 columns sends every row through the statistics + (rows, chunk) kernels
    fn = functools.partial(backward.rmsnorm_backward, single_pass_max_cols=16, programs=programs)
    assert_matches_reference(fn, OP, shape, "fp32")
    assert_matches_reference(fn, OP, shape, "bf16")


@pytest.mark.parametrize("programs", [1, 2, 7, 64])
def test_dweight_partials_sum_over_every_row_whatever_the_program_count(backward, programs):
    fn = functools.partial(backward.rmsnorm_backward, programs=programs)
    assert_matches_reference(fn, OP, {"rows": 23, "cols": 40}, "fp32")


def test_dweight_is_the_same_on_every_run(backward):
    x, w, dy, eps = OPS[OP].make_inputs({"rows": 33, "cols": 70}, "fp32", 4, device=DEVICE)
    first = backward.rmsnorm_backward(x, w, dy, eps, programs=5)
    assert torch.equal(first, backward.rmsnorm_backward(x, w, dy, eps, programs=5))


def test_the_checker_rejects_a_kernel_that_forgets_dweight(backward):
    def dx_only(x, weight, dy, eps):
        out = backward.rmsnorm_backward(x, weight, dy, eps)
        out[-1] = 0.0
        return out

    report = check_implementation(dx_only, OP, {"rows": 16, "cols": 33}, "fp32", trials=1,
                                  device=DEVICE)  # fmt: skip
    assert not report.ok


@pytest.mark.parametrize(
    "x_shape, w_cols, dy_shape, dtypes, match",
    [
        ((3, 5), 5, (3, 6), (torch.float32,) * 3, "needs x and dy"),
        ((3, 5), 4, (3, 5), (torch.float32,) * 3, "needs x and dy"),
        ((3, 5), 5, (3, 5), (torch.float64,) * 3, "supports fp32"),
        ((3, 5), 5, (3, 5), (torch.float32, torch.bfloat16, torch.float32), "supports fp32"),
    ],
)
def test_bad_input_is_one_line(backward, x_shape, w_cols, dy_shape, dtypes, match):
    x = torch.rand(x_shape, dtype=dtypes[0], device=DEVICE)
    w = torch.rand(w_cols, dtype=dtypes[1], device=DEVICE)
    dy = torch.rand(dy_shape, dtype=dtypes[2], device=DEVICE)
    with pytest.raises(ValueError, match=match) as raised:
        backward.rmsnorm_backward(x, w, dy)
    assert "\n" not in str(raised.value)


@pytest.mark.gpu
@pytest.mark.parametrize("cols", [1024, 4096, 8192, 16384, 16385, 65536, 262144])
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_gpu_full_size(backward, cols, dtype):
    rows = max(1, (64 << 20) // (4 * cols))
    assert_matches_reference(backward.rmsnorm_backward, OP, {"rows": rows, "cols": cols}, dtype,
                             trials=2)  # fmt: skip


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [{"rows": 1, "cols": 262144}, {"rows": 37, "cols": 100_003},
                                   {"rows": 4099, "cols": 4096, "stride": 4160},
                                   {"rows": 65537, "cols": 1024}], ids=str)  # fmt: skip
def test_gpu_awkward_shapes(backward, shape):
    assert_matches_reference(backward.rmsnorm_backward, OP, shape, "bf16", trials=2)


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", ["fp32", "bf16", "fp16"])
def test_the_teaching_kernel(shape, dtype):
    teaching = kernel_module("norms.backward_teaching")
    assert_matches_reference(teaching.rmsnorm_backward, OP, shape, dtype)
    with pytest.raises(ValueError, match="at most 8192 columns"):
        x = torch.ones(1, 8193, device=DEVICE)
        teaching.rmsnorm_backward(x, torch.ones(8193, device=DEVICE), x)
