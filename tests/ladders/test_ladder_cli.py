"""`kernelab ladder` as a newcomer meets it, through the real command in a subprocess: bad
output paths and --max-time refused in one line (exit 2) before any work, and the compile
table fitted to an 80-column terminal while a pipe gets it whole. In this process: every
ladder's options (sizes, steps, dtypes, modes, --profile, --timeout) refused in one line
before anything is compiled, and the one size grammar all ladders share."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
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
    assert "--max-time must be a positive, finite number (seconds)" in line


# --- in this process: refused before any compile ---------------------------------------------


@pytest.fixture
def no_compile(monkeypatch):
    """Every ladder's compile report raises: a refusal must come before it. No GPU either, so
    the answer does not depend on the machine."""
    import importlib

    def compiled(*_args, **_kwargs):
        raise AssertionError("compiled before the options were checked")

    for ladder, name in (("sgemm", "compile_report"), ("hgemm", "compile_report"),
                         ("reduce", "compile_report"), ("transpose", "compile_transpose"),
                         ("histogram", "compile_histogram"), ("scan", "compile_scan")):  # fmt: skip
        monkeypatch.setattr(importlib.import_module(f"kernelab.ladders.{ladder}.ladder"), name,
                            compiled)  # fmt: skip
    for module in (
        "kernelab.commands.ladder",
        "kernelab.commands.ladder_hgemm",
        "kernelab.commands.ladder_primitives",
    ):
        monkeypatch.setattr(f"{module}._has_gpu", lambda: False)


def _one_line(capsys, *argv: str) -> str:
    from kernelab.cli import main

    code = main(["ladder", *argv])
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert code == 2 and captured.out == "", (code, captured)
    assert len(lines) == 1 and lines[0].startswith("kernelab: "), captured.err
    return lines[0]


@pytest.mark.parametrize(
    "argv, words",
    [
        # sizes: bounded before a power is computed, and reduce capped by memory
        (["reduce", "--sizes", "2^64"], "below 2^37 elements"),
        (["reduce", "--sizes", "3^99999999"], "below 2^37 elements"),
        (["reduce", "--sizes", "2^37"], "memory is the bound"),
        (["scan", "--sizes", "2^38"], "below 2^38"),
        (["histogram", "--sizes", "1T"], "histogram sizes are positive value counts"),
        (["sgemm", "--sizes", "2^31"], "below 2^31"),
        # blanks and empty values: a typo, not the default
        (["reduce", "--steps", "1,,3"], "an empty step in '1,,3'"),
        (["reduce", "--steps", ""], "no steps in ''"),
        (["reduce", "--sizes", "1024,,2048"], "has an empty item"),
        (["reduce", "--sizes", ""], "--sizes needs a value"),
        (["transpose", "--sizes", "64,"], "has an empty item"),
        (["reduce", "--dtype", "fp32,,bf16"], "has an empty item"),
        (["reduce", "--dtype", ""], "--dtype needs a value"),
        (["scan", "--dtype", ""], "--dtype needs a value"),
        (["hgemm", "--mode", "cold,,graph"], "has an empty item"),
        (["hgemm", "--mode", ""], "--mode needs a value"),
        # steps: a malformed range says so; an unknown name lists every step's slug
        (["reduce", "--steps", "-1"], "step range '-1' is malformed"),
        (["reduce", "--steps", "1-"], "step range '1-' is malformed"),
        (["reduce", "--steps", "foo"], "known: reduce:01 interleaved, reduce:02 strided_index"),
        (["scan", "--steps", "decoupled_lookbak"], "did you mean decoupled_lookback"),
        # dtypes: who takes --dtype, and one dtype where one is timed a run
        (["sgemm", "--dtype", "fp16"], "reduce, transpose, histogram and scan ladders"),
        (["transpose", "--dtype", "fp32,bf16"], "takes one --dtype (fp32 or bf16) per run"),
        # --profile needs a GPU on every ladder
        (["reduce", "--profile"], "ladder reduce --profile needs a CUDA GPU"),
        (["transpose", "--profile"], "ladder transpose --profile needs a CUDA GPU"),
        (["histogram", "--profile"], "ladder histogram --profile needs a CUDA GPU"),
        (["scan", "--profile"], "ladder scan --profile needs a CUDA GPU"),
        # --timeout and --max-time checked whether or not the run is spread
        (["reduce", "--timeout", "0"], "--timeout must be a positive, finite number"),
        (["sgemm", "--timeout", "nan"], "--timeout must be a positive, finite number"),
        (["scan", "--max-time", "inf"], "--max-time must be a positive, finite number"),
        # --out writes .json records, and "" is no file name
        (["reduce", "--out", "r.txt"], "--out writes .json files"),
        (["sgemm", "--out", "r.json.xz"], "--out writes .json files"),
        (["scan", "--out", ""], "--out needs a path"),
    ],
)
def test_bad_options_are_one_line_before_any_compile(no_compile, capsys, tmp_path, monkeypatch,
                                                     argv, words):  # fmt: skip
    monkeypatch.chdir(tmp_path)
    start = time.monotonic()
    assert words in _one_line(capsys, *argv)
    assert time.monotonic() - start < 10  # 3^99999999 is refused, not evaluated
    assert list(tmp_path.iterdir()) == []


def test_every_ladder_reads_sizes_in_one_grammar():
    from kernelab.commands.ladder import parse_sizes
    from kernelab.commands.ladder_primitives import _primitive_sizes, _scan_sizes, parse_counts

    assert parse_sizes("1K,2^11, 4096") == [1024, 2048, 4096]
    assert parse_counts("1M,2^20,1048576") == [2**20] * 3
    assert _scan_sizes("64M,2^26") == [2**26] * 2
    assert _primitive_sizes("histogram", "1M,2^20") == [2**20] * 2
    assert _primitive_sizes("transpose", "2^10x4K,512") == [(1024, 4096), (512, 512)]


def test_the_sizes_help_describes_each_ladder(capsys):
    from kernelab.cli import main

    main(["ladder", "--help"])
    text = " ".join(capsys.readouterr().out.replace("│", " ").split())  # rich's panel edges
    for words in ("reduce: element counts (default 2^20,2^24,2^26,2^28)",
                  "transpose: ROWSxCOLS or N", "histogram: value counts", "sgemm, hgemm: square N"):  # fmt: skip
        assert words in text


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
