"""The drill's judging and its tally: units and the tolerance, one figure for the answer and
its explanation, and scripted runs kept out of the all-time score."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kernelab.lab import drill


def _card(prompt_part: str) -> drill.Question:
    return next(q for q in drill.flashcards() if prompt_part in q.prompt)


@pytest.mark.parametrize(
    "reply", ["5.3", "5.3 TB/s", "5.3TB/s", "5.3 tb/s", "5300 GB/s", "5,300 gb/s", " 5.5 TBps "]
)
def test_mi300x_bandwidth_is_right_with_or_without_its_unit(reply):
    question = _card("MI300X HBM bandwidth")
    assert question.answer == pytest.approx(5.3) and question.unit == "TB/s"
    assert question.judge(reply)


@pytest.mark.parametrize("reply", ["5.3 GB", "5.3 TFLOP/s", "4.7", "6", "fast", "", "TB/s"])
def test_a_wrong_unit_or_a_number_outside_the_tolerance_is_wrong(reply):
    assert not _card("MI300X HBM bandwidth").judge(reply)


def test_the_tolerance_is_the_stated_ten_percent():
    question = _card("H100 SXM SM count")  # 132
    assert question.judge("119") and question.judge("145")  # 9.8 % off either way
    assert not question.judge("118") and not question.judge("146")
    assert "10%" in drill.RULES


def test_other_units_convert():
    assert drill.parse_number("0.99 PFLOP/s", "TFLOP/s") == pytest.approx(990)
    assert drill.parse_number("295 FLOP/B", "FLOP/byte") == 295
    assert drill.parse_number("0.192 TB", "GB") == pytest.approx(192)
    assert drill.parse_number("2.4x", "x") == pytest.approx(2.4)


def test_the_explanation_states_the_answer_it_explains():
    # Seed 13's first question: the h200-nvl fp32 ridge, 60 / 4.8 = 12.5 FLOP/byte.
    for question in drill.make_questions(30, seed=13):
        if question.kind == "ridge":
            assert f"= {question.answer:g} FLOP/byte; accepted: " in question.explanation
    first = drill.make_questions(1, seed=13)[0]
    assert first.answer == 12.5 and "= 12.5 FLOP/byte" in first.explanation


def test_every_number_states_the_replies_it_accepts():
    first = drill.make_questions(1, seed=13)[0]
    assert first.explanation.endswith("accepted: 11.25 to 13.75 FLOP/byte")
    assert first.judge("11.25") and not first.judge("11.2")
    sms = _card("H100 SXM SM count")
    assert sms.explanation == "accepted: 118.8 to 145.2 SMs"
    words = drill.make_questions(2, seed=13)[1]
    assert words.kind == "bound" and "accepted" not in words.explanation


def _drill(tmp_path, *args: str, piped: str | None = None) -> subprocess.CompletedProcess:
    """The real command; stdin closed, or a pipe carrying `piped`."""
    src = str(Path(__file__).resolve().parents[2] / "src")
    env = {**os.environ, "KERNELAB_CACHE": str(tmp_path), "PYTHONPATH": src}
    stdin = {"input": piped} if piped is not None else {"stdin": subprocess.DEVNULL}
    return subprocess.run(
        [sys.executable, "-m", "kernelab", "drill", *args],
        capture_output=True, text=True, env=env, check=False, **stdin,
    )  # fmt: skip


def test_scripted_and_piped_runs_leave_the_tally_alone(tmp_path):
    done = _drill(tmp_path, "--seed", "13", "--rounds", "1", "--answers", "12.5", "--json")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["correct"] == 1 and data["all_time"] == {"asked": 0, "correct": 0, "counted": False}
    piped = _drill(tmp_path, "--seed", "13", "--rounds", "1", "--json", piped="12.5 FLOP/byte\n")
    assert piped.returncode == 0, piped.stderr
    data = json.loads(piped.stdout)
    assert data["correct"] == 1 and data["all_time"] == {"asked": 0, "correct": 0, "counted": False}
    closed = _drill(tmp_path, "--seed", "13", "--rounds", "1", "--json")
    assert closed.returncode == 0, closed.stderr  # stdin closed: the question goes unanswered
    assert json.loads(closed.stdout)["correct"] == 0
    assert not (tmp_path / "drill_score.json").exists()


def test_a_typed_run_counts(tmp_path, monkeypatch):
    path = tmp_path / "score.json"
    outcomes = drill.run_drill(drill.make_questions(2, seed=3), lambda q: str(q.answer))
    monkeypatch.setattr(drill, "typed_at_a_terminal", lambda: True)
    score = drill.save_score(path, drill.load_score(path), outcomes)
    assert (score.asked, score.correct) == (2, 2)
    assert drill.load_score(path).asked == 2
    monkeypatch.setattr(drill, "typed_at_a_terminal", lambda: False)
    assert drill.save_score(path, drill.load_score(path), outcomes).asked == 2


def test_every_drill_line_prints_its_brackets(monkeypatch):
    from kernelab.output import _Console

    cards = [q for q in drill.make_questions(400, seed=11) if "[" in q.prompt + q.explanation]
    assert cards, "the deck has prose with brackets (tile[t][c], sdata[t])"
    buffer = __import__("io").StringIO()
    console = _Console(file=buffer, force_terminal=True, width=10_000, color_system=None)
    for q in cards:
        console.print(f"{q.prompt} {q.explanation}")
    shown = buffer.getvalue().splitlines()
    for q, line in zip(cards, shown, strict=True):
        assert line.rstrip() == f"{q.prompt} {q.explanation}".rstrip()
