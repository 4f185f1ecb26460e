"""`kernelab compare OLD NEW`: works on record files, on a machine without a GPU."""

from __future__ import annotations

import json
import subprocess
import sys

from test_records import make_record

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
