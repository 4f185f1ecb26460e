"""The statistics of timing samples and the rule that ends a measurement."""

from __future__ import annotations

import math

import pytest

from kernelab.harness.stats import (
    Summary,
    quantile,
    relative_standard_error,
    should_stop,
    summarize,
)


def test_summary_of_known_samples():
    s = summarize([5.0, 1.0, 4.0, 2.0, 3.0])
    assert s.n == 5
    assert s.median == 3.0
    assert s.mean == 3.0
    assert s.min == 1.0 and s.max == 5.0
    assert s.std == pytest.approx(math.sqrt(2.5))  # sample std: sum of squares 10 / (n - 1)
    # Linear interpolation between ranks 0..4: q=0.2 -> rank 0.8, q=0.25 -> rank 1.
    assert s.p20 == pytest.approx(1.8)
    assert s.p80 == pytest.approx(4.2)
    assert s.iqr == pytest.approx(2.0)  # 4 - 2
    assert s.rel_noise == pytest.approx(2.0 / 3.0)
    assert s.rse == pytest.approx(math.sqrt(2.5) / math.sqrt(5) / 3.0)


def test_quantile_matches_numpy_default():
    np = pytest.importorskip("numpy")
    data = sorted([0.31, 0.29, 0.5, 0.3, 0.33, 0.28, 0.41])
    for q in (0.0, 0.2, 0.25, 0.5, 0.75, 0.8, 1.0):
        assert quantile(data, q) == pytest.approx(float(np.quantile(data, q)))


def test_one_slow_call_moves_neither_median_nor_noise():
    steady = [1.0, 1.01, 0.99, 1.0, 1.02, 0.98, 1.0, 1.01, 0.99, 1.0]
    spiked = [*steady[:-1], 50.0]
    assert summarize(spiked).median == pytest.approx(summarize(steady).median, rel=0.01)
    assert summarize(spiked).rel_noise < 0.05
    assert summarize(spiked).rse > 10 * summarize(steady).rse  # the mean's error does move


def test_single_sample_and_constant_samples():
    one = summarize([2.5])
    assert one.median == 2.5 and one.std == 0.0 and one.iqr == 0.0 and math.isinf(one.rse)
    flat = summarize([1.0] * 8)
    assert flat.rse == 0.0 and flat.rel_noise == 0.0


def test_summarize_refuses_no_samples():
    with pytest.raises(ValueError):
        summarize([])


def test_relative_standard_error():
    assert relative_standard_error([1.0, 3.0]) == pytest.approx(math.sqrt(2) / math.sqrt(2) / 2.0)
    assert math.isinf(relative_standard_error([1.0]))


def test_summary_round_trips_through_dict():
    s = summarize([1.0, 2.0, 4.0])
    assert Summary.from_dict(s.to_dict()) == s


STOP = dict(min_samples=10, target_rse=0.005, max_time_s=2.0, max_samples=1000)


def test_never_stops_below_min_samples_even_past_the_time_cap():
    assert should_stop([1.0] * 9, elapsed_s=100.0, **STOP) == (False, "below min_samples")


def test_stops_at_min_samples_when_the_noise_is_tiny():
    assert should_stop([1.0] * 10, elapsed_s=0.01, **STOP) == (True, "converged")


def test_noisy_samples_run_on_until_the_time_cap():
    noisy = [1.0, 2.0] * 10
    assert should_stop(noisy, elapsed_s=0.5, **STOP) == (False, "running")
    assert should_stop(noisy, elapsed_s=2.0, **STOP) == (True, "time cap")


def test_sample_cap():
    noisy = [1.0, 2.0] * 500
    assert should_stop(noisy, elapsed_s=0.0, **STOP) == (True, "max_samples")
