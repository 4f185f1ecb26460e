"""Solutions that cheat the evaluator instead of computing (issue 31), on the CPU path: each
must be refused with a reason, while an honest solution still passes (test_eval_cli's
test_a_correct_solution_passes_with_exit_0 and test_an_honest_solution_passes_beside_them).
Also the worker's boundaries: interrupting the judge ends it, and its log is capped."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kernelab.evaluate import sandbox

EVAL = Path(__file__).parent / "fixtures" / "eval"
RELU = EVAL / "kernelbench" / "relu.py"
CHEATS = EVAL / "cheats"
SMALL = ["--scale", "0.0625", "--device", "cpu", "--seed", "7", "--json"]


def judged(solution: Path, *extra: str, env: dict | None = None) -> tuple[int, dict]:
    done = subprocess.run(
        [sys.executable, "-m", "kernelab.cli", "eval", str(RELU), str(solution), *SMALL, *extra],
        capture_output=True, text=True, timeout=300, env=env,
    )  # fmt: skip
    assert done.stdout, done.stderr[-2000:]
    return done.returncode, json.loads(done.stdout)


def test_a_forged_verdict_file_is_not_a_verdict():
    # It appends "pass" events to every file the judge could read events from, then exits.
    code, verdict = judged(CHEATS / "forges_verdict.py")
    assert code == 1 and verdict["status"] == "crash", verdict["message"]
    assert "the solution ended it" in verdict["message"]


def test_patching_torch_norm_and_allclose_does_not_patch_the_judge():
    code, verdict = judged(CHEATS / "patches_checks.py")
    assert code == 1 and verdict["status"] == "fail"
    assert "exceeds the threshold" in verdict["message"], verdict["message"]
    failed = [case for case in verdict["cases"] if not case["ok"]]
    assert failed and failed[0]["error"] > 1.0  # random numbers, measured as such


def test_an_empty_tensor_returned_to_the_timer_is_caught_in_a_sampled_call():
    code, verdict = judged(CHEATS / "skips_when_timed.py")
    assert code == 1 and verdict["status"] == "fail"
    assert verdict["message"].startswith("during 20 calls, call "), verdict["message"]
    assert all(case["ok"] for case in verdict["cases"])  # honest whenever it was not timed


def test_an_answer_memoised_per_pointer_is_stale_when_the_values_change():
    code, verdict = judged(CHEATS / "memoises_pointer.py")
    assert code == 1 and verdict["status"] == "fail"
    assert verdict["message"].startswith("during 20 calls, call "), verdict["message"]
    assert "input set" in verdict["message"]


def test_an_output_finished_after_the_call_returned_is_caught():
    # Returns an empty tensor to the timer and fills it from a thread 20 ms later.
    code, verdict = judged(CHEATS / "finishes_after_return.py")
    assert code == 1 and verdict["status"] == "fail"
    assert verdict["message"].startswith("during 20 calls, call "), verdict["message"]


def test_an_honest_solution_passes_beside_them():
    code, verdict = judged(EVAL / "kernelbench/solutions/relu/correct/model_new.py")
    assert code == 0 and verdict["status"] == "pass", verdict["message"]


def test_interrupting_the_judge_ends_the_worker(tmp_path):
    pidfile = tmp_path / "worker.pid"
    judge = subprocess.Popen(
        [sys.executable, "-m", "kernelab.cli", "eval", str(RELU), str(CHEATS / "sleeps.py"),
         *SMALL],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "KERNELAB_TEST_PIDFILE": str(pidfile)},
        # a suite started as a background job (cmd &) ignores SIGINT, and the judge would
        # inherit that and sleep on (session 28): Ctrl-C reaches a foreground judge
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 240
        while not pidfile.exists():
            assert judge.poll() is None, judge.communicate()
            assert time.monotonic() < deadline, "the worker never reached forward()"
            time.sleep(0.2)
        worker = int(pidfile.read_text())
        os.kill(worker, 0)  # alive, sleeping in forward()
        judge.send_signal(signal.SIGINT)
        _, err = judge.communicate(timeout=60)
    finally:
        if judge.poll() is None:
            judge.kill()
    assert judge.returncode == 130, err
    with pytest.raises(ProcessLookupError):
        os.kill(worker, 0)


def test_the_workers_log_keeps_its_head_and_tail_only():
    read, write = os.pipe()
    log = sandbox.CappedLog(read)
    body = b"".join(b"line %07d\n" % i for i in range(400_000))  # 5.2 MB
    with os.fdopen(write, "wb") as handle:
        handle.write(b"FIRST\n" + body + b"LAST WORDS\n")
    log.close()
    text = log.text()
    assert len(text) <= sandbox.LOG_HEAD_BYTES + sandbox.LOG_TAIL_BYTES + 100
    assert text.startswith("FIRST\n") and text.endswith("LAST WORDS\n")
    assert f"[... {log.total - sandbox.LOG_HEAD_BYTES - sandbox.LOG_TAIL_BYTES} bytes" in text
    assert log.total == len(body) + len(b"FIRST\nLAST WORDS\n")


def test_a_solution_that_prints_megabytes_is_judged_as_usual():
    code, verdict = judged(CHEATS / "prints_a_lot.py")
    assert code == 0 and verdict["status"] == "pass", verdict["message"]
