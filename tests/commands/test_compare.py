"""`kernelab compare OLD NEW`: works on record files, on a machine without a GPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from record_factory import make_record

from kernelab.cli import main
from kernelab.harness.records import save_records


def write_pair(tmp_path):
    old = save_records(
        [
            make_record((1.0, 0.002), implementation="x"),
            make_record((1.0, 0.002), implementation="y"),
        ],
        tmp_path / "old.json",
    )
    new = save_records(
        [
            make_record((0.5, 0.002), implementation="x"),
            make_record((1.004, 0.002), implementation="y"),
        ],
        tmp_path / "new.json",
    )
    return old, new


def test_compare_json(tmp_path, capsys):
    old, new = write_pair(tmp_path)
    assert main(["compare", str(old), str(new), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    labels = {c["implementation"]: c["label"] for c in result["comparisons"]}
    assert labels == {"x": "FAST", "y": "SAME"}
    assert result["counts"] == {"FAST": 1, "SLOW": 0, "SAME": 1}


def test_compare_table(tmp_path):
    old, new = write_pair(tmp_path)
    done = subprocess.run(
        [sys.executable, "-m", "kernelab.cli", "compare", str(old), str(new)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0
    assert "FAST" in done.stdout and "SAME" in done.stdout and "x" in done.stdout


def test_compare_bad_file_is_one_line(tmp_path, capsys):
    old, _ = write_pair(tmp_path)
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2]")
    assert main(["compare", str(old), str(bad), "--json"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("kernelab:") and captured.err.count("\n") == 1


def _one_line_exit_2(capsys, argv) -> str:
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("kernelab:") and captured.err.count("\n") == 1
    return captured.err


def test_compare_a_folder_is_one_line(tmp_path, capsys):
    old, _ = write_pair(tmp_path)
    folder = tmp_path / "adir"
    folder.mkdir()
    err = _one_line_exit_2(capsys, ["compare", str(folder), str(old)])
    assert "is a folder" in err


@pytest.mark.parametrize("median", [0, None, "fast", -1.0, float("nan"), True])
def test_compare_malformed_median_is_one_line(tmp_path, capsys, median):
    old, new = write_pair(tmp_path)
    data = json.loads(new.read_text())
    data[1]["stats"]["median"] = median
    new.write_text(json.dumps(data))
    err = _one_line_exit_2(capsys, ["compare", str(old), str(new), "--json"])
    assert "record 1" in err and "stats.median" in err and repr(median) in err


@pytest.mark.parametrize("noise", ["wide", -0.5])
def test_compare_malformed_noise_is_one_line(tmp_path, capsys, noise):
    old, new = write_pair(tmp_path)
    data = json.loads(old.read_text())
    data[0]["stats"]["rel_noise"] = noise
    old.write_text(json.dumps(data))
    err = _one_line_exit_2(capsys, ["compare", str(old), str(new)])
    assert "record 0" in err and "rel_noise" in err


def test_compare_shape_not_an_object_is_one_line(tmp_path, capsys):
    old, new = write_pair(tmp_path)
    data = json.loads(new.read_text())
    data[0]["shape"] = [4096, 4096]
    new.write_text(json.dumps(data))
    assert "shape" in _one_line_exit_2(capsys, ["compare", str(old), str(new)])


def test_compare_fail_on_slow_exits_1_only_when_slow(tmp_path, capsys):
    old, new = write_pair(tmp_path)
    # new is FAST and SAME against old: no SLOW, exit 0 even with the flag
    assert main(["compare", str(old), str(new), "--fail-on-slow", "--json"]) == 0
    capsys.readouterr()
    # the other way round x is SLOW (1.0 against 0.5)
    assert main(["compare", str(new), str(old), "--fail-on-slow", "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["counts"]["SLOW"] == 1
    # without the flag a SLOW pair does not change the exit status
    assert main(["compare", str(new), str(old), "--json"]) == 0


def test_compare_output_is_whole_when_piped(tmp_path):
    """Piped, there is no screen to fit: no cell clipped to "...", no line wrapped at 80."""
    long_name = "triton.softmax_with_a_rather_long_implementation_name"
    old = save_records([make_record((1.0, 0.002), implementation=long_name)], tmp_path / "o.json")
    new = save_records([make_record((2.0, 0.002), implementation=long_name)], tmp_path / "n.json")
    done = subprocess.run(
        [sys.executable, "-m", "kernelab.cli", "compare", str(old), str(new)],
        capture_output=True,
        text=True,
        env={k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")},
    )
    assert done.returncode == 0
    assert long_name in done.stdout and "…" not in done.stdout
    summary = next(line for line in done.stdout.splitlines() if line.startswith("FAST"))
    assert len(summary) > 80 and summary.rstrip().endswith("samples)")
