"""`kernelab ladder transpose|histogram` without a GPU: the compile report with one line
saying what needs a GPU, --json, and bad input in one line with exit 2; the benchmark script
imports and shows -h on the CPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kernelab.runtime.cuda import build as cuda_build

ROOT = Path(__file__).parents[2]
needs_nvcc = pytest.mark.skipif(cuda_build.find_nvcc() is None, reason="needs nvcc")


def _kernelab(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}  # the CPU path, even on a GPU machine
    return subprocess.run([sys.executable, "-m", "kernelab", "ladder", *args],
                          capture_output=True, text=True, env=env)  # fmt: skip


@needs_nvcc
@pytest.mark.parametrize(
    "args, entries",
    [
        (["transpose"], 8),
        (["histogram", "--dtype", "uint8", "--bins", "64"], 6),
        (["transpose", "--steps", "3-4", "--dtype", "bf16"], 4),
    ],  # fmt: skip
)
def test_without_a_gpu_the_compile_report_and_one_line(args, entries):
    done = _kernelab(*args, "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["timed"] is False and result["gpu"] is None
    assert len(result["compile"]) == entries  # every chosen step, both dtype entries
    assert all(r["spill_store_bytes"] == 0 and r["arch"] == "sm_90" for r in result["compile"])
    assert "need a CUDA GPU" in done.stderr


@pytest.mark.parametrize(
    "args, words",
    [
        (["transpose", "--sizes", "0"], "positive"),
        (["transpose", "--sizes", "3x4x5"], "ROWSxCOLS"),
        (["transpose", "--sizes", "4294967296x2"], "2^31"),
        (["transpose", "--dtype", "int8"], "dtype"),
        (["transpose", "--bins", "8"], "--bins"),
        (["histogram", "--dtype", "fp32"], "dtype"),
        (["histogram", "--bins", "0"], "1..4096"),
        (["histogram", "--bins", "4097"], "1..4096"),
        (["histogram", "--sizes", "-3"], "positive"),
        (["histogram", "--sizes", "1099511627776"], "2^40"),
        (["histogram", "--steps", "7"], "step"),
        (["histogram", "--mode", "warm"], "mode"),
        (["histogram", "--profile", "--sizes", "10,20"], "one size"),
        (["transpose", "--plot", "x.png"], "--plot"),
        (["sgemm", "--dtype", "bf16"], "--dtype"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args, words):
    done = _kernelab(*args)
    assert done.returncode == 2, (done.stdout, done.stderr)
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and words in lines[0], done.stderr


def test_the_benchmark_script_imports_and_shows_help():
    script = ROOT / "benchmarks" / "primitives_ladders.py"
    done = subprocess.run([sys.executable, str(script), "-h"], capture_output=True, text=True)
    assert done.returncode == 0 and "--out" in done.stdout and "--quick" in done.stdout
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env)
    assert done.returncode == 2 and "needs a CUDA GPU" in done.stderr
