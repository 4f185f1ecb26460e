"""Measured ceilings: the cache and its lookup on the CPU, the measurement itself on a GPU."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from rich.console import Console

from kernelab.commands.ceilings import render_measured
from kernelab.hardware.catalog import get_gpu
from kernelab.harness.ceilings import (
    Ceiling,
    DeviceIdentity,
    MeasuredCeilings,
    _best,
    cache_path,
    catalog_id_for,
    load_measured,
    measured_ceilings_for,
    save_measured,
)

H200 = get_gpu("h200")


def measured(
    gpu_id="h200", timestamp="2026-11-29T12:00:00+00:00", copy_tbps=4.28, bf16_tflops=723.0
):
    return MeasuredCeilings(
        gpu="NVIDIA H200",
        gpu_id=gpu_id,
        driver="580.65.06",
        timestamp=timestamp,
        quick=False,
        ceilings={
            "copy": Ceiling(
                "copy", "bytes/s", copy_tbps * 1e12, 1.0, 0.01, {"bytes_per_buffer": 2**31}, 4.8e12
            ),
            "bf16": Ceiling(
                "bf16",
                "FLOP/s",
                bf16_tflops * 1e12,
                0.19,
                0.01,
                {"m": 4096, "n": 4096, "k": 4096},
                989.4e12,
            ),
        },
    )


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELAB_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("KERNELAB_CEILINGS", raising=False)
    return tmp_path / "cache"


def test_round_trip_and_ratio(tmp_path):
    m = measured()
    loaded = load_measured(save_measured(m, tmp_path / "c.json"))
    assert loaded == m
    assert loaded.ceilings["copy"].ratio == pytest.approx(4.28 / 4.8)
    assert json.loads((tmp_path / "c.json").read_text())["ceilings"]["bf16"][
        "ratio"
    ] == pytest.approx(723 / 989.4)


def test_to_ceilings_uses_the_measured_figures():
    ceilings = measured().to_ceilings()
    assert ceilings.gpu_id == "h200"
    assert ceilings.bandwidth == pytest.approx(4.28e12)
    assert ceilings.peak_flops == {"bf16": pytest.approx(723e12)}
    assert ceilings.source == "measured on NVIDIA H200, 2026-11-29"


def test_lookup_from_the_cache_picks_the_newest(cache):
    for driver, stamp, bf16 in (
        ("570.1", "2026-01-01T00:00:00+00:00", 600.0),
        ("580.65", "2026-11-29T00:00:00+00:00", 723.0),
    ):
        identity = DeviceIdentity(0, "NVIDIA H200", "h200", driver, (9, 0))
        save_measured(measured(timestamp=stamp, bf16_tflops=bf16), cache_path(identity))
    assert measured_ceilings_for(H200).peak_flops["bf16"] == pytest.approx(723e12)
    assert measured_ceilings_for(get_gpu("h100-sxm")) is None  # nothing measured on an H100


def test_lookup_without_anything_is_none(cache):
    assert measured_ceilings_for(H200) is None


def test_lookup_from_an_explicit_file(cache, tmp_path, monkeypatch):
    path = save_measured(measured(copy_tbps=4.1), tmp_path / "committed.json")
    assert measured_ceilings_for(H200, path).bandwidth == pytest.approx(4.1e12)
    monkeypatch.setenv("KERNELAB_CEILINGS", str(path))
    assert measured_ceilings_for(H200).bandwidth == pytest.approx(4.1e12)
    assert measured_ceilings_for(get_gpu("b200")) is None  # a file from another GPU is not used


def test_a_damaged_file_named_explicitly_is_a_one_line_error(tmp_path):
    from kernelab.errors import KernelabError

    bad = tmp_path / "bad.json"
    bad.write_text('{"gpu": "x"}')
    with pytest.raises(KernelabError, match="not a measured-ceilings document"):
        measured_ceilings_for(H200, bad)


def test_catalog_match_prefers_the_longest_name():
    assert catalog_id_for("NVIDIA H200") == "h200"
    assert catalog_id_for("NVIDIA H100 PCIe") == "h100-pcie"
    assert catalog_id_for("NVIDIA L40S") == "l40s"
    assert catalog_id_for("NVIDIA GH200 480GB") == "gh200"
    assert catalog_id_for("Some Future GPU") is None


def test_best_shape_wins():
    class T:
        def __init__(self, ms):
            self.median_ms, self.rel_noise = ms, 0.01

    tried = [
        ({"m": 4096, "n": 4096, "k": 4096}, T(0.19), 2 * 4096**3),
        ({"m": 8192, "n": 8192, "k": 8192}, T(1.64), 2 * 8192**3),
    ]
    best = _best("bf16", "FLOP/s", tried, H200)
    assert best.shape["m"] == 4096  # 723 TFLOP/s beats 670
    assert best.rate == pytest.approx(2 * 4096**3 / 0.19e-3)
    assert best.datasheet == pytest.approx(H200.peak_flops("bf16"))
    assert len(best.tried) == 2


def test_table_renders():
    console = Console(record=True, width=140)
    render_measured(measured(), None)(console)
    text = console.export_text()
    assert "4.28 TB/s" in text and "723.0 TFLOP/s" in text and "89.2 %" in text


def test_no_gpu_is_one_line_and_exit_2():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    done = subprocess.run(
        [sys.executable, "-m", "kernelab.cli", "ceilings", "--json"], capture_output=True, text=True
    )
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr == "kernelab: kernelab ceilings needs a CUDA GPU; none found\n"


# --- on the GPU ---------------------------------------------------------------------------


@pytest.mark.gpu
def test_measured_copy_is_near_the_h200_anchor(cache):
    from kernelab.harness.ceilings import measure_ceilings, this_gpu

    if this_gpu().gpu_id != "h200":
        pytest.skip("the 4.28 TB/s anchor is the H200's")
    m = measure_ceilings(quick=True)
    copy = m.ceilings["copy"]
    assert abs(copy.rate - 4.28e12) / 4.28e12 < 0.05
    for dtype, low in (
        ("fp32", 40e12),
        ("tf32", 250e12),
        ("bf16", 550e12),
        ("fp16", 550e12),
        ("fp8", 600e12),
    ):
        assert low < m.ceilings[dtype].rate < m.ceilings[dtype].datasheet, dtype


@pytest.mark.gpu
def test_ceilings_command_measures_then_reads_the_cache(cache):
    command = [sys.executable, "-m", "kernelab.cli", "ceilings", "--quick", "--json"]
    first = subprocess.run(command, capture_output=True, text=True, check=True)
    second = subprocess.run(command, capture_output=True, text=True, check=True)
    a, b = json.loads(first.stdout), json.loads(second.stdout)
    assert a["from_cache"] is False and b["from_cache"] is True
    assert a["ceilings"]["copy"]["rate"] == b["ceilings"]["copy"]["rate"]
    from kernelab.harness.ceilings import this_gpu

    spec = this_gpu().spec
    if spec is not None:
        assert measured_ceilings_for(spec).bandwidth == pytest.approx(a["ceilings"]["copy"]["rate"])
