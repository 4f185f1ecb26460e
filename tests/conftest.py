"""Shared test setup: tests marked `gpu` skip themselves on a machine without CUDA; the quick
subset's slow list; the stand-in ncu fixture."""

from __future__ import annotations

import functools
import json
import os
import sys
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"


@functools.cache
def _has_cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


# What the quick subset (`python3 -m pytest -q -m "not slow"`) leaves out: the modules and
# tests that took 20 s or more on the 2-core CI machine without a GPU (pytest --durations,
# December 2026): CUDA compiles and host emulation of the SGEMM steps, Triton kernels under
# the interpreter, the evaluator's child processes, torch.profiler runs, the CPU lab run.
# Together about 8 of the suite's 11 minutes there; CI runs everything. A test module that
# grows past 20 s belongs here, or its slow tests do (file::test, parameters included).
SLOW = (
    "test_sgemm_ladder.py",
    "test_kernelbench_level1_script.py",  # kernelab eval in a process per problem
    "test_spread_ray.py",  # a local Ray session, actors importing torch
    "test_spread_ladders_ray.py",
    "test_decode_step_benchmark.py::test_a_case_runs_end_to_end_on_the_cpu_with_stand_in_timers",
    "test_decode_step_benchmark.py::test_kernelab_timeline_runs_on_the_step_loop_without_a_gpu",
    # the Triton kernels under the interpreter (tests/ops/<op>/)
    "test_vector_add.py",
    "test_softmax.py",
    "test_softmax_gpu.py",
    "test_softmax_shared_memory.py",
    "test_norms.py",
    "test_matmul.py",
    "test_eval_cli.py",
    "test_eval_cheats.py",
    "test_hgemm.py",
    "test_eval_verdict.py",
    "test_timeline_capture.py",
    "test_lab.py::test_cpu_lab_quick_writes_a_report_with_every_section",
    "test_readme.py::test_the_committed_pages_are_what_the_records_give",
    # the reduction ladder: nvcc builds of 10 steps x 3 dtypes and their host emulation
    "test_reduce_steps.py",
    # the transpose and histogram ladders: nvcc builds and g++ host emulation of every step
    "test_transpose_ladder_cpu.py",
    "test_histogram_ladder_cpu.py",
    # the scan ladder: nvcc builds and g++ host emulation of every step
    "test_scan_ladder_cpu.py",
)


def is_slow(nodeid: str) -> bool:
    """Whether a test's node id ("tests/ops/x/test_x.py::test_y[p]") falls under SLOW (by the
    module's file name, wherever it sits)."""
    path, _, name = nodeid.partition("::")
    module = Path(path).name
    return any(entry == module or entry == f"{module}::{name.split('[', 1)[0]}" for entry in SLOW)


def pytest_collection_modifyitems(config, items):
    for item in items:
        if is_slow(item.nodeid):
            item.add_marker(pytest.mark.slow)
    if _has_cuda():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (run on the H200: pytest -m gpu)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def fixtures_dir() -> Path:
    return FIXTURES


# A stand-in ncu on PATH for the profiling tests: it logs its argv and writes the committed
# focused report (or fails as FAKE_NCU_MODE asks).
FAKE_NCU = """#!{python}
import json, lzma, os, shutil, sys
args = sys.argv[1:]
with open(os.environ["FAKE_NCU_LOG"], "w") as log:
    json.dump(args, log)
mode = os.environ.get("FAKE_NCU_MODE", "ok")
if mode == "perm":
    print("==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU "
          "Performance Counters on the target device 0.")
    sys.exit(1)
if mode == "none":
    print("==PROF== Disconnected from process 1234")
    print("==WARNING== No kernels were profiled.")
    sys.exit(0)
if mode == "fail":
    print("Traceback (most recent call last):", file=sys.stderr)
    print("==ERROR== The application returned an error code (1).", file=sys.stderr)
    sys.exit(1)
out = args[args.index("-o") + 1] + ".ncu-rep"
with lzma.open(os.environ["FAKE_NCU_REPORT"]) as src, open(out, "wb") as dst:
    shutil.copyfileobj(src, dst)
print("==PROF== Report: " + out)
"""


@pytest.fixture
def fake_ncu(tmp_path, monkeypatch):
    """A stand-in ncu on PATH; returns a function giving the argv of its last call."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    script = bindir / "ncu"
    script.write_text(FAKE_NCU.format(python=sys.executable))
    script.chmod(0o755)
    log = tmp_path / "ncu-argv.json"
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.delenv("KERNELAB_NCU", raising=False)
    monkeypatch.setenv("FAKE_NCU_LOG", str(log))
    monkeypatch.setenv("FAKE_NCU_REPORT", str(FIXTURES / "ncu" / "gemm_focused.ncu-rep.xz"))
    monkeypatch.setenv("KERNELAB_PROFILE_DIR", str(tmp_path / "profiles"))
    return lambda: json.loads(log.read_text())
