"""kernelab.evaluate.observed: the judge's floor under a worker's reported times."""

from __future__ import annotations

import pytest

from kernelab.evaluate import observed


def test_the_floor_discounts_overheads_and_noise():
    # 1000 ms seen for 100 calls; the loop's own steps cost 100 ms.
    floor = observed.floor_ms(1000.0, 100, loop_ms=100.0)
    spare = observed.WALL_SHARE * 1000.0 - observed.OVERHEAD_MARGIN * 100.0 - observed.SLACK_MS
    assert floor == pytest.approx(spare / 100)
    assert 0 < floor < 10.0  # below the 10 ms per call the judge saw, never above
    assert observed.floor_ms(10.0, 100, loop_ms=50.0) == 0.0


def test_honest_samples_stand():
    samples = [1.0, 1.1, 0.9]
    kept, warning = observed.bound(samples, floor=0.8)
    assert kept == samples and warning is None


def test_under_reported_samples_are_scaled_to_the_floor():
    kept, warning = observed.bound([0.9, 1.0, 1.1] * 10, floor=1.2)  # noise, not a lie
    assert sum(kept) / len(kept) == pytest.approx(1.2)
    assert "the judge observed at least 1.2 ms" in warning
    assert "tampered" not in warning
    kept, warning = observed.bound([0.01] * 30, floor=5.0)  # 150 ms unexplained
    assert sum(kept) / len(kept) == pytest.approx(5.0)
    assert "tampered with" in warning
