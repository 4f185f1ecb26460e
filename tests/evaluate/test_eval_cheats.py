"""Solutions that cheat the judge instead of computing, on the CPU path: each must be refused
with a reason, and nothing a solution starts may outlive the judge's run, while an honest
solution still passes (test_eval_cli's test_a_correct_solution_passes_with_exit_0 and
test_an_honest_solution_passes_beside_them below). One class of cheat per section:

- the judge's process and files (walls/): ptrace, /proc/PID/mem and fd/1, killing the judge,
  rewriting the problems a suite judges later;
- telling checked calls from unchecked ones (checks/, and the timed path in
  test_eval_verdict.py);
- reporting its own inputs (checks/hides_its_writes.py);
- outliving the run (walls/leaves_a_daemon.py, and an interrupted judge);
- odd outputs (odd/): meta, sparse, subclass, wrong dtype, not a tensor, in a suite that goes on.

Also the worker's log cap, and the earlier cheats (cheats/): forged verdict files, patched
comparisons, answers memoised per pointer, output finished after the return.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from kernelab.evaluate import sandbox

EVAL = Path(__file__).resolve().parents[1] / "fixtures" / "eval"
RELU = EVAL / "kernelbench" / "relu.py"
HONEST = EVAL / "kernelbench/solutions/relu/correct/model_new.py"
ZEROS = EVAL / "kernelbench/solutions/relu/wrong/zeros.py"
CHEATS = EVAL / "cheats"
WALLS = EVAL / "walls"
GPUMODE = EVAL / "gpumode"
CHECKS = EVAL / "checks"
ODD = EVAL / "odd"
SMALL = ["--scale", "0.0625", "--device", "cpu", "--seed", "7", "--json"]
REAP_SECONDS = 2.0


def survivors(token: str) -> list[int]:
    """Processes whose environment carries this run's token: anything the judge started."""
    found = []
    needle = f"KERNELAB_TEST_TOKEN={token}".encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as handle:
                if needle in handle.read().split(b"\0"):
                    found.append(int(entry))
        except OSError:
            continue
    return found


def assert_nothing_outlives(token: str) -> None:
    deadline = time.monotonic() + REAP_SECONDS
    while survivors(token) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not survivors(token), "processes of the run outlived the judge"


def run_judge(*args: str, extra_env: dict | None = None,
              cwd: Path | None = None) -> tuple[subprocess.CompletedProcess, str]:  # fmt: skip
    token = uuid.uuid4().hex
    env = {**os.environ, "KERNELAB_TEST_TOKEN": token, **(extra_env or {})}
    done = subprocess.run(
        [sys.executable, "-m", "kernelab.cli", "eval", *args],
        capture_output=True, text=True, timeout=300, env=env, cwd=cwd,
    )  # fmt: skip
    return done, token


def judged(solution: Path, *extra: str) -> tuple[int, dict]:
    """The verdict of `kernelab eval relu.py SOLUTION` on the CPU; asserts that stdout holds
    exactly one JSON document (nothing forged appended) and that nothing outlives the run."""
    done, token = run_judge(str(RELU), str(solution), *SMALL, *extra)
    assert done.stdout, done.stderr[-2000:]
    verdict = json.loads(done.stdout)  # raises on anything written after the verdict
    assert_nothing_outlives(token)
    return done.returncode, verdict


def assert_full_wall(verdict: dict) -> None:
    """As root on Linux (this CI machine), every step of the wall holds."""
    applied = verdict["wall"]["applied"]
    assert "pid, mount, network and ipc namespaces" in applied, verdict["wall"]
    assert "private /proc" in applied and any(step.startswith("uid ") for step in applied)
    assert verdict["wall"]["refused"] == []
    assert not any(note.startswith("wall lowered") for note in verdict["notes"])


# --- the judge's process and files --------------------------------------------------------


def test_a_solution_cannot_reach_the_judges_process():
    code, verdict = judged(WALLS / "reaches_for_the_judge.py")
    assert code == 1 and verdict["status"] == "fail", verdict  # the judge lived to say so
    assert "output is constant" in verdict["message"]
    assert_full_wall(verdict)


def test_a_solution_cannot_rewrite_the_problems_judged_after_it(tmp_path):
    suite = tmp_path / "suite"
    suite.mkdir()
    for name in ("a", "b"):
        shutil.copy(RELU, suite / f"{name}.py")
    shutil.copy(WALLS / "rewrites_the_problems.py", suite / "a_solution.py")
    shutil.copy(ZEROS, suite / "b_solution.py")
    before = (suite / "b.py").read_text()
    done, token = run_judge("--suite", str(suite), *SMALL)
    result = json.loads(done.stdout)
    assert_nothing_outlives(token)
    assert (suite / "b.py").read_text() == before
    assert [row["status"] for row in result["rows"]] == ["fail", "fail"], result["rows"]
    assert "output is constant" in result["rows"][1]["message"]


def test_a_module_planted_in_a_shared_working_folder_never_runs_in_the_judge(tmp_path):
    """`python -m` puts the working folder first on the judge's sys.path; from a folder anyone
    may write, a solution could plant a module the judge imports later (yaml for a GPU MODE
    task, tabulate in torch's exit hook). The judge stops importing from such a folder."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    suite = tmp_path / "suite"
    suite.mkdir()
    shutil.copy(RELU, suite / "a.py")
    shutil.copy(WALLS / "plants_a_module.py", suite / "a_solution.py")
    shutil.copy(RELU, suite / "b.py")  # a second worker's launcher starts after the planting
    shutil.copy(HONEST, suite / "b_solution.py")
    shutil.copytree(GPUMODE / "relu_py", suite / "relu_py")
    done, token = run_judge("--suite", str(suite), *SMALL, cwd=shared)
    assert_nothing_outlives(token)
    mark = Path(f"/tmp/kernelab-planted-{token}")
    left = [name for name in ("yaml.py", "tabulate.py", "json.py") if (shared / name).exists()]
    for name in left:
        (shared / name).unlink()
    assert not mark.exists(), mark.read_text()
    result = json.loads(done.stdout)
    rows = {Path(row["solution"]).name: row for row in result["rows"]}
    # zeros: every file was written (else the test proves nothing)
    assert rows["a_solution.py"]["status"] == "fail", rows
    assert rows["b_solution.py"]["status"] == "pass", rows
    assert len(result["rows"]) > 2  # the GPU MODE problem was read after the planting
    if os.geteuid() == 0:  # a worker of its own uid: the judge swept its working folder
        assert left == [], left


def test_a_solution_cannot_shrink_its_shared_inputs_under_the_judge():
    code, verdict = judged(WALLS / "truncates_the_inputs.py")
    assert code == 1 and verdict["status"] in ("fail", "crash"), verdict
    assert_full_wall(verdict)


def test_a_reply_that_is_a_graph_is_refused_before_the_judge_walks_it():
    code, verdict = judged(WALLS / "returns_a_graph.py", "--timeout", "30")
    assert code == 1 and verdict["status"] == "fail", verdict
    assert "graph" in verdict["message"], verdict["message"]


def test_a_reply_larger_than_the_judge_may_hold_is_refused_unread():
    code, verdict = judged(WALLS / "announces_a_huge_reply.py", "--timeout", "30")
    assert code == 1 and verdict["status"] == "fail", verdict
    assert "more than the judge reads" in verdict["message"], verdict["message"]


def test_a_compressed_reply_is_refused_before_it_is_inflated():
    code, verdict = judged(WALLS / "sends_a_compressed_reply.py", "--timeout", "60")
    assert code == 1 and verdict["status"] == "fail", verdict
    assert "records are compressed" in verdict["message"], verdict["message"]


def test_a_reply_holding_a_long_string_is_refused_not_quoted():
    code, verdict = judged(WALLS / "raises_a_long_message.py", "--timeout", "60")
    assert code == 1 and verdict["status"] == "fail", verdict
    assert "a string of 1,000,000 characters" in verdict["message"], verdict["message"]
    assert len(verdict["message"]) < 1000


def test_a_folder_nested_thousands_deep_is_swept_with_the_scratch_folder(tmp_path):
    scratch_parent = tmp_path / "tmp"  # this run's scratch folder is made here, and only it
    scratch_parent.mkdir()
    done, token = run_judge(str(RELU), str(WALLS / "leaves_a_deep_folder.py"), *SMALL,
                            extra_env={"TMPDIR": str(scratch_parent)})  # fmt: skip
    assert_nothing_outlives(token)
    verdict = json.loads(done.stdout)
    assert verdict["status"] == "pass", verdict["message"]  # a correct answer, its litter apart
    deep = Path(f"/tmp/kernelab-deep-{token}")
    left = deep.exists()
    if left:  # not this run's to keep: remove it without recursion either
        from kernelab.evaluate.wall import remove_tree

        remove_tree(str(deep))
    if os.geteuid() == 0:  # a worker of its own uid: what it left is swept
        assert not left
    assert list(scratch_parent.glob("kernelab-worker-*")) == []  # the scratch folder went too


def test_an_unprintable_error_message_still_gives_a_printed_verdict():
    done, token = run_judge(str(RELU), str(ODD / "raises_a_surrogate.py"),
                            *[a for a in SMALL if a != "--json"])  # fmt: skip
    assert_nothing_outlives(token)
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    assert done.returncode == 1 and "\\ud800" in done.stdout, done.stdout


# --- outliving the run ------------------------------------------------------------------


@pytest.mark.skipif(os.geteuid() != 0, reason="files are swept by the worker's own uid (root)")
def test_files_a_worker_leaves_in_shared_folders_are_removed():
    done, token = run_judge(str(RELU), str(WALLS / "leaves_files_behind.py"), *SMALL)
    assert_nothing_outlives(token)
    verdict = json.loads(done.stdout)
    assert verdict["status"] == "pass", verdict["message"]
    left = [f"{folder}/kernelab-leftover-{token}" for folder in ("/tmp", "/dev/shm", "/var/tmp")]
    assert not [path for path in left if os.path.exists(path)]


def test_a_daemon_the_solution_leaves_dies_with_its_worker():
    code, verdict = judged(WALLS / "leaves_a_daemon.py")
    assert code == 1 and verdict["status"] == "fail", verdict
    assert "forged" not in json.dumps(verdict)


def test_interrupting_the_judge_ends_the_worker(tmp_path):
    marker = tmp_path / "in_forward"
    tmp_path.chmod(0o777)  # the worker runs under a uid of its own
    token = uuid.uuid4().hex
    judge = subprocess.Popen(
        [sys.executable, "-m", "kernelab.cli", "eval", str(RELU), str(CHEATS / "sleeps.py"),
         *SMALL],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "KERNELAB_TEST_MARKER": str(marker), "KERNELAB_TEST_TOKEN": token},
        # a suite started as a background job (cmd &) ignores SIGINT, and the judge would
        # inherit that and sleep on: Ctrl-C reaches a foreground judge
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 240
        while not marker.exists():
            assert judge.poll() is None, judge.communicate()
            assert time.monotonic() < deadline, "the worker never reached forward()"
            time.sleep(0.2)
        assert len(survivors(token)) >= 2  # the judge, the launcher, the worker
        judge.send_signal(signal.SIGINT)
        _, err = judge.communicate(timeout=60)
    finally:
        if judge.poll() is None:
            judge.kill()
    assert judge.returncode == 130, err
    assert_nothing_outlives(token)


# --- telling checked calls from unchecked ones, and reporting its own inputs -------------


def test_writes_into_an_input_are_seen_by_the_judge_not_reported_by_the_worker():
    code, verdict = judged(CHECKS / "hides_its_writes.py")
    assert code == 1 and verdict["status"] == "fail", verdict["message"]
    assert "the solution wrote into input 0" in verdict["message"]


def test_a_solution_that_works_only_when_checked_does_the_work_on_the_cpu():
    # Every call of the CPU path is checked, under the one poisoned state: it cannot skip.
    code, verdict = judged(CHECKS / "works_only_when_checked.py")
    assert code == 0 and verdict["status"] == "pass", verdict["message"]


# --- odd outputs --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "solution, reason",
    [
        ("returns_meta.py", "is a meta tensor: it holds no values"),
        ("returns_sparse.py", "is a sparse_coo tensor; the reference's is dense"),
        ("returns_subclass.py", "a tensor subclass or a class of the solution's is refused"),
        ("returns_half.py", "has dtype float16; the reference returns float32"),
        ("returns_a_string.py", "the solution returned str"),
    ],
)
def test_odd_outputs_fail_with_a_reason(solution, reason):
    code, verdict = judged(ODD / solution)
    assert code == 1 and verdict["status"] == "fail", verdict["message"]
    assert reason in verdict["message"], verdict["message"]
    assert "alone would have passed it" not in verdict["message"]


def test_a_suite_goes_on_past_an_odd_output(tmp_path):
    suite = tmp_path / "suite"
    (suite / "solutions" / "relu").mkdir(parents=True)
    shutil.copy(RELU, suite / "relu.py")
    shutil.copy(ODD / "returns_meta.py", suite / "solutions" / "relu" / "a_meta.py")
    shutil.copy(ODD / "returns_subclass.py", suite / "solutions" / "relu" / "b_subclass.py")
    shutil.copy(HONEST, suite / "solutions" / "relu" / "c_honest.py")
    done, token = run_judge("--suite", str(suite), *SMALL)
    result = json.loads(done.stdout)
    assert_nothing_outlives(token)
    assert [row["status"] for row in result["rows"]] == ["fail", "fail", "pass"], result["rows"]
    assert done.returncode == 1


# --- earlier cheats -----------------------------------------------------------------------


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


def test_an_answer_memoised_per_pointer_is_stale_when_the_values_change():
    # Every call with the same shapes gets the same tensor objects at the same addresses.
    code, verdict = judged(CHEATS / "memoises_pointer.py")
    assert code == 1 and verdict["status"] == "fail"
    assert "exceeds the threshold" in verdict["message"], verdict["message"]


def test_an_output_finished_after_the_call_returned_is_caught():
    # Returns an empty tensor to the timer and fills it from a thread 20 ms later; on the
    # CPU path it cannot tell a timed call, so it is honest, or caught as it finishes late.
    code, verdict = judged(CHEATS / "finishes_after_return.py")
    assert verdict["status"] in ("pass", "fail"), verdict["message"]
    if verdict["status"] == "fail":
        assert verdict["message"].startswith("during 20 calls, call "), verdict["message"]


def test_an_honest_solution_passes_beside_them():
    code, verdict = judged(HONEST)
    assert code == 0 and verdict["status"] == "pass", verdict["message"]
    assert_full_wall(verdict)


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


def test_the_workers_snapshot_passes_an_odd_output_on_for_the_judge_to_refuse():
    """On a GPU the worker copies each output before it synchronises; a sparse, meta or
    subclass output has no storage to copy, and copying it raised in the worker ("Cannot
    access storage of SparseTensorImpl") before the judge could say why it refuses it."""
    import torch

    from kernelab.evaluate.worker import _snapshot_of

    dense = torch.arange(6.0).reshape(2, 3).t()
    copy = _snapshot_of(dense)
    assert copy is not dense and torch.equal(copy, dense) and copy.stride() == dense.stride()
    for odd in (dense.to_sparse(), torch.empty(3, device="meta")):
        assert _snapshot_of(odd) is odd
