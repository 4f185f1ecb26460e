"""The PMPP ladders' proving counters in the lab (kernelab.lab.counters): the gate row judged
from the recorded profile rows (each verdict recomputed from its values), not measured without
them, the stage writing them with a stand-in for ncu, and the report's table."""

from __future__ import annotations

import json

import pytest
from test_gate import _counter, _gate, folder  # noqa: F401  (the fixture)

from kernelab.lab import counters
from kernelab.lab.gate import COUNTERS_NAME
from kernelab.lab.report import Report, to_markdown
from kernelab.lab.results import load_results


def _edit_rows(out, ladder, change):
    path = out / "pmpp" / "counters.json"
    data = json.loads(path.read_text())
    change(data["pmpp_counters"][ladder])
    path.write_text(json.dumps(data))


def test_every_step_pass_passes(folder):  # noqa: F811
    criterion = _gate(folder)[COUNTERS_NAME]
    assert criterion.passed, criterion.evidence
    assert criterion.evidence.startswith("every one of 9 profiled steps PASS")
    assert "transpose at 8192x8192 fp32 on NVIDIA H200" in criterion.evidence
    assert criterion.bar == "kernelab"


def test_a_step_whose_counter_did_not_move_fails_naming_it(folder):  # noqa: F811
    def conflicts(entry):  # the padded step still conflicts: 4 per shared load, verdict left
        entry["rows"][2].update(value=3.1e7, per_load=4.0)

    _edit_rows(folder, "transpose", conflicts)
    criterion = _gate(folder)[COUNTERS_NAME]
    assert not criterion.passed
    assert criterion.evidence.startswith("1 of 9 profiled steps not PASS: transpose:03 FAIL")
    assert "must go zero" in criterion.evidence
    assert "transpose:03 stored PASS, its values give FAIL" in criterion.evidence


def test_a_missing_counter_is_not_a_pass(folder):  # noqa: F811
    def lost(entry):  # ncu read no value of the step's proof metric
        entry["rows"][1].update(value=None, metrics={"global_atomics": None})

    _edit_rows(folder, "histogram", lost)
    evidence = _gate(folder)[COUNTERS_NAME].evidence
    assert "histogram:02 MISSING" in evidence and "histogram:03 NO-PREV" in evidence


def test_a_ladder_not_profiled_is_not_measured(folder):  # noqa: F811
    path = folder / "pmpp" / "counters.json"
    data = json.loads(path.read_text())
    data["pmpp_counters"]["scan"] = {"error": "ncu: ERR_NVGPUCTRPERM", "gpu": "NVIDIA H200"}
    path.write_text(json.dumps(data))
    criterion = _gate(folder)[COUNTERS_NAME]
    assert not criterion.passed
    assert "not measured: scan (its profile failed: ncu: ERR_NVGPUCTRPERM)" in criterion.evidence


@pytest.mark.parametrize("skipped", [None, "ncu not found"])
def test_without_rows_it_is_not_measured(tmp_path, skipped):
    if skipped:
        (tmp_path / "pmpp").mkdir()
        (tmp_path / "pmpp" / "counters.json").write_text(
            json.dumps({"pmpp_counters": {}, "skipped": skipped}))  # fmt: skip
    passed, evidence = counters.judge(tmp_path)
    assert not passed
    assert evidence.startswith("not measured (needs ncu and a GPU")
    assert (f"({skipped})" in evidence) == bool(skipped)
    assert counters.judge(None)[1].startswith("not measured (")


def _rows(name, size, dtype, progress):
    previous = None
    rows = []
    for step, value in ((f"{name}:01", 100.0), (f"{name}:02", 10.0)):
        direction = "reference" if previous is None else "down"
        rows.append({**_counter(step, "a_metric", value, previous, direction), "report": "x"})
        previous = value
    return rows


def test_the_stage_records_each_ladder_and_a_failed_one_as_its_error(tmp_path):
    def profile(name, size, dtype, progress):
        if name == "scan":
            raise RuntimeError("ncu: the child exited 1")
        return _rows(name, size, dtype, progress)

    line = counters.profile_all(tmp_path, lambda text: None, profile=profile, gpu="NVIDIA H200")
    assert line == ("transpose: 2 of 2 steps PASS; histogram: 2 of 2 steps PASS; "
                    "scan: FAILED (ncu: the child exited 1)")  # fmt: skip
    data = counters.read_counters(tmp_path)["pmpp_counters"]
    assert data["transpose"]["size"] == "8192x8192" and data["histogram"]["dtype"] == "int32"
    assert all("report" not in row for row in data["transpose"]["rows"])
    passed, evidence = counters.judge(tmp_path)
    assert not passed and "scan (its profile failed: ncu: the child exited 1)" in evidence
    # what load_results makes of the folder: the counters file is no record file
    results = load_results(tmp_path)
    assert results.records == [] and results.profiles == []


def test_without_ncu_the_stage_writes_why(tmp_path, monkeypatch):
    monkeypatch.setattr(counters.shutil, "which", lambda name: None)
    monkeypatch.delenv("KERNELAB_NCU", raising=False)
    assert counters.profile_all(tmp_path, lambda text: None) == "skipped: ncu not found"
    assert counters.read_counters(tmp_path)["skipped"] == "ncu not found"
    assert "(ncu not found)" in counters.judge(tmp_path)[1]


def test_the_report_shows_each_step_or_says_why_not(folder, tmp_path):  # noqa: F811
    from kernelab.lab.counters import section as pmpp_counters_section

    report = Report("r")
    pmpp_counters_section(report, load_results(folder), True)
    text = to_markdown(report, tmp_path)
    assert "| transpose | transpose:03 | bank_conflicts_ld | 31,000,000 | 0 | 0.00 | zero | PASS |" in text
    empty = Report("r")
    pmpp_counters_section(empty, load_results(tmp_path / "nothing"), False)
    text = to_markdown(empty, tmp_path)
    assert "Not measured (needs ncu and a GPU" in text and "none in the committed records" in text
