"""`kernelab hierarchy --import`: an edited or damaged record is one line, an unknown GPU or
time is said as unknown, and options that only shape a new measurement are refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernelab.cli import main

RECORD = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "h200" / "hierarchy.json"

pytestmark = pytest.mark.skipif(not RECORD.exists(), reason="needs the committed H200 record")


def _edited(tmp_path, path: str, value) -> Path:
    data = json.loads(RECORD.read_text())
    *parents, last = path.split(".")
    target = data
    for key in parents:
        target = target[key]
    target[last] = value
    edited = tmp_path / "hierarchy.json"
    edited.write_text(json.dumps(data))
    return edited


@pytest.mark.parametrize(
    ("path", "value", "said"),
    [
        ("latencies.l1.cycles_per_load", None, "latencies.l1.cycles_per_load is null"),
        ("latencies.l1.cycles_per_load", "x", 'latencies.l1.cycles_per_load is "x"'),
        ("latencies.hbm.samples_ns", [1.0, "y"], "latencies.hbm.samples_ns is"),
        ("bandwidths.smem.gbps", float("nan"), "bandwidths.smem.gbps is NaN"),
        ("bandwidths.hbm_copy.throttled", "no", "bandwidths.hbm_copy.throttled"),
        ("latencies.l2", None, "latencies.l2 must be a JSON object"),
        ("warnings", None, "warnings is null; it must be a list of text"),
        ("warnings", [3], "warnings is [3]"),
        ("quick", "yes", 'quick is "yes"'),
        ("latencies", [], "'latencies' must map a level"),
    ],
)
def test_an_edited_record_is_one_line_and_exit_2(tmp_path, capsys, path, value, said):
    edited = _edited(tmp_path, path, value)
    for json_flag in ([], ["--json"]):
        assert main(["hierarchy", "--import", str(edited), *json_flag]) == 2
        captured = capsys.readouterr()
        assert captured.out == ""
        assert captured.err.startswith("kernelab: ") and captured.err.count("\n") == 1
        assert said in captured.err, captured.err


def test_a_record_without_a_gpu_name_or_time_says_unknown(tmp_path, capsys):
    data = json.loads(RECORD.read_text())
    data.update(gpu=None, gpu_id=None, timestamp=None)
    edited = tmp_path / "hierarchy.json"
    edited.write_text(json.dumps(data))
    assert main(["hierarchy", "--import", str(edited)]) == 0
    out = capsys.readouterr().out
    assert "None" not in out
    assert "unknown GPU (not in the catalog): where the data lives" in " ".join(out.split())
    assert "measured at an unknown time." in out


def test_quick_with_import_is_refused(capsys):
    assert main(["hierarchy", "--import", str(RECORD), "--quick"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1
    assert "--quick" in captured.err and "--import" in captured.err
