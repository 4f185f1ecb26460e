"""The timeline on a CUDA GPU: kernels, their classes and roofline; the example end to end
with --drill 1 through Nsight Compute (ncu on PATH or at /usr/local/cuda/bin)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from kernelab.timeline.classify import function_name

pytestmark = pytest.mark.gpu


def test_gemm_timeline_on_the_gpu(tmp_path):
    import torch

    from kernelab.timeline.capture import profile_callable
    from kernelab.timeline.summary import GPU_BOUND

    # Four 8192^3 GEMMs a step (~6 ms of tensor-core work) against ~50 us of launches. One
    # 4096^3 GEMM a step (0.2 ms) came out host-bound on the H200 (2026-11-29): the host's
    # time between profiled steps outweighed the GPU's.
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)

    def step():
        for _ in range(4):
            a @ b

    timeline = profile_callable(step, warmup=3, steps=5, out_dir=tmp_path)
    summary = timeline.summary
    assert summary.unit == "kernel" and summary.gpu_id is not None
    top = summary.top[0]
    assert top.cls == "gemm" and top.calls == 20 and top.ops == {"aten::mm": 20}
    (mm,) = [p for p in summary.placements if p.op == "aten::mm"]
    assert mm.shape["m"] == mm.shape["n"] == mm.shape["k"] == 8192
    placed = mm.placement
    assert placed["bound"] == "compute" and not placed["faster_than_light"]
    assert 10 < placed["sol_pct"] <= 100
    assert summary.verdict.kind == GPU_BOUND


def _ncu_on_path(monkeypatch) -> None:
    if shutil.which("ncu") or os.environ.get("KERNELAB_NCU"):
        return
    if Path("/usr/local/cuda/bin/ncu").is_file():
        monkeypatch.setenv("PATH", "/usr/local/cuda/bin" + os.pathsep + os.environ["PATH"])
        return
    pytest.fail("ncu not found: put Nsight Compute on PATH to test --drill")


def test_example_decode_end_to_end_with_drill(tmp_path, capsys, monkeypatch):
    from kernelab.cli import main

    _ncu_on_path(monkeypatch)
    out = tmp_path / "decode"
    argv = ["timeline", "--out", str(out), "--steps", "3", "--warmup", "2", "--drill", "1"]
    argv += ["--json", "--", "python", "-m", "kernelab.timeline.example", "--mode", "decode"]
    assert main(argv) == 0
    data = json.loads(capsys.readouterr().out)

    assert data["unit"] == "kernel" and data["capture"]["steps"] == 3
    assert {"gemm", "attention", "normalization"} <= set(data["classes"])
    gemm_bounds = {p["placement"]["bound"] for p in data["placements"] if p["cost_op"] == "gemm"}
    assert gemm_bounds == {"memory"}  # batch 1: every projection is a matrix-vector product
    assert data["busy"]["gap_count"] > 0

    (drilled,) = data["drill"]
    assert drilled["error"] is None, drilled["error"]
    assert drilled["kernel"] == data["top"][0]["name"]
    assert function_name(drilled["profile"]["name"]) == function_name(drilled["kernel"])
    assert drilled["diagnosis"]["bottleneck"] and drilled["diagnosis"]["advice"]
    assert Path(drilled["report"]).is_file()
    assert (out / "trace.json").is_file() and (out / "summary.json").is_file()
    keep = os.environ.get("KERNELAB_TIMELINE_OUT")  # the H200 run keeps the summary as a record
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        shutil.copy(out / "summary.json", Path(keep) / "timeline_decode_drill_summary.json")
