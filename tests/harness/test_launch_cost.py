"""The launch lens: host and wall time per call, and the launch-bound verdict."""

from __future__ import annotations

import pytest

from kernelab.harness.launch_cost import (
    CALLS_MAX,
    CALLS_MIN,
    calls_for,
    is_launch_bound,
    measure_host_cost,
)


class FakeClock:
    """A host clock that each call advances by `host_us` and each synchronise by the device
    time still queued: a GPU that runs calls back to back behind the host."""

    def __init__(self, host_us: float, device_us: float):
        self.now = 0.0
        self.host_us, self.device_us = host_us, device_us
        self.gpu_free_at = 0.0

    def call(self):
        self.now += self.host_us * 1e-6
        self.gpu_free_at = max(self.gpu_free_at, self.now) + self.device_us * 1e-6

    def synchronize(self):
        self.now = max(self.now, self.gpu_free_at)

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize(
    ("host_us", "device_us", "bound"), [(50.0, 5.0, True), (5.0, 500.0, False)]
)
def test_host_and_wall_per_call_and_the_verdict(host_us, device_us, bound):
    clock = FakeClock(host_us, device_us)
    cost = measure_host_cost(
        clock.call, device_us * 1e-3, synchronize=clock.synchronize, clock=clock
    )
    assert cost.host_us == pytest.approx(host_us)
    # back to back, each call takes the longer of the two (plus one device time at the end)
    expected_wall = (max(host_us, device_us) * (cost.calls - 1) + host_us + device_us) / cost.calls
    assert cost.wall_us == pytest.approx(expected_wall, rel=0.02)
    assert cost.launch_bound is bound
    assert cost.to_dict()["launch_bound"] is bound


def test_calls_shrink_for_long_kernels_but_never_below_the_minimum():
    assert calls_for(0.001) == CALLS_MAX
    assert calls_for(2.0) == 100
    assert calls_for(1000.0) == CALLS_MIN


def test_launch_bound_is_host_over_device():
    assert is_launch_bound(10.0, 9.9)
    assert not is_launch_bound(9.9, 10.0)
