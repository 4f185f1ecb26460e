"""benchmarks/decode_kernels.py: imports and explains itself without a GPU, its roofline part
(pure arithmetic) runs anywhere and agrees with the walk, and its measured parts refuse a
machine without CUDA in one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "benchmarks" / "decode_kernels.py"


def _run(*args):
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                          env=env, timeout=120)  # fmt: skip


def test_help_names_every_part_and_target():
    result = _run("-h")
    assert result.returncode == 0, result.stderr
    for word in ("--only", "--quick", "--out", "copy, gemv, quant, fused, roofline"):
        assert word in result.stdout


def test_the_roofline_part_runs_without_a_gpu_and_matches_the_walk():
    from kernelab.ops.gemv.roofline_walk import walk

    result = _run("--only", "roofline", "--gpu", "h100-sxm")
    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)
    first = rows[0]
    expected = walk(4096, 4096, gpu="h100-sxm")
    assert first["case"] == "4096x4096 m=1"
    assert first["intensity"] == pytest.approx(expected["points"][0].intensity)
    assert first["crossover_m"] == expected["crossover_m"]
    assert len(rows) == 6 * 7  # six weight shapes, seven batches


def test_bad_arguments_are_one_line_errors():
    unknown_gpu = _run("--only", "roofline", "--gpu", "h100-sxn")
    assert unknown_gpu.returncode == 2 and "h100-sxm" in unknown_gpu.stderr
    assert len(unknown_gpu.stderr.strip().splitlines()) == 1
    unknown_part = _run("--only", "gemm")
    assert unknown_part.returncode == 2 and "unknown part" in unknown_part.stderr


def test_the_measured_parts_need_a_gpu():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a GPU is present: the measured parts would run")
    result = _run("--only", "gemv")
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "error: the measured parts need a CUDA GPU (only --only roofline runs without)"
    )
