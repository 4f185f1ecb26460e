"""Paired timing (kernelab.harness.paired): the order of calls, the median's interval, the
ratio it reports; on a GPU, that it tells equal work from double work."""

from __future__ import annotations

import math
import random

import pytest

from kernelab.errors import KernelabError, NoGPUError
from kernelab.harness import paired
from kernelab.harness.paired import PairedTiming, call_order, median_rank_interval


def test_calls_alternate_which_goes_first():
    orders = [call_order(i) for i in range(4)]
    assert orders == [
        ("reference", "candidate"),
        ("candidate", "reference"),
        ("reference", "candidate"),
        ("candidate", "reference"),
    ]


def _binomial_below(n: int, k: int) -> float:
    return sum(math.comb(n, i) for i in range(k)) / 2**n


@pytest.mark.parametrize("n", [6, 7, 10, 25, 50, 99, 200, 1000])
def test_median_interval_has_its_coverage_and_no_more_width_than_needed(n):
    low, high = median_rank_interval(n)
    assert high == n - 1 - low  # symmetric ranks
    k = low + 1  # 1-based rank of the lower end
    coverage = 1 - 2 * _binomial_below(n, k)
    assert coverage >= 0.95
    # one rank narrower would fall below 95 %
    assert 1 - 2 * _binomial_below(n, k + 1) < 0.95


def test_median_interval_of_few_samples_is_the_whole_range():
    assert median_rank_interval(1) == (0, 0)
    assert median_rank_interval(5) == (0, 4)
    with pytest.raises(ValueError):
        median_rank_interval(0)


def test_known_textbook_ranks():
    # n = 10: the 2nd and 9th order statistics (1-based) give 97.9 % coverage
    assert median_rank_interval(10) == (1, 8)
    # n = 100: the 40th and 61st
    assert median_rank_interval(100) == (39, 60)


def test_ratio_is_per_pair_so_a_common_drift_cancels():
    rng = random.Random(3)
    # the card slows by 20 % over the run; the candidate is 2 % faster in every pair
    drift = [1.0 + 0.2 * i / 199 for i in range(200)]
    noise = [1.0 + rng.uniform(-0.003, 0.003) for _ in range(200)]
    reference = [1.0 * d for d in drift]
    candidate = [0.98 * d * e for d, e in zip(drift, noise, strict=True)]
    result = PairedTiming(reference, candidate, mode="cold", stop_reason="pairs")
    assert result.pct_of_reference == pytest.approx(100 / 0.98, rel=0.004)
    low, high = result.pct_interval()
    assert low <= result.pct_of_reference <= high
    assert high - low < 0.5
    # the two medians taken apart would carry the drift's spread into their ratio; the
    # pairs do not: every pair says the candidate won
    assert result.to_dict()["pairs_ahead"] == 200


def test_a_slower_candidate_is_below_100_percent():
    result = PairedTiming([1.0, 1.0, 1.0], [2.0, 2.0, 2.0], mode="hot", stop_reason="pairs")
    assert result.pct_of_reference == pytest.approx(50.0)
    assert result.to_dict()["pairs_ahead"] == 0


def test_reference_median_is_of_the_reference_calls_in_any_order():
    result = PairedTiming([3.0, 1.0, 2.0, 9.0], [1.0] * 4, mode="cold", stop_reason="pairs")
    assert result.reference_median_ms == pytest.approx(2.5)  # not the candidate's 1.0


def test_bad_arguments_are_one_line_errors():
    with pytest.raises(KernelabError):
        paired.compare(lambda: None, lambda: None, mode="graph")
    with pytest.raises(KernelabError):
        paired.compare(lambda: None, lambda: None, pairs=0)


def test_no_gpu_is_a_one_line_error():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    with pytest.raises(NoGPUError):
        paired.compare(lambda: None, lambda: None)


@pytest.mark.gpu
@pytest.mark.parametrize("mode", ["cold", "hot"])
def test_gpu_same_work_is_100_percent_and_double_work_is_50(mode):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    once = lambda: a @ a  # noqa: E731
    twice = lambda: (a @ a, a @ a)  # noqa: E731
    same = paired.compare(once, once, mode=mode, pairs=100)
    assert same.pct_of_reference == pytest.approx(100.0, abs=2.0)
    low, high = same.pct_interval()
    assert low <= 100.0 <= high or abs(same.pct_of_reference - 100.0) < 1.0
    double = paired.compare(once, twice, mode=mode, pairs=60)
    assert double.pct_of_reference == pytest.approx(50.0, abs=3.0)
    assert len(double.reference_ms) == 60 and all(t > 0 for t in double.candidate_ms)
