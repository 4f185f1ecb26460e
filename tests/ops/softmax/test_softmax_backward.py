"""Softmax backward against the float64 reference: the single pass and the split path on the
CPU interpreter at awkward shapes (1 row, prime columns, NaN-padded strided rows), full sizes
of 1K-256K columns on a GPU, and a known-wrong kernel the checker must reject."""

from __future__ import annotations

import functools

import pytest

torch = pytest.importorskip("torch")
from triton_on_cpu import DEVICE, assert_matches_reference, kernel_module  # noqa: E402

pytest.importorskip("triton")

from kernelab.harness.check import check_implementation  # noqa: E402


@pytest.fixture(scope="module")
def backward():
    return kernel_module("softmax.backward")


OP = "softmax_backward"
SHAPES = [
    {"rows": 1, "cols": 1},
    {"rows": 1, "cols": 13},
    {"rows": 3, "cols": 127},
    {"rows": 9, "cols": 64},
    {"rows": 3, "cols": 131, "stride": 140},
]


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", ["fp32", "bf16", "fp16"])
def test_single_pass(backward, shape, dtype):
    assert_matches_reference(backward.softmax_backward, OP, shape, dtype)


@pytest.mark.parametrize("shape", SHAPES[1:], ids=str)
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_split_path_at_small_size(backward, shape, dtype):
    # a limit of 16 columns sends every row through the (row, chunk) grid, 16-column chunks
    fn = functools.partial(backward.softmax_backward, single_pass_max_cols=16)
    assert_matches_reference(fn, OP, shape, dtype)


def test_both_paths_agree_and_do_not_touch_their_inputs(backward):
    y, dy = (
        torch.softmax(torch.randn(5, 77, device=DEVICE) * 3, -1),
        torch.randn(5, 77, device=DEVICE),
    )
    kept = (y.clone(), dy.clone())
    one = backward.softmax_backward(y, dy)
    split = backward.softmax_backward(y, dy, single_pass_max_cols=16)
    torch.testing.assert_close(one, split, rtol=1e-5, atol=1e-7)
    assert torch.equal(y, kept[0]) and torch.equal(dy, kept[1])


def test_the_checker_rejects_a_kernel_that_forgets_the_dot_product(backward):
    def wrong(y, dy):
        return y * dy

    report = check_implementation(wrong, OP, {"rows": 4, "cols": 33}, "fp32", trials=1,
                                  device=DEVICE)  # fmt: skip
    assert not report.ok


@pytest.mark.parametrize(
    "y_shape, dy_shape, dtypes, match",
    [
        ((3, 5), (3, 6), (torch.float32, torch.float32), "one shape"),
        ((15,), (15,), (torch.float32, torch.float32), "one shape"),
        ((3, 5), (3, 5), (torch.float64, torch.float64), "supports fp32"),
        ((3, 5), (3, 5), (torch.float32, torch.bfloat16), "supports fp32"),
    ],
)
def test_bad_input_is_one_line(backward, y_shape, dy_shape, dtypes, match):
    y = torch.rand(y_shape, dtype=dtypes[0], device=DEVICE)
    dy = torch.rand(dy_shape, dtype=dtypes[1], device=DEVICE)
    with pytest.raises(ValueError, match=match) as raised:
        backward.softmax_backward(y, dy)
    assert "\n" not in str(raised.value)


@pytest.mark.gpu
@pytest.mark.parametrize("cols", [1024, 4096, 16384, 16385, 65536, 262144])
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_gpu_full_size(backward, cols, dtype):
    rows = max(1, (64 << 20) // (4 * cols))
    assert_matches_reference(backward.softmax_backward, OP, {"rows": rows, "cols": cols}, dtype,
                             trials=2)  # fmt: skip


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [{"rows": 1, "cols": 262144}, {"rows": 37, "cols": 100_003},
                                   {"rows": 1000, "cols": 4099, "stride": 4160}], ids=str)  # fmt: skip
def test_gpu_awkward_shapes(backward, shape):
    assert_matches_reference(backward.softmax_backward, OP, shape, "bf16", trials=2)


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", ["fp32", "bf16", "fp16"])
def test_the_teaching_kernel(shape, dtype):
    teaching = kernel_module("softmax.backward_teaching")
    assert_matches_reference(teaching.softmax_backward, OP, shape, dtype)
    with pytest.raises(ValueError, match="at most 16384 columns"):
        teaching.softmax_backward(*(torch.zeros(1, 16385, device=DEVICE) for _ in range(2)))
