"""benchmarks/sampling.py: explains itself, its plan part (pure arithmetic) runs without a GPU
and says whether FlashInfer is there in one line, its measured parts refuse a machine without
CUDA in one line, and its torch baseline samples inside the nucleus."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from benchmark_scripts import load_script

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "benchmarks" / "sampling.py"


def _run(*args):
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                          env=env, timeout=120)  # fmt: skip


def test_help_names_every_part_and_target():
    result = _run("-h")
    assert result.returncode == 0, result.stderr
    for word in ("--only", "--quick", "--vocab", "--top-p", "plan, topp, probs", "1.2x"):
        assert word in result.stdout


def test_the_plan_runs_without_a_gpu():
    result = _run("--only", "plan", "--quick", "--top-p", "0.5")
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["flashinfer"].startswith("flashinfer")
    assert "\n" not in document["flashinfer"]
    rows = document["rows"]
    assert [row["case"] for row in rows] == ["batch=1", "batch=16", "batch=64"]
    assert rows[0]["logits_bytes"] == 128256 * 4
    assert rows[0]["expected_passes"] == pytest.approx(1 + 1.5 / 0.5)


@pytest.mark.parametrize("args", [("--only", "topp"), ("--only", "gemm"), ("--top-p", "1.5")])
def test_refusals_are_one_line(args):
    result = _run(*args)
    if args[-1] == "topp" and _has_cuda():
        pytest.skip("a GPU is present: the measured part would run")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1].startswith(("error", "usage", "sampling.py"))
    assert "error" in result.stderr.strip().splitlines()[-1]


def _has_cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def test_the_torch_baseline_samples_inside_the_nucleus():
    torch = pytest.importorskip("torch")
    module = load_script("sampling")
    from kernelab.spec.sampling import safe_top_p, sampling_reference

    logits = torch.randn(8, 500, generator=torch.Generator().manual_seed(0)) * 3
    top_p = safe_top_p(logits[0], 1.0, 0, 0.7)
    ref = sampling_reference(logits[:1], 1.0, 0, top_p, 0.0)
    tokens = module.torch_top_p(logits[:1].expand(200, -1), top_p)
    assert bool((ref[0][tokens] > 0).all())
