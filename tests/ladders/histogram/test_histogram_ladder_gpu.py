"""The histogram ladder on a GPU: every step's counts exact over sizes, bin counts, value
types, uniform and skewed data and out-of-range ids. The targets are measured by
benchmarks/primitives_ladders.py, not here."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from kernelab.ladders.histogram import STEPS, histogram  # noqa: E402
from kernelab.ladders.histogram.ladder import make_values  # noqa: E402
from kernelab.spec.primitives import histogram_counts  # noqa: E402
from kernelab.spec.reference import get_op  # noqa: E402

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("dtype", ["int32", "uint8"])
@pytest.mark.parametrize("step", STEPS, ids=lambda s: s.name)
def test_step_counts_exactly(step, dtype):
    for n in (1, 7, 31, 33, 100003, 1 << 22):
        for bins in (1, 8, 64, 256, 4096):
            for distribution in ("uniform", "skewed"):
                values = make_values(n, bins, dtype, distribution, seed=n)
                got = histogram(step, values, bins)
                assert torch.equal(got, histogram_counts(values, bins)), (n, bins, distribution)
            values, _ = get_op("histogram").make_inputs(
                {"n": n, "bins": bins}, dtype, seed=3, device="cuda"
            )
            assert torch.equal(histogram(step, values, bins), histogram_counts(values, bins))


@pytest.mark.parametrize("step", STEPS, ids=lambda s: s.name)
def test_strided_multidimensional_and_empty_inputs(step):
    values = torch.randint(0, 8, (64, 9), device="cuda", dtype=torch.int32)
    assert torch.equal(histogram(step, values[:, ::2], 8), histogram_counts(values[:, ::2], 8))
    empty = histogram(step, torch.empty(0, dtype=torch.uint8, device="cuda"), 8)
    assert empty.tolist() == [0] * 9


@pytest.mark.parametrize("step", STEPS, ids=lambda s: s.name)
def test_more_than_2_to_the_32_in_one_bin_does_not_wrap(step):
    """Counts are 64-bit: 2^32 + 5 ones (4 GiB of uint8) land exactly."""
    free, _ = torch.cuda.mem_get_info()
    if free < (5 << 30):
        pytest.skip("needs 5 GiB of free GPU memory")
    n = (1 << 32) + 5
    values = torch.ones(n, dtype=torch.uint8, device="cuda")
    counts = histogram(step, values, 4)
    assert counts.tolist() == [0, n, 0, 0, 0]
