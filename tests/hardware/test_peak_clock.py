"""The clock each peak rate is quoted at: sourced, and giving each SM its hardware rate."""

from __future__ import annotations

import dataclasses

import pytest

from kernelab.hardware import get_gpu
from kernelab.hardware.catalog import CATALOG, SOURCES
from kernelab.hardware.specs import GPUSpec

WITH_CLOCKS = [spec for spec in CATALOG.values() if spec.peak_clock_mhz]


def test_the_hopper_cards_carry_their_tensor_clock():
    ids = {spec.id for spec in WITH_CLOCKS}
    assert {"h100-sxm", "h100-pcie", "h200", "gh200"} <= ids


@pytest.mark.parametrize("spec", WITH_CLOCKS, ids=lambda s: s.id)
def test_every_peak_clock_is_sourced_and_below_boost(spec):
    for dtype, mhz in spec.peak_clock_mhz.items():
        source = spec.source_of(f"peak_clock_mhz.{dtype}")
        assert source.partition(" (")[0] in SOURCES, (spec.id, dtype, source)
        assert 0 < mhz <= spec.boost_clock_mhz


@pytest.mark.parametrize(
    ("gpu_id", "clock"), [("h100-sxm", 1830), ("h200", 1830), ("h100-pcie", 1620)]
)
def test_hopper_tensor_peaks_come_out_at_4096_bf16_flop_per_sm_cycle(gpu_id, clock):
    spec = get_gpu(gpu_id)
    assert spec.rate_clock_mhz("bf16") == clock
    assert spec.flops_per_sm_per_cycle("bf16") == pytest.approx(4096, rel=1e-3)
    assert spec.flops_per_sm_per_cycle("fp8") == pytest.approx(8192, rel=1e-3)
    assert spec.flops_per_sm_per_cycle("tf32") == pytest.approx(2048, rel=1e-3)
    # fp32 and fp64 are quoted at the boost clock: 128 FP32 lanes x 2 FLOP per FMA.
    assert spec.rate_clock_mhz("fp32") == spec.boost_clock_mhz


def test_a_clock_for_a_dtype_without_a_peak_is_refused():
    h100 = get_gpu("h100-sxm")
    with pytest.raises(ValueError, match="without a peak"):
        dataclasses.replace(h100, peak_clock_mhz={"fp4": 1000.0})
    assert isinstance(dataclasses.replace(h100, peak_clock_mhz={}), GPUSpec)
