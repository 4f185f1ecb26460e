"""Reading Nsight Compute results: real H200 reports through ncu_report and ncu's CSV pages.

The fixtures are from the H200 (ncu 2025.3.1): a cuBLAS fp32 SGEMM
(sm80_xmma_gemm_f32f32..., 4096^3) and a bf16 tensor-core GEMM (nvjet_sm90..., 4096^3), once
with the focused section set (.ncu-rep.xz, raw and details CSV) and once with `--set full`
(the raw CSV page, xz-compressed).
"""

from __future__ import annotations

import lzma
import shutil
from pathlib import Path

import pytest

from kernelab.errors import KernelabError, MissingToolError
from kernelab.profiling import metrics as m
from kernelab.profiling.report import base_unit, import_ncu_report, load, load_csv, load_report
from kernelab.profiling.summary import summarize

GEMM_4096_FLOPS = 2 * 4096**3  # one multiply and one add per (i, j, k)


@pytest.fixture(scope="module")
def ncu_dir():
    return Path(__file__).resolve().parents[1] / "fixtures" / "ncu"


@pytest.fixture(scope="module")
def from_report(ncu_dir):
    try:
        import_ncu_report()
    except MissingToolError:
        pytest.skip("no ncu_report module (pip install ncu-report)")
    return load_report(ncu_dir / "gemm_focused.ncu-rep.xz")


@pytest.fixture(scope="module")
def from_raw(ncu_dir):
    return load_csv(ncu_dir / "gemm_focused_raw.csv")


@pytest.fixture(scope="module")
def from_details(ncu_dir):
    return load_csv(ncu_dir / "gemm_focused_details.csv")


@pytest.fixture(scope="module")
def full_raw(ncu_dir):
    return load(ncu_dir / "gemm_fp32_bf16_raw.csv.xz")


def test_report_holds_the_two_kernels_with_names_and_launch_shape(from_report):
    sgemm, bf16 = from_report
    assert sgemm.name.startswith("sm80_xmma_gemm_f32f32") and "ffma" in sgemm.name
    assert bf16.name.startswith("nvjet_sm90")
    assert sgemm.grid == (16, 32, 1) and sgemm.block == (256, 1, 1)
    assert bf16.grid == (2, 66, 1) and bf16.block == (384, 1, 1)
    assert sgemm.registers_per_thread == 254 and bf16.registers_per_thread == 168
    assert sgemm.shared_mem_per_block == 68608  # bytes: 67,584 dynamic + 1,024 driver
    assert sgemm.device == "NVIDIA H200"
    assert sgemm.duration_ns == pytest.approx(2_679_520)
    assert sgemm.units[m.DURATION] == "ns"
    assert len(sgemm.metrics) > 500  # every metric of the focused set, not a chosen few
    assert any(r["rule"] == "SOLBottleneck" for r in sgemm.rules)


# name -> relative tolerance for the details page, which rounds to 2 decimals / 3-4 digits
KEY_NUMBERS = {
    m.DURATION: 2e-3,
    m.SM_THROUGHPUT: 1e-3,
    m.MEMORY_THROUGHPUT: 1e-3,
    m.DRAM_THROUGHPUT: 2e-3,
    m.REGISTERS_PER_THREAD: 0,
    m.GRID_SIZE: 0,
    m.ACHIEVED_OCCUPANCY: 1e-3,
    m.THEORETICAL_OCCUPANCY: 1e-3,
    m.L2_HIT_RATE: 1e-3,
    m.DRAM_BYTES_READ: 1e-3,
    m.SHARED_MEM_PER_BLOCK: 1e-3,
    m.WAVES_PER_SM: 5e-3,
}


@pytest.mark.parametrize("index", [0, 1])
def test_report_raw_csv_and_details_csv_agree_on_the_key_numbers(
    from_report, from_raw, from_details, index
):
    rep, raw, details = from_report[index], from_raw[index], from_details[index]
    assert rep.name == raw.name == details.name
    for name, rel in KEY_NUMBERS.items():
        expected = rep.metric(name)
        assert expected is not None, name
        # The raw page keeps 6 decimals; the CSV is scaled (ms, Mbyte) and must be unscaled.
        assert raw.metric(name) == pytest.approx(expected, rel=max(rel, 1e-6)), name
        assert details.metric(name) == pytest.approx(expected, rel=max(rel, 1e-6), abs=0.006), name
    # The tensor pipe, a "Command line profiler metrics" row of the details page.
    assert details.metric(m.TENSOR_PIPE) == pytest.approx(rep.metric(m.TENSOR_PIPE), abs=0.006)


def test_the_bf16_gemm_keeps_the_tensor_pipe_about_90_percent_busy(from_report, full_raw):
    assert from_report[1].metric(m.TENSOR_PIPE) == pytest.approx(90.14, abs=0.01)
    assert full_raw[1].metric(m.TENSOR_PIPE) == pytest.approx(90.56, abs=0.01)  # ANCHORS: 90.6
    assert from_report[0].metric(m.TENSOR_PIPE) < 0.01  # the SGEMM uses no tensor cores


def test_ffma_count_gives_the_sgemm_its_2mnk_flops(from_report, from_raw):
    for kernels in (from_report, from_raw):
        count = m.count_flops(kernels[0].metrics)
        assert count.dominant == "fp32"
        # 2*M*N*K plus the epilogue's alpha*acc + beta*c: within 0.1 %.
        assert count.flops == pytest.approx(GEMM_4096_FLOPS, rel=1e-3)
        assert count.flops >= GEMM_4096_FLOPS


def test_tensor_flops_come_from_the_ops_path_counters_and_are_all_wgmma(full_raw):
    count = m.count_flops(full_raw[1].metrics)
    assert count.flops == GEMM_4096_FLOPS  # the counter is exact: 137,438,953,472
    assert count.by_precision == {"bf16": GEMM_4096_FLOPS}
    assert count.wgmma_flops == GEMM_4096_FLOPS
    assert count.dominant == "bf16"


def test_tensor_flops_are_reported_uncountable_without_their_counters(from_report):
    count = m.count_flops(from_report[1].metrics)
    assert count.flops is None
    assert "not countable" in count.method and "sm__ops_path_tensor" in count.method


def test_stalls_rank_the_bf16_gemm_barrier_first(from_report):
    ranked = m.stalls(from_report[1].metrics, top=3)
    assert [s.reason for s in ranked] == ["barrier", "long_scoreboard", "gmma"]
    assert ranked[0].cycles_per_issue == pytest.approx(5.976, abs=1e-3)
    assert all(
        s.reason not in ("selected", "not_selected") for s in m.stalls(from_report[1].metrics)
    )


def test_summary_places_the_sgemm_at_about_77_percent_of_the_fp32_roof(from_report):
    s = summarize(from_report[0])
    assert s.roofline is not None and s.roofline["gpu"] == "h200"
    assert s.roofline["bound"] == "compute" and s.roofline["math_dtype"] == "fp32"
    # ncu's own SOLFPRoofline rule on this kernel: "achieved 77% of this device's FP32 peak".
    assert s.roofline["sol_pct"] == pytest.approx(77, abs=2)
    assert s.achieved_tflops == pytest.approx(51.3, abs=0.2)  # ANCHORS: cuBLAS fp32 51.4
    assert s.intensity == pytest.approx(GEMM_4096_FLOPS / (341_931_776 + 54_363_136), rel=1e-3)
    assert s.occupancy_limiter == "registers"
    assert s.wgmma_instructions is None or s.wgmma_instructions == 0


def test_summary_without_countable_flops_says_why_instead_of_placing(from_report):
    s = summarize(from_report[1])
    assert s.roofline is None and "not countable" in s.roofline_note
    assert s.dram_bytes == pytest.approx(148_704_512 + 28_019_456)


def test_summary_sets_the_cost_models_prediction_beside_the_measurement(full_raw):
    from kernelab.roofline.costs import gemm

    predicted = gemm(4096, 4096, 4096, dtype="bf16")
    s = summarize(full_raw[1], predicted=predicted)
    assert s.roofline["math_dtype"] == "bf16"
    assert s.predicted["flops"] == pytest.approx(s.flops.flops, rel=1e-9)
    # cuBLAS re-reads tiles: more DRAM traffic than the 3 * 4096^2 * 2-byte minimum.
    assert s.predicted["dram_bytes_over_minimum"] > 1.0
    assert s.predicted["placement"]["bound"] == "compute"


def test_csv_units_are_converted_to_ncu_report_base_units():
    assert base_unit("ms") == (1e6, "ns")
    assert base_unit("us") == pytest.approx((1e3, "ns"))
    assert base_unit("Mbyte") == (1e6, "byte")
    assert base_unit("Gbyte/s") == (1e9, "byte/s")
    assert base_unit("Kbyte/block") == (1e3, "byte/block")
    assert base_unit("Ghz") == (1e9, "hz")
    assert base_unit("sector/ms") == pytest.approx((1e3, "sector/s"))
    assert base_unit("%") == (1.0, "%")
    assert base_unit("register/thread") == (1.0, "register/thread")


def test_xz_and_plain_files_read_the_same(ncu_dir, tmp_path):
    packed = tmp_path / "raw.csv.xz"
    with open(ncu_dir / "gemm_focused_raw.csv", "rb") as src, lzma.open(packed, "wb") as dst:
        shutil.copyfileobj(src, dst)
    plain = load_csv(ncu_dir / "gemm_focused_raw.csv")
    assert [k.metrics for k in load(packed)] == [k.metrics for k in plain]


def test_bad_files_are_one_line_errors(tmp_path):
    with pytest.raises(KernelabError, match="no such report"):
        load(tmp_path / "missing.ncu-rep")
    wrong = tmp_path / "notes.txt"
    wrong.write_text("hello")
    with pytest.raises(KernelabError, match=".ncu-rep or .csv"):
        load(wrong)
    not_ncu = tmp_path / "other.csv"
    not_ncu.write_text("a,b\n1,2\n")
    with pytest.raises(KernelabError, match="not an ncu CSV"):
        load(not_ncu)
    broken = tmp_path / "broken.ncu-rep.xz"
    broken.write_bytes(b"not xz at all")
    with pytest.raises(KernelabError, match="xz"):
        load(broken)


def test_load_report_says_plainly_when_ncu_report_cannot_be_found(monkeypatch, tmp_path):
    import importlib.util

    from kernelab.profiling import report

    fake = tmp_path / "k.ncu-rep"
    fake.write_bytes(b"not a report")
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a, **k: None)
    monkeypatch.setattr(report, "NCU_PYTHON_GLOBS", (str(tmp_path / "nowhere" / "*"),))
    assert report.ncu_report_findable() is False
    with pytest.raises(MissingToolError, match="ncu-report"):
        report.load_report(fake)
