"""The held KernelBench fixture suite spread over the GPUs of this machine through Ray: every
verdict the one the local path gives, problem by problem, each naming a real card; and a
sweep whose records name theirs. Needs two CUDA GPUs and Ray."""

from __future__ import annotations

import io
import json
from contextlib import redirect_stdout
from pathlib import Path

import pytest

KB = Path(__file__).parents[1] / "fixtures" / "eval" / "kernelbench"
ARGS = ["--device", "cuda", "--seed", "7", "--max-time", "0.2", "--timeout", "120", "--json"]


def _two_gpus():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available() or torch.cuda.device_count() < 2:
        pytest.skip("needs two CUDA GPUs")
    pytest.importorskip("ray")


def _run(*args) -> tuple[int, dict]:
    from kernelab.cli import main

    out = io.StringIO()
    with redirect_stdout(out):
        code = main(list(args))
    return code, json.loads(out.getvalue())


@pytest.mark.gpu
def test_the_kernelbench_suite_over_two_gpus_matches_the_local_verdicts(tmp_path):
    _two_gpus()
    code, local = _run("eval", "--suite", str(KB), *ARGS, "--gpus", "1")
    spread_code, spread = _run(
        "eval", "--suite", str(KB), *ARGS, "--gpus", "2", "--tasks-dir", str(tmp_path)
    )
    assert code == spread_code == 1  # the known-wrong solutions
    assert [(r["problem"], r["solution"], r["status"]) for r in spread["rows"]] == [
        (r["problem"], r["solution"], r["status"]) for r in local["rows"]
    ]
    assert {row["ran_on"]["gpu"] for row in spread["rows"]} == {"0", "1"}
    assert all("NVIDIA" in row["ran_on"]["name"] for row in spread["rows"])
    for row in spread["rows"]:
        if row["status"] == "pass":  # timed against baselines measured on the same card
            assert row["timings"] and row["timings"][0]["speedup_vs_eager"] is not None


@pytest.mark.gpu
def test_a_sweep_over_two_gpus_keeps_its_records_per_card(tmp_path):
    _two_gpus()
    out = tmp_path / "sweep.json"
    code, result = _run(
        "bench", "torch.softmax", "--sizes", "1Kx1K,2Kx2K,4Kx4K,8Kx1K", "--dtype", "bf16",
        "--no-baselines", "--max-time", "0.2", "--gpus", "2", "--tasks-dir", str(tmp_path),
        "--out", str(out), "--json",
    )  # fmt: skip
    assert code == 0 and all(row["check_ok"] for row in result["rows"])
    records = json.loads(out.read_text())
    assert len(records) == 4
    assert {r["extra"]["ran_on"]["gpu"] for r in records} <= {"0", "1"}
    assert len({r["gpu"] for r in records}) == 1  # one card model per file
