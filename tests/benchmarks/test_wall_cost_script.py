"""benchmarks/wall_cost.py: both sides of the comparison run, the cost is their fastest
runs' difference, the document says what the wall applied, and bad options are refused.
How large the cost is, is the benchmark's record, not a test's assertion."""

from __future__ import annotations

import json

import pytest
from benchmark_scripts import load_script


def _script():
    return load_script("wall_cost")


def test_one_pair_of_runs_writes_the_cost_and_what_the_wall_did(tmp_path, capsys):
    script = _script()
    assert script.main(["--runs", "2", "--out", str(tmp_path)]) == 0
    (path,) = tmp_path.glob("wall_cost_*.json")
    document = json.loads(path.read_text())
    assert len(document["direct_s"]) == len(document["walled_s"]) == 2
    assert all(s > 0 for s in document["direct_s"] + document["walled_s"])
    assert document["cost_s"] == pytest.approx(
        min(document["walled_s"]) - min(document["direct_s"])
    )
    assert document["target_s"] == script.TARGET_S
    assert document["met"] == (document["cost_s"] <= script.TARGET_S)
    # The launcher reported its steps: the program really ran behind the wall.
    assert document["applied"] or document["refused"]
    assert str(path) in capsys.readouterr().out


@pytest.mark.parametrize("argv", [["--runs", "0"], ["--runs", "x"]])
def test_bad_options_are_refused(argv):
    with pytest.raises(SystemExit) as raised:
        _script().parse(argv)
    assert raised.value.code == 2
