"""The timer against Nsight Compute: torch.mm's cold-mode median and ncu's gpu__time_duration.

On the CPU: the comparison and its tolerance, the kernel filter on real H200 kernel names,
the ncu command the cross-check builds (through a stand-in ncu), and the explanations from
the clocks. On the H200 (gpu-marked): issue 3's requirement, the two within 5 %.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest

from kernelab.errors import KernelabError
from kernelab.profiling import crosscheck as cc
from kernelab.profiling.report import load

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "ncu" / "gemm_focused.ncu-rep.xz"
SGEMM = "sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize256x128x8_stage3_warpsize4x2x1_ffma_aligna4_alignc4_execute_kernel__5x_cublas"
BF16 = "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT"


def test_compare_takes_the_median_and_applies_the_tolerance():
    ncu_ms, ratio, agree = cc.compare(0.1748, [0.1769, 0.1755, 0.1760, 9.0, 0.1771])
    assert ncu_ms == pytest.approx(0.1769)  # one slow replay does not move the median
    assert ratio == pytest.approx(0.1748 / 0.1769)
    assert agree
    assert cc.compare(1.049, [1.0])[2]
    assert cc.compare(0.951, [1.0])[2]
    assert not cc.compare(1.051, [1.0])[2]
    assert not cc.compare(0.949, [1.0])[2]
    assert cc.compare(1.2, [1.0], tolerance=0.25)[2]


@pytest.mark.parametrize(("timer", "durations"), [(1.0, []), (1.0, [0.0, None]), (0.0, [1.0])])
def test_compare_refuses_nothing_to_compare(timer, durations):
    with pytest.raises(KernelabError):
        cc.compare(timer, durations)


@dataclass
class Launch:
    name: str
    duration_ns: float | None = 1.0e5
    metrics: dict = field(default_factory=dict)

    def metric(self, *names):
        return next((self.metrics[n] for n in names if n in self.metrics), None)


def test_the_filter_keeps_cublas_gemms_and_drops_the_flush_and_the_spin():
    names = [k.name for k in load(FIXTURE)]
    assert names == [SGEMM, BF16]  # what cuBLAS ran on the H200 for fp32 and bf16
    launches = [Launch(n) for n in (*names, "vectorized_elementwise_kernel", "spin_kernel")]
    launches.append(Launch("cutlass_fill_gemm_workspace"))  # matches the regex, still a fill
    assert [k.name for k in cc.gemm_kernels(launches)] == [SGEMM, BF16]


def test_profile_gemm_asks_ncu_for_the_timed_gemm_launches(fake_ncu, tmp_path):  # noqa: F811
    run = cc.profile_gemm("bf16", 4096, launches=4, report_path=tmp_path / "mm")
    argv = fake_ncu()
    assert argv[argv.index("--clock-control") + 1] == "none"
    assert "--cache-control" not in argv  # ncu's default, "all", flushes like cold mode
    assert argv[argv.index("--nvtx-include") + 1] == cc.TIMER_RANGE + "/"
    assert argv[argv.index("--kernel-name") + 1] == "regex:" + cc.GEMM_KERNEL_REGEX
    assert argv[argv.index("--launch-count") + 1] == "4"
    metrics = argv[argv.index("--metrics") + 1].split(",")
    assert "gpu__time_duration.sum" in metrics
    assert "smsp__cycles_elapsed.avg.per_second" in metrics
    target = argv[argv.index("-o") + 2 :]
    assert target == cc.child_command("bf16", 4096, 4)
    assert [k.name for k in run.kernels] == [SGEMM, BF16]


def test_the_child_refuses_bad_arguments_in_one_line(capsys):
    assert cc.main(["--size", "0"]) == 2
    assert "positive" in capsys.readouterr().err


class StandInTiming:
    median_ms = 0.1748
    throttled = False
    samples_ms = [0.1748] * 12
    clocks = {"sm_mhz_min": 1755.0, "sm_mhz_max": 1980.0}

    def to_dict(self):
        return {"median_ms": self.median_ms, "samples_ms": self.samples_ms, "mode": "cold"}


def test_crosscheck_compares_the_timer_with_the_profiled_kernels(monkeypatch):
    @dataclass
    class Run:
        kernels: list
        report_path: str = "mm.ncu-rep"

    clock = {cc.SM_CYCLES_PER_SECOND: 1.98e9}
    kernels = [Launch(BF16, d, clock) for d in (176_900.0, 175_500.0, 176_000.0)]
    kernels.append(Launch("vectorized_elementwise_kernel", 40_000.0, clock))
    monkeypatch.setattr(cc, "time_gemm", lambda *a, **k: StandInTiming())
    monkeypatch.setattr(cc, "_release_cached_memory", lambda: None)
    monkeypatch.setattr(cc, "profile_gemm", lambda *a, **k: Run(kernels))
    result = cc.crosscheck("bf16", 4096, launches=3)
    assert result.ncu_durations_ms == pytest.approx([0.1769, 0.1755, 0.1760])
    assert result.ncu_median_ms == pytest.approx(0.1760)
    assert result.ratio == pytest.approx(0.1748 / 0.1760)
    assert result.agree and result.kernel == BF16
    assert result.ncu_sm_mhz == pytest.approx(1980.0)
    assert result.timer_sm_mhz == (1755.0, 1980.0)
    data = result.to_dict()
    assert data["shape"] == {"m": 4096, "n": 4096, "k": 4096}
    assert "samples_ms" not in data["timer"] and data["timer"]["samples"] == 12
    assert any("1980 MHz" in n and "1755" in n for n in data["notes"])  # the clock gap named


def test_explain_names_the_clock_gap_or_says_none_explains_it():
    assert cc.explain(1.0, (1980.0, 1980.0), 1980.0, False) == []
    slow_timer = cc.explain(1.12, (1600.0, 1980.0), 1980.0, True)
    assert len(slow_timer) == 2 and "power cap" in slow_timer[0] and "24 %" in slow_timer[1]
    unexplained = cc.explain(1.10, (1980.0, 1980.0), 1975.0, False)
    assert len(unexplained) == 1 and "split-K" in unexplained[0]
    assert cc.explain(0.99, None, None, False) == []


@pytest.mark.gpu
@pytest.mark.parametrize(("dtype", "size"), [("bf16", 4096)])
def test_timer_median_agrees_with_ncu_within_5_percent(dtype, size, tmp_path):
    """Issue 3: the timer's median of a large torch.mm agrees with Nsight Compute's
    gpu__time_duration for the same kernel within 5 %. bf16 at 4096^3: large (0.17 ms, 786
    TFLOP/s) yet below the power cap that an 8192^3 bf16 GEMM reaches in a back-to-back loop."""
    result = cc.crosscheck(dtype, size, launches=5, report_path=tmp_path / "mm.ncu-rep")
    assert len(result.ncu_durations_ms) == 5
    assert result.kernel and not cc._NOT_A_GEMM.search(result.kernel)
    assert abs(result.ratio - 1.0) <= 0.05, result.to_dict()
