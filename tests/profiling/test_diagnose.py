"""The bottleneck rules: the two H200 GEMMs, and constructed metric sets for every outcome."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelab.profiling import diagnose as d
from kernelab.profiling import metrics as m
from kernelab.profiling.report import load_csv

NCU = Path(__file__).resolve().parents[1] / "fixtures" / "ncu"


def kernel(
    sm: float,
    mem: float,
    *,
    pipes: dict | None = None,
    dram: float = 0.0,
    l2: float = 0.0,
    l1: float = 0.0,
    grid: int = 1056,
    sms: int = 132,
    waves: float | None = None,
    stalls: dict | None = None,
    theoretical: float = 100.0,
    limits: dict | None = None,
) -> dict:
    """A flat metric dict as KernelProfile.metrics holds, with only what the rules read."""
    metrics = {
        m.SM_THROUGHPUT: sm,
        m.MEMORY_THROUGHPUT: mem,
        m.DRAM_THROUGHPUT: dram,
        m.L2_THROUGHPUT: l2,
        m.L1_THROUGHPUT[0]: l1,
        m.GRID_SIZE: grid,
        m.SM_COUNT: sms,
        m.WAVES_PER_SM: waves if waves is not None else grid / sms,
        m.THEORETICAL_OCCUPANCY: theoretical,
    }
    for unit, pct in (pipes or {}).items():
        metrics[m.PIPES[unit][0]] = pct
    for reason, cycles in (stalls or {}).items():
        metrics[m.STALL_RATIO.format(reason)] = cycles
    for what, blocks in (limits or {}).items():
        metrics[m.OCCUPANCY_LIMITS[what]] = blocks
    return metrics


def metric_names(diagnosis) -> set[str]:
    return {e.metric for e in diagnosis.evidence}


# --- the real kernels ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def focused():
    return load_csv(NCU / "gemm_focused_raw.csv")


def test_cublas_sgemm_is_compute_bound_on_the_fma_pipe(focused):
    result = d.diagnose(focused[0].metrics)
    assert (result.bottleneck, result.unit) == ("compute", "FMA")
    assert "tensor cores" in result.advice[0]  # the next roof up
    assert m.SM_THROUGHPUT in metric_names(result)
    assert m.PIPES["FMA"][0] in metric_names(result)


def test_bf16_gemm_is_compute_bound_on_the_tensor_pipe_at_about_90_percent(focused):
    result = d.diagnose(focused[1].metrics)
    assert (result.bottleneck, result.unit) == ("compute", "Tensor")
    tensor = next(e for e in result.evidence if e.metric == m.TENSOR_PIPE)
    assert tensor.value == pytest.approx(90.1, abs=0.5)  # ANCHORS: 90.6 with --set full
    assert result.top_stall == "barrier"


def test_details_page_without_a_pipe_breakdown_does_not_invent_a_unit():
    sgemm = load_csv(NCU / "gemm_focused_details.csv")[0]
    result = d.diagnose(sgemm.metrics)
    # The page holds the tensor pipe (idle) but not the FMA pipe: the unit stays generic.
    assert (result.bottleneck, result.unit) == ("compute", "SM")


@pytest.mark.parametrize(
    "fixture, dram_pct",
    [("softmax_bf16_131k_fabric_raw.csv.xz", 79.1), ("copy_bf16_fabric_raw.csv.xz", 85.9)],
    ids=["softmax-bf16-131k", "copy-bf16"],
)
def test_h200_streaming_kernels_are_bound_by_the_l2_fabric(fixture, dram_pct):
    # kernelab profile on the H200: the long-row bf16 softmax winner and a plain
    # copy (torch.neg, 256 MiB). Both have the L2's busiest part, its fabric, ahead of DRAM.
    profile = load_csv(NCU / fixture)[0]
    result = d.diagnose(profile.metrics)
    assert (result.bottleneck, result.unit) == ("memory", "L2 fabric")
    fabric = next(e for e in result.evidence if e.metric == m.L2_FABRIC)
    dram = next(e for e in result.evidence if e.metric == m.DRAM_THROUGHPUT)
    assert fabric.value > dram.value and dram.value == pytest.approx(dram_pct, abs=0.1)
    assert fabric.value == pytest.approx(m.number(profile.metrics, m.L2_THROUGHPUT))


# --- every outcome from constructed metrics --------------------------------------------------


def test_compute_bound_names_the_hottest_pipe():
    result = d.diagnose(kernel(88, 40, pipes={"FMA": 30, "XU": 85, "ALU": 20}))
    assert (result.bottleneck, result.unit) == ("compute", "XU")
    assert "exp2" in result.advice[0]


def test_memory_bound_on_dram_says_only_fewer_bytes_help():
    result = d.diagnose(kernel(25, 92, dram=92, l2=40, l1=30, pipes={"FMA": 10}))
    assert (result.bottleneck, result.unit) == ("memory", "DRAM")
    assert "bandwidth roof" in result.advice[0] and "fuse" in result.advice[0]
    assert m.DRAM_THROUGHPUT in metric_names(result)


def test_memory_bound_on_l2_points_at_reuse_not_dram():
    result = d.diagnose(kernel(35, 85, dram=30, l2=85, l1=50))
    assert (result.bottleneck, result.unit) == ("memory", "L2")
    assert "tiles" in result.advice[0] and "L2" in result.advice[0]


def test_memory_bound_on_the_l2_fabric_names_the_link_between_partitions():
    # The H200's long-row bf16 softmax (ncu): memory 78 % (DRAM), L2 93 %, and
    # the L2's 93 % is its fabric (lts__throughput is the maximum over its sub-units).
    metrics = kernel(45, 78, dram=78, l2=93.37, l1=11)
    metrics[m.L2_FABRIC] = 93.37
    result = d.diagnose(metrics)
    assert (result.bottleneck, result.unit) == ("memory", "L2 fabric")
    assert "partitions" in result.advice[0] and "prefetch" in result.advice[0]
    assert m.L2_FABRIC in metric_names(result)
    assert result.summary.startswith("memory-bound on L2 fabric")


@pytest.mark.parametrize("fabric", [None, 60.0], ids=["no-fabric-metric", "fabric-not-busiest"])
def test_memory_bound_on_l2_stays_l2_where_the_fabric_does_not_explain_it(fabric):
    metrics = kernel(35, 85, dram=30, l2=85, l1=50)
    if fabric is not None:
        metrics[m.L2_FABRIC] = fabric
    result = d.diagnose(metrics)
    assert (result.bottleneck, result.unit) == ("memory", "L2")


def test_memory_bound_on_l1_points_at_shared_memory_layout():
    result = d.diagnose(kernel(30, 90, dram=10, l2=20, l1=90))
    assert (result.bottleneck, result.unit) == ("memory", "L1")
    assert "bank conflicts" in result.advice[0]


def test_latency_bound_with_long_scoreboard_asks_for_more_bytes_in_flight():
    stalls = {"long_scoreboard": 12.0, "barrier": 1.0, "wait": 0.8, "selected": 1.0}
    result = d.diagnose(kernel(22, 35, dram=35, stalls=stalls))
    assert result.bottleneck == "latency"
    assert result.top_stall == "long_scoreboard"
    assert "stages" in result.advice[0] and "in flight" in result.advice[0]
    assert m.STALL_RATIO.format("long_scoreboard") in metric_names(result)


def test_latency_bound_names_the_occupancy_limiter_when_occupancy_is_low():
    limits = {"registers": 1, "shared memory": 3, "warps (block size)": 8, "blocks per SM": 32}
    metrics = kernel(20, 30, stalls={"long_scoreboard": 6.0}, theoretical=12.5, limits=limits)
    result = d.diagnose(metrics)
    assert result.bottleneck == "latency" and result.occupancy_limiter == "registers"
    assert any("limited by registers" in line for line in result.advice)


def test_latency_bound_with_barrier_stalls_suggests_warp_specialization():
    result = d.diagnose(kernel(30, 20, stalls={"barrier": 9.0, "long_scoreboard": 2.0}))
    assert result.bottleneck == "latency" and result.top_stall == "barrier"
    assert "warp specialization" in result.advice[0]


def test_latency_bound_with_mio_throttle_points_at_shared_memory():
    result = d.diagnose(kernel(40, 45, stalls={"mio_throttle": 7.0, "short_scoreboard": 3.0}))
    assert result.top_stall == "mio_throttle"
    assert "Shared-memory pressure" in result.advice[0]


def test_small_grid_when_fewer_blocks_than_sms():
    result = d.diagnose(kernel(8, 6, grid=16, sms=132, stalls={"long_scoreboard": 4.0}))
    assert result.bottleneck == "small-grid"
    assert "16 blocks for 132 SMs" in result.summary
    assert m.WAVES_PER_SM in metric_names(result) and m.GRID_SIZE in metric_names(result)
    assert "split-K" in result.advice[0]


def test_a_large_grid_with_low_throughput_is_latency_not_small_grid():
    assert d.diagnose(kernel(8, 6, grid=13200, sms=132)).bottleneck == "latency"


def test_a_small_grid_that_still_saturates_a_unit_is_not_called_small():
    assert d.diagnose(kernel(85, 30, grid=100, pipes={"Tensor": 85})).bottleneck == "compute"


def test_balanced_when_both_are_busy_and_close():
    result = d.diagnose(kernel(84, 82, pipes={"FMA": 80}, dram=82))
    assert result.bottleneck == "balanced"
    assert "ridge" in result.advice[0]
    assert d.diagnose(kernel(70, 66)).bottleneck == "balanced"  # the middle band, close


def test_middle_band_far_apart_goes_to_the_busier_side():
    assert d.diagnose(kernel(75, 40, pipes={"ALU": 70})).bottleneck == "compute"
    assert d.diagnose(kernel(40, 75, dram=75)).bottleneck == "memory"


def test_thresholds_are_the_documented_ones():
    assert (d.HIGH_THROUGHPUT_PCT, d.LOW_THROUGHPUT_PCT) == (80.0, 60.0)
    just_below = d.LOW_THROUGHPUT_PCT - 0.1
    assert d.diagnose(kernel(just_below, 10)).bottleneck == "latency"
    assert d.diagnose(kernel(d.HIGH_THROUGHPUT_PCT, 10, pipes={"FMA": 79})).bottleneck == "compute"


def test_missing_speed_of_light_is_unknown_not_a_guess():
    result = d.diagnose({m.GRID_SIZE: 4})
    assert result.bottleneck == "unknown"
    assert {e.metric for e in result.evidence} == {m.SM_THROUGHPUT, m.MEMORY_THROUGHPUT}


def test_pc_sampled_stalls_stand_in_when_ratios_are_missing():
    metrics = kernel(20, 20)
    metrics[m.STALL_SAMPLES.format("long_scoreboard")] = 900
    metrics[m.STALL_SAMPLES.format("no_instructions")] = 100  # ncu's plural spelling
    ranked = m.stalls(metrics)
    assert [s.reason for s in ranked] == ["long_scoreboard", "no_instruction"]
    assert ranked[0].share_pct == pytest.approx(90.0)
    assert d.diagnose(metrics).top_stall == "long_scoreboard"


def test_diagnosis_serializes_to_plain_data():
    data = d.diagnose(kernel(25, 92, dram=92)).to_dict()
    assert set(data) >= {"bottleneck", "unit", "evidence", "advice", "summary"}
    assert all(set(e) == {"metric", "value", "threshold", "meaning"} for e in data["evidence"])


def _dram_gbps(profile) -> float:
    return m.number(profile.metrics, m.DRAM_BYTES_PER_SECOND) / 1e9


def test_softmax_at_the_copys_rate_is_named_for_the_dram_roof():
    """Issue 32: the H200 softmax moves its bytes at over 90 % of what a plain copy moves
    (both under ncu): it sits on the DRAM roof, and no L2 advice applies."""
    softmax = load_csv(NCU / "softmax_bf16_131k_fabric_raw.csv.xz")[0]
    copy = _dram_gbps(load_csv(NCU / "copy_bf16_fabric_raw.csv.xz")[0])
    pct = 100 * _dram_gbps(softmax) / copy
    assert pct >= d.AT_ROOF_PCT  # the premise, from the two real reports

    result = d.diagnose(softmax.metrics, copy_ceiling_gbps=copy)
    assert (result.bottleneck, result.unit) == ("memory", "DRAM")
    assert f"{pct:.0f} % of the measured copy ceiling" in result.summary
    assert "nothing left at this level" in result.summary
    assert result.advice == [d.AT_DRAM_ROOF_ADVICE]
    assert not any("L2" in advice for advice in result.advice)
    rate = result.evidence[0]
    assert rate.metric == m.DRAM_BYTES_PER_SECOND and rate.value == pytest.approx(pct * copy / 100)


def test_below_the_roof_the_metrics_alone_decide():
    softmax = load_csv(NCU / "softmax_bf16_131k_fabric_raw.csv.xz")[0]
    twice = 2 * _dram_gbps(softmax)  # a ceiling the kernel reaches half of
    assert d.diagnose(softmax.metrics, copy_ceiling_gbps=twice) == d.diagnose(softmax.metrics)
    assert d.diagnose(softmax.metrics).unit == "L2 fabric"


@pytest.mark.parametrize(
    ("achieved", "ceiling", "expected"),
    [(4060.0, 4249.0, 100 * 4060 / 4249), (3000.0, 4249.0, None), (None, 4249.0, None),
     (4000.0, None, None), (4000.0, 0.0, None)],
)  # fmt: skip
def test_dram_roof_pct(achieved, ceiling, expected):
    got = d.dram_roof_pct(achieved, ceiling)
    assert got == (pytest.approx(expected) if expected is not None else None)


# --- streaming kernels: the L2 is busy with DRAM's bytes, not with reuse ----------------------


def _without_fabric(metrics: dict) -> dict:
    """The report as the focused sections alone record it: no fabric counter."""
    return {k: v for k, v in metrics.items() if k != m.L2_FABRIC}


@pytest.mark.parametrize(
    "fixture", ["softmax_bf16_131k_fabric_raw.csv.xz", "copy_bf16_fabric_raw.csv.xz"]
)
def test_a_real_streaming_kernel_is_not_told_to_tile_for_l2(fixture):
    """The H200 softmax and copy read each byte once. Without the fabric counter the L2's
    share of peak (92-94 %) is the busiest unit, above DRAM's (79-86 %), yet its traffic is
    about DRAM's: the diagnosis names DRAM and fewer bytes, never tiles fetched from L2."""
    metrics = _without_fabric(load_csv(NCU / fixture)[0].metrics)
    assert m.number(metrics, m.L2_THROUGHPUT) > m.number(metrics, m.DRAM_THROUGHPUT)
    ratio, how = d.l2_traffic_over_dram(metrics)
    assert how == "estimated" and 1.0 <= ratio < d.L2_REUSE_RATIO

    result = d.diagnose(metrics)
    assert (result.bottleneck, result.unit) == ("memory", "DRAM")
    assert result.summary.startswith("memory-bound, streaming")
    assert d.MEMORY_ADVICE["L2"] not in result.advice
    assert "tiles are fetched again" not in " ".join(result.advice)
    assert "near the DRAM roof" in result.advice[0] and "fuse" in result.advice[0]
    assert "l2_bytes_over_dram_bytes" in metric_names(result)
    # Near the roof nothing else is advised: no stages, no occupancy (only fewer bytes help).
    assert len(result.advice) == 1


def test_the_softmax_moving_its_minimal_bytes_says_so():
    softmax = load_csv(NCU / "softmax_bf16_131k_fabric_raw.csv.xz")[0]
    metrics = _without_fabric(softmax.metrics)
    minimum = m.dram_bytes(metrics)  # the op's minimum: read x once, write y once
    result = d.diagnose(metrics, minimum_bytes=minimum)
    assert "1.00x the op's minimal bytes" in result.advice[0]


def test_the_fabric_report_keeps_the_fabric_and_adds_that_it_streams():
    softmax = load_csv(NCU / "softmax_bf16_131k_fabric_raw.csv.xz")[0]
    result = d.diagnose(softmax.metrics)
    assert (result.bottleneck, result.unit) == ("memory", "L2 fabric")
    assert "streaming" in result.summary
    assert any("near the DRAM roof" in line for line in result.advice)


def _streaming(dram_pct: float, l2_pct: float, hit: float, read: float, write: float) -> dict:
    metrics = kernel(40, l2_pct, dram=dram_pct, l2=l2_pct, l1=20)
    metrics |= {m.L2_HIT_RATE: hit, m.DRAM_BYTES_READ: read, m.DRAM_BYTES_WRITE: write}
    return metrics


def test_the_row_softmax_of_the_issue_is_diagnosed_at_the_dram_roof():
    # DRAM 83 % of peak, L2 90 % with a 51 % hit rate, each byte read once and written once:
    # L2 traffic = 256 MB / 0.49 = 522 MB over 512 MB of DRAM traffic, 1.02x.
    result = d.diagnose(_streaming(83, 90, 51, 256e6, 256e6))
    assert (result.bottleneck, result.unit) == ("memory", "DRAM")
    assert "83 % of peak" in result.advice[0] and "narrower dtype" in result.advice[0]


def test_a_streaming_kernel_below_the_roof_is_told_to_keep_more_in_flight():
    result = d.diagnose(_streaming(55, 70, 50, 256e6, 256e6))
    assert (result.bottleneck, result.unit) == ("memory", "DRAM")
    assert "in flight" in result.advice[0] and "near the DRAM roof" not in result.advice[0]


def test_l2_reuse_still_points_at_tiles():
    # A 90 % hit rate: each byte DRAM sent was read from L2 about 10 times.
    result = d.diagnose(_streaming(30, 85, 90, 100e6, 10e6))
    assert (result.bottleneck, result.unit) == ("memory", "L2")
    assert "fetched again" in result.advice[0]
    ratio = next(e for e in result.evidence if e.metric == "l2_bytes_over_dram_bytes").value
    assert ratio == pytest.approx(100e6 / 0.1 / 110e6)


def test_measured_l2_bytes_win_over_the_estimate():
    metrics = _streaming(83, 90, 90, 256e6, 256e6)  # the hit rate alone would say reuse
    metrics[m.L2_BYTES] = 600e6
    assert d.l2_traffic_over_dram(metrics) == (pytest.approx(600e6 / 512e6), "measured")
    assert d.diagnose(metrics).unit == "DRAM"
    metrics[m.L2_BYTES] = 4e9
    assert d.diagnose(metrics).unit == "L2"


def test_without_byte_counters_the_ratio_is_unknown():
    assert d.l2_traffic_over_dram(kernel(35, 85, dram=30, l2=85)) == (None, "")
