"""`kernelab ladder scan` without a GPU: the compile report of every kernel with one line
saying what needs a GPU, --json, and bad input in one line with exit 2; the benchmark script
imports, shows -h and refuses to run without a GPU in one line; its verdicts from timed rows."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from benchmark_scripts import load_script

from kernelab.runtime.cuda import build as cuda_build

ROOT = Path(__file__).parents[3]
SCRIPT = ROOT / "benchmarks" / "scan_ladder.py"
needs_nvcc = pytest.mark.skipif(cuda_build.find_nvcc() is None, reason="needs nvcc")


def _kernelab(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}  # the CPU path, even on a GPU machine
    return subprocess.run([sys.executable, "-m", "kernelab", "ladder", "scan", *args],
                          capture_output=True, text=True, env=env)  # fmt: skip


@needs_nvcc
@pytest.mark.parametrize(
    "args, entries, dtype",
    [([], 9, "fp32"), (["--steps", "3-4", "--dtype", "int32"], 4, "int32")],
)
def test_without_a_gpu_the_compile_report_and_one_line(args, entries, dtype):
    done = _kernelab(*args, "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["timed"] is False and result["gpu"] is None and result["ladder"] == "scan"
    assert len(result["compile"]) == entries  # every kernel of every chosen step
    assert {r["dtype"] for r in result["compile"]} == {dtype}  # the dtype asked for
    assert all(r["spill_store_bytes"] == 0 and r["arch"] == "sm_90" for r in result["compile"])
    if "--steps" not in args:
        assert {r["kernel"] for r in result["compile"]} >= {
            "scan_wide",
            "scan_lookback",
            "scan_tiles_seeded",
        }
    assert "need a CUDA GPU" in done.stderr


@pytest.mark.parametrize(
    "args, words",
    [
        (["--sizes", "0"], "positive"),
        (["--sizes", "12x3"], "positive"),
        (["--sizes", str(1 << 38)], "2^38"),
        (["--dtype", "fp64"], "dtype"),
        (["--dtype", "bf16"], "dtype"),
        (["--steps", "6"], "step"),
        (["--mode", "warm"], "mode"),
        (["--bins", "8"], "--bins"),
        (["--plot", "x.png"], "--plot"),
        (["--profile", "--sizes", "10,20"], "one size"),
        (["--profile", "--steps", "1"], "needs a CUDA GPU"),
        (["--max-time", "0"], "max-time"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args, words):
    done = _kernelab(*args)
    assert done.returncode == 2, (done.stdout, done.stderr)
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and words in lines[0], done.stderr


def test_the_benchmark_script_imports_and_shows_help():
    done = subprocess.run([sys.executable, str(SCRIPT), "-h"], capture_output=True, text=True)
    assert done.returncode == 0 and "--out" in done.stdout and "--quick" in done.stdout
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    done = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, env=env)
    assert done.returncode == 2 and "needs a CUDA GPU" in done.stderr


def _script():
    return load_script("scan_ladder")


def _row(step, ms, pct, vs_torch=None):
    return {"step": step, "shape": {"n": 64}, "median_ms": ms, "pct_of_copy": pct,
            "speedup_vs_anchor": vs_torch}  # fmt: skip


def test_benchmark_verdicts_from_rows():
    """Stand-in rows: scan:05 at 92 % of copy, 1.5x torch, 1.04x CUB's time passes all three;
    at 1.06x CUB's it fails that one; without a CUB row that target is not measured."""
    script = _script()
    rows = [_row("copy", 1.0, 100.0), _row("torch.cumsum", 1.5, 60.0, 1.0),
            _row("cub", 1.0, 94.0, 1.5), _row("scan:05", 1.04, 92.0, 1.5 / 1.04)]  # fmt: skip
    got = script.verdicts(rows, 64)
    assert (got["copy_target"], got["torch_target"], got["cub_target"]) == (True, True, True)
    rows[-1] = _row("scan:05", 1.06, 89.0, 1.5 / 1.06)
    got = script.verdicts(rows, 64)
    assert (got["copy_target"], got["torch_target"], got["cub_target"]) == (False, True, False)
    got = script.verdicts([r for r in rows if r["step"] != "cub"], 64)
    assert got["cub_target"] is None and got["time_vs_cub"] is None
    assert script.verdicts(rows[:3], 64)["copy_target"] is None  # scan:05 not timed
