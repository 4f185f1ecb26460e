"""`kernelab ladder` as a newcomer meets it, through the real command in a subprocess: bad
output paths and --max-time refused in one line (exit 2) before any work, and the compile
table fitted to an 80-column terminal while a pipe gets it whole."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from kernelab.ladders.sgemm.steps import get_step
from kernelab.runtime.cuda import build as cuda_build

SRC = Path(__file__).resolve().parents[2] / "src"
needs_nvcc = pytest.mark.skipif(cuda_build.find_nvcc() is None, reason="needs nvcc")
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _kernelab(*argv: str, env: dict | None = None, cwd=None) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "TTY_COMPATIBLE")}
    base["PYTHONPATH"] = os.pathsep.join(filter(None, [str(SRC), base.get("PYTHONPATH")]))
    return subprocess.run(
        [sys.executable, "-m", "kernelab", *argv],
        capture_output=True, text=True, timeout=900, env={**base, **(env or {})}, cwd=cwd,
    )  # fmt: skip


def _refused_in_one_line(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 2, (result.returncode, result.stderr)
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("kernelab: "), result.stderr
    return lines[0]


def test_an_unwritable_out_path_is_refused_before_any_work():
    result = _kernelab("ladder", "sgemm", "--out", "/proc/kernelab-x/r.json")
    line = _refused_in_one_line(result)
    assert "--out" in line and "/proc/kernelab-x/r.json" in line
    assert not Path("/proc/kernelab-x").exists()


def test_a_plot_path_with_an_unsupported_suffix_is_refused_and_nothing_written(tmp_path):
    result = _kernelab("ladder", "sgemm", "--plot", "bad/p.txt", cwd=tmp_path)
    assert "--plot writes .png or .svg" in _refused_in_one_line(result)
    assert list(tmp_path.iterdir()) == []  # not even the folder "bad"


def test_an_out_path_that_is_a_folder_is_refused(tmp_path):
    line = _refused_in_one_line(_kernelab("ladder", "hgemm", "--out", str(tmp_path)))
    assert "is a folder" in line
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("ladder", ["sgemm", "hgemm"])
@pytest.mark.parametrize("max_time", ["0", "-1", "nan", "inf"])
def test_max_time_must_be_a_positive_finite_number(ladder, max_time):
    line = _refused_in_one_line(_kernelab("ladder", ladder, "--max-time", max_time))
    assert "--max-time must be a positive number of seconds" in line


@needs_nvcc
@pytest.mark.skipif(sys.platform != "linux", reason="TTY_COMPATIBLE and COLUMNS as on Linux")
def test_the_compile_table_fits_an_80_column_terminal_and_a_pipe_gets_it_whole():
    step = get_step(13)  # the longest technique of the ladder
    argv = ("ladder", "sgemm", "--steps", "1,13")
    no_gpu = {"CUDA_VISIBLE_DEVICES": ""}  # the compile table, also on a machine with a GPU
    terminal = _kernelab(
        *argv, env={**no_gpu, "TTY_COMPATIBLE": "1", "COLUMNS": "80", "NO_COLOR": "1"}
    )
    assert terminal.returncode == 0, terminal.stderr
    lines = ANSI.sub("", terminal.stdout).splitlines()
    assert lines and max(len(line) for line in lines) <= 80, terminal.stdout
    assert "sgemm:13" in terminal.stdout and "technique: on a wider terminal" in terminal.stdout

    piped = _kernelab(*argv, env=no_gpu)
    assert piped.returncode == 0, piped.stderr
    assert step.technique in piped.stdout  # whole, on one line, never cut to "..."
