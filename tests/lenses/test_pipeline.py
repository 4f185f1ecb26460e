"""Little's law for memory and tensor cores, on hand-worked numbers."""

from __future__ import annotations

import pytest

from kernelab.errors import KernelabError
from kernelab.hardware import get_gpu
from kernelab.lenses import pipeline
from kernelab.lenses.pipeline import (
    bandwidth_from_in_flight,
    bytes_in_flight_needed,
    default_latencies,
    kernel_in_flight,
    memory_latency,
    memory_pipeline,
    stages_to_hide_latency,
    tensor_core_pipeline,
)


@pytest.fixture
def h200():
    return get_gpu("h200")


def test_littles_law_per_sm(h200):
    # 4800 GB/s x 500 ns = 2.4 MB in flight over 132 SMs.
    per_sm = bytes_in_flight_needed(h200, bandwidth_gbps=4800, latency_ns=500)
    assert per_sm == pytest.approx(4800e9 * 500e-9 / 132)
    assert per_sm == pytest.approx(18181.8, rel=1e-4)


def test_defaults_are_the_datasheet_bandwidth_and_a_sourced_latency(h200, tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELAB_CACHE", str(tmp_path))  # no measured hierarchy record here
    monkeypatch.delenv("KERNELAB_HIERARCHY", raising=False)
    latency = memory_latency(h200, "hbm")
    assert latency.cycles == 700
    assert latency.ns == pytest.approx(700 / 1.98)
    assert not latency.measured
    assert "markdewing/AI_kernels" in latency.source
    per_sm = bytes_in_flight_needed(h200)
    assert per_sm == pytest.approx(4800e9 * (700 / 1.98e9) / 132)


def test_l2_latency_is_shorter_than_hbm(h200):
    latencies = default_latencies(h200)
    assert latencies["l2"].ns < latencies["hbm"].ns


def test_kernel_in_flight_counts_stages_loading_ahead():
    assert kernel_in_flight(16384, 3, 2) == 16384 * 2 * 2
    assert kernel_in_flight(16384, 2, 1) == 16384
    assert kernel_in_flight(16384, 1, 1) == 16384  # a synchronous stage: loaded, then used


def test_bandwidth_from_in_flight_inverts_littles_law(h200):
    per_sm = bytes_in_flight_needed(h200, bandwidth_gbps=4800, latency_ns=500)
    assert bandwidth_from_in_flight(h200, per_sm, 500) == pytest.approx(4800e9)


def test_kernel_keeping_half_the_bytes_reaches_half_the_bandwidth(h200):
    need = bytes_in_flight_needed(h200, latency_ns=500)
    result = memory_pipeline(
        h200, latency_ns=500, bytes_per_stage=need / 2, stages=2, blocks_per_sm=1
    )
    assert result.kernel.pct_of_bandwidth == pytest.approx(50.0)
    assert result.kernel.reachable_gbps == pytest.approx(2400.0)
    assert "50% of the bandwidth" in result.summary


def test_reachable_bandwidth_is_capped_at_the_memory(h200):
    # 2 blocks x 4 stages x 16 KiB = 128 KiB fits the SM's 228 KiB; 96 KiB are in flight.
    result = memory_pipeline(h200, latency_ns=500, bytes_per_stage=16384, stages=4, blocks_per_sm=2)
    assert result.kernel.pct_of_bandwidth == pytest.approx(100.0)
    assert result.kernel.reachable_gbps == pytest.approx(4800.0)


def test_stages_to_hide_latency():
    assert stages_to_hide_latency(700, 250) == 4  # ceil(2.8) loading ahead + 1 computing
    assert stages_to_hide_latency(500, 500) == 2
    assert stages_to_hide_latency(100, 1000) == 2


def test_tensor_core_pipeline_on_the_h200(h200):
    rate = 989.4e12 / 132
    result = tensor_core_pipeline(h200, dtype="bf16", latency_ns=1200, bm=128, bn=256, bk=64)
    assert result.flops_per_sm_per_s == pytest.approx(rate)
    # At the 1,830 MHz the tensor peak is quoted at: the Hopper SM's 4,096 dense bf16
    # FLOP/clk (the whitepaper's 1,024 FMA x 4 tensor cores), not 989.4 T / 132 / 1.98 GHz.
    assert result.flops_per_sm_per_cycle == pytest.approx(4096, rel=1e-3)
    assert result.flops_in_flight_per_sm == pytest.approx(rate * 1200e-9)
    assert result.flops_per_stage == 2 * 128 * 256 * 64
    assert result.bytes_per_stage == (128 + 256) * 64 * 2
    assert result.compute_ns_per_stage == pytest.approx(2 * 128 * 256 * 64 / rate * 1e9)
    assert result.stages_needed == 4  # 1200 ns / 559.6 ns -> 3 ahead + 1
    # (128+256)*64*2 bytes per 4.19 MFLOP at 7.5 TFLOP/s per SM, over 132 SMs.
    assert result.load_tbps_demanded == pytest.approx(49152 * rate / 4194304 * 132 / 1e12)


def test_two_resident_blocks_halve_each_blocks_rate(h200):
    one = tensor_core_pipeline(h200, latency_ns=1200, bm=128, bn=128, bk=64)
    two = tensor_core_pipeline(h200, latency_ns=1200, bm=128, bn=128, bk=64, blocks_per_sm=2)
    assert two.compute_ns_per_stage == pytest.approx(2 * one.compute_ns_per_stage)
    assert two.stages_needed <= one.stages_needed


def test_overrides_and_the_measured_hook(h200, monkeypatch):
    assert pipeline.load_measured_latencies(h200) is None
    assert memory_latency(h200, latencies={"hbm": 640.0}).ns == 640.0
    monkeypatch.setattr(pipeline, "load_measured_latencies", lambda spec: {"hbm": 612.0})
    latency = memory_latency(h200)
    assert latency.ns == 612.0 and latency.measured
    # An explicit latency beats a measurement.
    assert memory_latency(h200, latency_ns=400).ns == 400


def test_unknown_architecture_needs_a_latency():
    apple = get_gpu("m3-max")
    with pytest.raises(KernelabError, match="latency"):
        bytes_in_flight_needed(apple)
    assert bytes_in_flight_needed(apple, latency_ns=500) > 0


@pytest.mark.parametrize(
    "call",
    [
        lambda s: bytes_in_flight_needed(s, latency_ns=0),
        lambda s: bytes_in_flight_needed(s, bandwidth_gbps=-1),
        lambda s: memory_pipeline(s, stages=2),
        lambda s: memory_pipeline(s, bytes_per_stage=0),
        lambda s: tensor_core_pipeline(s, bm=128),
        lambda s: tensor_core_pipeline(s, dtype="fp4"),
        lambda s: memory_latency(s, "l3"),
        lambda s: kernel_in_flight(1024, 0, 1),
    ],
)
def test_bad_input_is_a_kernelab_error(h200, call):
    with pytest.raises(KernelabError):
        call(h200)


@pytest.mark.parametrize("gpu_id", ["h100-sxm", "h200", "h100-pcie"])
def test_a_hopper_sm_retires_4096_bf16_flop_per_cycle(gpu_id):
    # The hardware figure (4 tensor cores x 512 dense FMA per clock) must come out of the
    # catalog's peak and the clock that peak is quoted at, whichever Hopper card.
    spec = get_gpu(gpu_id)
    result = tensor_core_pipeline(spec, dtype="bf16", latency_ns=500)
    assert result.flops_per_sm_per_cycle == pytest.approx(4096, rel=1e-3)
    assert "4096 bf16 FLOP/cycle" in result.summary
    assert spec.rate_clock_mhz("bf16") < spec.boost_clock_mhz
    # The SIMT fp32 rate is quoted at the boost clock: 128 lanes x 2 FLOP per FMA.
    assert spec.flops_per_sm_per_cycle("fp32") == pytest.approx(256, rel=5e-3)


@pytest.mark.parametrize("value", [float("nan"), float("inf"), 0.0, -5.0])
def test_non_finite_or_non_positive_latency_and_bandwidth_are_refused(h200, value):
    with pytest.raises(KernelabError, match="must be positive"):
        memory_pipeline(h200, latency_ns=value)
    with pytest.raises(KernelabError, match="must be positive"):
        memory_pipeline(h200, bandwidth_gbps=value)
    with pytest.raises(KernelabError, match="must be positive"):
        memory_pipeline(h200, bytes_per_stage=value)


def test_stages_that_cannot_fit_shared_memory_are_refused(h200):
    # 8 x 64 KiB: 512 KiB for one block, past the 227 KiB a block can opt in to.
    with pytest.raises(KernelabError, match="512.0 KiB of shared memory per block.*227 KiB"):
        memory_pipeline(h200, latency_ns=500, bytes_per_stage=65536, stages=8, blocks_per_sm=4)
    # 4 blocks x 2 x 64 KiB: each block fits, the SM's 228 KiB do not hold all four.
    with pytest.raises(KernelabError, match="512.0 KiB of shared memory per SM.*228 KiB"):
        memory_pipeline(h200, latency_ns=500, bytes_per_stage=65536, stages=2, blocks_per_sm=4)
    fits = memory_pipeline(h200, latency_ns=500, bytes_per_stage=65536, stages=3, blocks_per_sm=1)
    assert fits.kernel.in_flight_per_sm == 2 * 65536


def test_blocks_per_sm_past_the_gpus_limit_are_refused(h200):
    assert h200.max_blocks_per_sm == 32
    with pytest.raises(KernelabError, match="at most 32, the most one SM of h200 holds"):
        memory_pipeline(h200, latency_ns=500, bytes_per_stage=1024, blocks_per_sm=100)
    with pytest.raises(KernelabError, match="at most 32"):
        tensor_core_pipeline(h200, latency_ns=500, bm=64, bn=64, bk=32, blocks_per_sm=33)
    assert memory_pipeline(h200, latency_ns=500, bytes_per_stage=1024, blocks_per_sm=32).kernel


def test_the_stages_loading_ahead_are_counted_in_words_that_match(h200):
    one = memory_pipeline(h200, latency_ns=500, bytes_per_stage=4096, stages=1)
    assert "its one stage (not pipelined" in one.summary and "loading ahead" not in one.summary
    three = memory_pipeline(h200, latency_ns=500, bytes_per_stage=4096, stages=3)
    assert "2 of 3 stages loading ahead" in three.summary


def test_integer_mma_work_is_counted_in_ops(h200):
    integer = tensor_core_pipeline(h200, dtype="int8", latency_ns=500, bm=128, bn=128, bk=64)
    assert "int8 OP/cycle" in integer.summary and "MOP" in integer.summary
    assert "FLOP" not in integer.summary
    assert "bf16 FLOP/cycle" in tensor_core_pipeline(h200, latency_ns=500).summary


def test_huge_figures_are_written_short_and_an_overflow_is_refused(h200):
    assert pipeline.figure(3350) == "3350" and pipeline.figure(1e200) == "1e+200"
    assert pipeline.figure(1234.567, 2) == "1234.57"
    wide = memory_pipeline(h200, latency_ns=500, bandwidth_gbps=1e200)
    assert "1e+200 GB/s" in wide.summary and len(wide.summary) < 300
    with pytest.raises(KernelabError, match="more bytes in flight than a float holds"):
        memory_pipeline(h200, latency_ns=500, bandwidth_gbps=1e308)
    with pytest.raises(KernelabError, match="stages must be at most 2\\*\\*53"):
        memory_pipeline(h200, latency_ns=500, bytes_per_stage=1.0, stages=10**400)
