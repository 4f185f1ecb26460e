"""benchmarks/judge_overhead.py: every figure it promises is in its document, each ratio is
its two times' ratio, and bad options are refused. How large the overheads are is the
benchmark's record, not a test's assertion."""

from __future__ import annotations

import json

import pytest
from benchmark_scripts import load_script


def test_one_run_writes_the_digest_and_the_loop_figures(tmp_path, capsys):
    script = load_script("judge_overhead")
    argv = ["--reps", "1", "--device", "cpu", "--scale", "0.03", "--out", str(tmp_path)]
    assert script.main(argv) == 0
    (path,) = tmp_path.glob("judge_overhead_*.json")
    document = json.loads(path.read_text())
    assert [row["mib"] for row in document["digest"]] == list(script.CPU_SIZES_MIB)
    for row in document["digest"]:
        assert row["digest_ms"] > 0 and row["read_ms"] > 0
        assert row["digest_over_read"] == pytest.approx(row["digest_ms"] / row["read_ms"])
    assert [row["problem"] for row in document["loop"]] == list(script.PROBLEMS)
    for row in document["loop"]:
        assert row["make_set_ms"] > 0
        assert row["loop_ms_per_call_rotation"] > 0 and row["loop_ms_per_call_fresh"] > 0
    assert str(path) in capsys.readouterr().out


@pytest.mark.parametrize("argv", [["--reps", "0"], ["--reps", "x"]])
def test_bad_options_are_refused(argv):
    with pytest.raises(SystemExit) as raised:
        load_script("judge_overhead").parse(argv)
    assert raised.value.code == 2
