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

from kernelab.ladders.engine import SHARED_LOADS, ZERO_ALLOWANCE_PER_LOAD
from kernelab.ladders.transpose.steps import BANK_LD, LOAD_REQUESTS
from kernelab.runtime.cuda import build as cuda_build

ROOT = Path(__file__).parents[2]
needs_nvcc = pytest.mark.skipif(cuda_build.find_nvcc() is None, reason="needs nvcc")


def _kernelab(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}  # the CPU path, even on a GPU machine
    return subprocess.run([sys.executable, "-m", "kernelab", "ladder", *args],
                          capture_output=True, text=True, env=env)  # fmt: skip


@needs_nvcc
@pytest.mark.parametrize(
    "args, entries, dtype",
    [
        (["transpose"], 5, "fp32"),
        (["histogram", "--dtype", "uint8", "--bins", "64"], 5, "uint8"),
        (["transpose", "--steps", "3-4", "--dtype", "bf16"], 2, "bf16"),
    ],  # fmt: skip
)
def test_without_a_gpu_the_compile_report_and_one_line(args, entries, dtype):
    done = _kernelab(*args, "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["timed"] is False and result["gpu"] is None
    assert len(result["compile"]) == entries  # every chosen step, of the dtype asked for
    assert {r["dtype"] for r in result["compile"]} == {dtype}
    assert all(r["spill_store_bytes"] == 0 and r["arch"] == "sm_90" for r in result["compile"])
    assert "need a CUDA GPU" in done.stderr


@needs_nvcc
def test_the_scan_compile_report_shows_the_dtype_asked_for():
    done = _kernelab("scan", "--steps", "1", "--dtype", "int32", "--json")
    assert done.returncode == 0, done.stderr
    assert {r["dtype"] for r in json.loads(done.stdout)["compile"]} == {"int32"}


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
        (["histogram", "--profile"], "needs a CUDA GPU"),
        (["transpose", "--plot", "x.png"], "--plot"),
        (["sgemm", "--dtype", "bf16"], "--dtype"),
        (["transpose", "--dtype", "fp32,bf16"], "one --dtype"),
        (["scan", "--sizes", "2^38"], "2^38"),
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


# ---- on a GPU: the whole path, check then time, and the profile ----------------------------


def _kernelab_gpu(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kernelab", "ladder", *args],
                          capture_output=True, text=True)  # fmt: skip


@pytest.mark.gpu
@pytest.mark.parametrize(
    "args, anchor",
    [
        (["transpose", "--sizes", "257x4099", "--dtype", "bf16"], "torch.transpose"),
        (["histogram", "--sizes", "100003", "--bins", "64"], "torch.bincount"),
    ],  # fmt: skip
)
def test_on_a_gpu_every_step_is_checked_then_timed_beside_torch(args, anchor):
    done = _kernelab_gpu(*args, "--max-time", "0.2", "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["timed"] is True and all(c["ok"] for c in result["checks"])
    names = {r["step"] for r in result["rows"]}
    assert {"copy", anchor} <= names and sum(":" in n for n in names) >= 3
    assert all(r["gbps"] > 0 and r["pct_of_copy"] > 0 for r in result["rows"])
    if args[0] == "histogram":
        assert {r["distribution"] for r in result["rows"]} == {"uniform", "skewed"}


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_on_a_gpu_the_profile_fills_each_steps_proof_metric(dtype):
    from kernelab.profiling.ncu import find_ncu

    try:
        find_ncu()
    except Exception:
        pytest.skip("needs ncu")
    done = _kernelab_gpu("transpose", "--profile", "--sizes", "2048", "--dtype", dtype, "--json")
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)["profile"]
    assert [r["step"] for r in rows] == [f"transpose:0{i}" for i in range(1, 6)]
    assert all(r["value"] is not None for r in rows)
    by_step = {r["step"]: r for r in rows}
    # a column walk of step 2 conflicts 32-way (fp32) or 16-way (bf16): 31 or 15 extra
    # wavefronts per shared load. Step 2's own proof is its store sectors; the conflicts are
    # step 3's proof, profiled in the same run, so every step's row carries them.
    plain = by_step["transpose:02"]["metrics"]
    assert plain[BANK_LD] > 8 * plain[SHARED_LOADS] > 0
    for fixed in ("transpose:03", "transpose:04"):
        assert by_step[fixed]["per_load"] <= ZERO_ALLOWANCE_PER_LOAD, by_step[fixed]
        assert by_step[fixed]["verdict"] == "PASS"
    # step 5 moves pairs: the same bytes in half the warp-wide load instructions, so its
    # proof (global load requests) must fall below step 4's
    wide = by_step["transpose:05"]
    assert wide["metrics"][LOAD_REQUESTS] < by_step["transpose:04"]["metrics"][LOAD_REQUESTS]
    assert wide["verdict"] == "PASS", wide
