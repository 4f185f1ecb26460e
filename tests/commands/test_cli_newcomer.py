"""What a newcomer trips on (issue 32): one line and exit 2 instead of a traceback, -h and
--version, exit-check's tags and exit status, --kernel on an imported report, timeline's
failed run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import kernelab
from kernelab import __version__
from kernelab.cli import main

FIXTURE_REPORT = "tests/fixtures/ncu/gemm_focused_raw.csv"


def _one_line_exit_2(capsys, argv) -> str:
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith("kernelab:") and captured.err.count("\n") == 1
    return captured.err


def test_version_flag_prints_the_version(capsys):
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"kernelab {__version__}"


@pytest.mark.parametrize("argv", [["-h"], ["gpus", "-h"], ["compare", "-h"]])
def test_dash_h_is_help(argv, capsys):
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert out.startswith("Usage: kernelab") and "--help" in out


def test_lab_out_that_is_a_file_is_one_line(tmp_path, capsys):
    afile = tmp_path / "afile"
    afile.write_text("")
    assert "is a file" in _one_line_exit_2(capsys, ["lab", "--quick", "--out", str(afile)])


def test_roofline_plot_into_a_missing_folder_is_refused(tmp_path, capsys):
    target = tmp_path / "nonexistent" / "dir" / "r.png"
    argv = ["roofline", "gemm", "--m", "64", "--n", "64", "--k", "64", "--plot", str(target)]
    assert "no folder" in _one_line_exit_2(capsys, argv)
    assert not (tmp_path / "nonexistent").exists()


def test_roofline_plot_into_an_existing_folder_still_writes(tmp_path, capsys):
    target = tmp_path / "r.png"
    argv = ["roofline", "gemm", "--m", "64", "--n", "64", "--k", "64", "--plot", str(target)]
    assert main([*argv, "--json"]) == 0
    assert target.stat().st_size > 0


def _gate(monkeypatch, criteria):
    from kernelab.lab import gate

    monkeypatch.setattr(gate, "evaluate_gate", lambda results, docs, this_run=False: criteria)


def _a_results_folder(folder: Path) -> Path:
    """A folder with one record file: exit-check judges it (an empty one is refused)."""
    from record_factory import make_record

    from kernelab.harness.records import save_records

    save_records([make_record()], folder / "records.json")
    return folder


def _criteria(phase_ok: bool, kernelab_ok: bool):
    from kernelab.lab.gate import Criterion

    return [
        Criterion("the phase's bar", phase_ok, "evidence one", "phase"),
        Criterion("kernelab's bar", kernelab_ok, "evidence two", "kernelab"),
    ]


@pytest.mark.parametrize(
    ("phase_ok", "kernelab_ok", "strict", "status"),
    [
        (True, True, False, 0),
        (True, False, False, 0),  # a kernelab-bar FAIL is shown, not gated on by default
        (True, False, True, 1),  # ... and gated on with --strict
        (False, True, False, 1),
        (False, True, True, 1),
    ],
)
def test_exit_check_status(tmp_path, monkeypatch, capsys, phase_ok, kernelab_ok, strict, status):
    _gate(monkeypatch, _criteria(phase_ok, kernelab_ok))
    folder = _a_results_folder(tmp_path)
    argv = ["exit-check", "--results", str(folder), *(["--strict"] if strict else [])]
    assert main([*argv, "--json"]) == status
    data = json.loads(capsys.readouterr().out)
    assert data["phase_passed"] == phase_ok and data["strict"] == strict


def test_exit_check_keeps_its_bar_tags(tmp_path, monkeypatch, capsys):
    _gate(monkeypatch, _criteria(True, False))
    main(["exit-check", "--results", str(_a_results_folder(tmp_path))])
    out = capsys.readouterr().out
    assert "PASS  [phase] the phase's bar" in out
    assert "FAIL  [kernelab] kernelab's bar" in out


def test_exit_check_help_documents_the_exit_status(capsys):
    main(["exit-check", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "--strict" in out and "Exit status" in out


def test_exit_check_results_that_is_a_file_is_one_line(tmp_path, capsys):
    afile = tmp_path / "afile"
    afile.write_text("")
    _one_line_exit_2(capsys, ["exit-check", "--results", str(afile)])


def test_profile_import_filters_by_kernel(capsys):
    assert main(["profile", "--import", FIXTURE_REPORT, "--kernel", "nvjet", "--json"]) == 0
    names = [k["name"] for k in json.loads(capsys.readouterr().out)["kernels"]]
    assert names and all("nvjet" in name for name in names)

    assert main(["profile", "--import", FIXTURE_REPORT, "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)["kernels"]) > len(names)


def test_profile_import_with_no_matching_kernel_is_one_line(capsys):
    err = _one_line_exit_2(capsys, ["profile", "--import", FIXTURE_REPORT, "--kernel", "zzz"])
    assert "no kernel matches" in err and "nvjet" in err


def test_profile_import_with_a_broken_regex_is_one_line(capsys):
    _one_line_exit_2(capsys, ["profile", "--import", FIXTURE_REPORT, "--kernel", "("])


def test_failed_timeline_says_it_once_and_leaves_no_folder(tmp_path):
    script = tmp_path / "bad.py"
    script.write_text('raise SystemExit("boom")\n')
    done = subprocess.run(
        [sys.executable, "-m", "kernelab.cli", "timeline", "--", "python", str(script)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(Path(kernelab.__file__).parents[1])},
    )
    assert done.returncode == 2
    error = [line for line in done.stderr.splitlines() if line.startswith("kernelab:")]
    assert error == ["kernelab: the workload exited with status boom"]
    assert not (tmp_path / "kernelab-timeline").exists()
