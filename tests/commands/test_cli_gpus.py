"""`kernelab gpus` and `kernelab gpu NAME`: JSON contract, rendering, and one-line errors."""

from __future__ import annotations

import json

import pytest

from kernelab.cli import main
from kernelab.hardware.catalog import CATALOG


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def _run_json(capsys, argv):
    assert main(argv) == 0
    captured = capsys.readouterr()
    return json.loads(captured.out)


def test_gpus_json_lists_every_id_with_fields_and_ridges(capsys):
    data = _run_json(capsys, ["gpus", "--json"])
    assert [entry["id"] for entry in data] == list(CATALOG)
    h100 = next(entry for entry in data if entry["id"] == "h100-sxm")
    assert h100["sm_count"] == 132 and h100["memory_bandwidth_gbps"] == 3350
    assert h100["peak_tflops"]["bf16"] == 989.4
    assert h100["ridges"]["bf16"] == pytest.approx(295.3, rel=0.01)
    assert h100["sources"]["memory_bandwidth_gbps"].startswith("h100-datasheet")
    apple = next(entry for entry in data if entry["vendor"] == "apple")
    assert apple["tdp_w"] is None  # unpublished: NaN becomes null, never a made-up number


def test_gpus_table_names_every_chip(capsys):
    assert main(["gpus"]) == 0
    out = capsys.readouterr().out
    for gpu_id in CATALOG:
        assert gpu_id in out


def test_gpu_json_has_ridges_hierarchy_and_sources(capsys):
    data = _run_json(capsys, ["gpu", "h100-sxm", "--json"])
    assert data["id"] == "h100-sxm"
    assert data["ridges"]["bf16"] == pytest.approx(295, rel=0.01)
    assert data["ridges"]["fp8"] == pytest.approx(2 * data["ridges"]["bf16"], rel=0.001)
    hierarchy = data["hierarchy"]
    assert len(hierarchy) == 4
    for level in hierarchy:
        assert {"name", "size_bytes", "bandwidth_gbps", "source"} <= set(level)
        assert level["source"]
    assert hierarchy[0]["bandwidth_gbps"] == 3350
    assert hierarchy[1]["bandwidth_gbps"] is None  # no published L2 bandwidth
    assert hierarchy[2]["bandwidth_gbps"] == pytest.approx(33454, rel=0.001)
    sizes = [level["size_bytes"] for level in hierarchy]
    assert sizes[0] > sizes[1]  # HBM outermost and largest
    assert data["sources"]["peak_tflops.bf16"]
    assert "hopper-whitepaper" in data["documents"]


def test_gpu_renders_numbers_sources_and_hierarchy(capsys):
    assert main(["gpu", "mi300x"]) == 0
    out = capsys.readouterr().out
    for text in ("mi300x", "1,307.4", "5,300 GB/s", "Infinity Cache", "LDS", "registers", "ridge"):
        assert text in out


def test_gpu_unknown_name_is_one_line_naming_the_closest(capsys):
    assert main(["gpu", "h1OO"]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert err.startswith("kernelab:") and "\n" not in err
    assert "h100-sxm" in err
    assert captured.out == ""


def test_gpu_unknown_name_with_json_still_fails_cleanly(capsys):
    assert main(["gpu", "z9000", "--json"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1


@pytest.mark.skipif(_cuda_available(), reason="this machine has a CUDA GPU")
def test_gpu_auto_without_a_gpu_says_name_one(capsys):
    assert main(["gpu", "auto"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("kernelab:") and "\n" not in err
    assert "kernelab gpu NAME" in err


@pytest.mark.gpu
def test_gpu_auto_describes_the_detected_gpu(capsys):
    data = _run_json(capsys, ["gpu", "auto", "--json"])
    assert data["detected"]["spec"] == data["id"]
    assert data["detected"]["sm_count"] == data["sm_count"]
    assert len(data["hierarchy"]) >= 4
