"""`kernelab eval` end to end on the CPU: worker processes, crashes and hangs reported as
such, the suite table as JSON, bad input as one line and exit code 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

EVAL = Path(__file__).resolve().parents[1] / "fixtures" / "eval"
KB = EVAL / "kernelbench"
GM = EVAL / "gpumode"
BROKEN = EVAL / "broken"
SMALL = ["--scale", "0.0625", "--device", "cpu", "--seed", "7"]
CORRECT = str(KB / "solutions/relu/correct/model_new.py")
# The commands may run in a scratch folder, so the package is found by an absolute path.
SRC = str(Path(__file__).resolve().parents[2] / "src")
PYTHONPATH = os.environ.get("PYTHONPATH")


def kernelab(*args: str, timeout: float = 300, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "kernelab.cli", "eval", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [SRC, PYTHONPATH]))},
    )


def verdict_of(*args: str) -> tuple[int, dict]:
    done = kernelab(*args, "--json", *SMALL)
    return done.returncode, json.loads(done.stdout)


def test_a_correct_solution_passes_with_exit_0():
    code, verdict = verdict_of(str(KB / "relu.py"), str(KB / "solutions/relu/correct/model_new.py"))
    assert code == 0 and verdict["status"] == "pass"
    assert verdict["roofline"][0]["cost"]["op"] == "elementwise"
    assert "timing skipped (no GPU); correctness only" in verdict["notes"]


def test_a_wrong_solution_fails_with_exit_1_and_the_reason():
    code, verdict = verdict_of(
        str(GM / "relu_py"), str(GM / "relu_py/solutions/wrong/mutates_input.py")
    )
    assert code == 1 and verdict["status"] == "fail"
    assert "wrote into input 0" in verdict["message"]


def test_a_failing_case_with_an_infinite_error_prints_its_table_whole():
    # the error of a NaN where the reference is finite is inf, which the verdict keeps as text
    done = kernelab(str(KB / "relu.py"), str(KB / "solutions/relu/wrong/off_by_one.py"), *SMALL)
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr and "FAIL" in done.stdout
    assert "correctness" in done.stdout and "inf" in done.stdout


def test_a_segfault_is_reported_as_a_crash_at_its_line():
    code, verdict = verdict_of(str(KB / "relu.py"), str(BROKEN / "crash.py"))
    assert code == 1 and verdict["status"] == "crash"
    assert "SIGSEGV" in verdict["message"] and "crash.py" in verdict["message"]


def test_exiting_the_process_is_a_crash():
    code, verdict = verdict_of(str(KB / "relu.py"), str(BROKEN / "exits.py"))
    assert code == 1 and verdict["status"] == "crash"
    assert "the solution ended it" in verdict["message"]


def test_a_hang_is_reported_as_a_timeout():
    code, verdict = verdict_of(str(KB / "relu.py"), str(BROKEN / "hang.py"), "--timeout", "3")
    assert code == 1 and verdict["status"] == "timeout"
    assert "no verdict after 3 s" in verdict["message"]


def test_import_errors_and_raising_kernels_are_failures_with_reasons():
    _, verdict = verdict_of(str(KB / "relu.py"), str(BROKEN / "import_error.py"))
    assert verdict["status"] == "fail" and "failed to load" in verdict["message"]
    _, verdict = verdict_of(str(KB / "relu.py"), str(BROKEN / "raises.py"))
    assert verdict["status"] == "fail" and "raised ValueError" in verdict["message"]


@pytest.mark.parametrize(
    "args, match",
    [
        ([str(KB / "relu.py")], "needs PROBLEM and SOLUTION"),
        ([str(KB / "nothing.py"), str(KB / "relu.py")], "no such problem"),
        ([str(KB / "relu.py"), str(KB / "nothing.py")], "no such solution"),
        ([str(KB / "relu.py"), str(KB / "relu.py"), "--scale", "2"], "--scale"),
        ([str(KB / "relu.py"), str(KB / "relu.py"), "--seeds", "0"], "--seeds"),
        ([str(KB / "relu.py"), str(KB / "relu.py"), "--device", "tpu"], "--device"),
        (["--suite", str(EVAL / "broken")], "no problems"),
        (["--suite", str(KB), str(KB / "relu.py")], "not both"),
        (["--suite", ""], "--suite needs a directory, not an empty string"),
        # numbers: a non-finite or non-positive one never reaches the judge
        ([str(KB / "relu.py"), CORRECT, "--timeout", "nan"], "--timeout must be a positive, finite"),
        ([str(KB / "relu.py"), CORRECT, "--timeout", "inf"], "--timeout must be a positive, finite"),
        ([str(KB / "relu.py"), CORRECT, "--timeout", "0"], "--timeout must be a positive, finite"),
        (["--suite", str(KB), "--max-time", "nan"], "--max-time must be a positive, finite"),
        (["--suite", str(KB), "--max-time", "inf"], "--max-time must be a positive, finite"),
        # --out checked before the suite runs, as bench and ladder check theirs
        (["--suite", str(KB), "--out", "/proc/x/y.json"], "no folder /proc/x"),
        (["--suite", str(KB), "--out", "/tmp"], "is a folder"),
        (["--suite", str(KB), "--out", "x.txt"], "--out writes .json files"),
        (["--suite", str(KB), "--out", ""], "not an empty string"),
    ],
)  # fmt: skip
def test_bad_input_is_one_line_and_exit_2(args, match, tmp_path):
    done = kernelab(*SMALL, *args, cwd=tmp_path)  # args last: theirs win
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("kernelab: ") and match in lines[0]
    assert done.stdout == "" and list(tmp_path.iterdir()) == []  # nothing judged, nothing written


def test_cuda_without_a_gpu_is_one_line():
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    done = kernelab(str(KB / "relu.py"), str(KB / "relu.py"), "--device", "cuda")
    assert done.returncode == 2 and "needs a CUDA GPU" in done.stderr


def test_a_problem_that_cannot_be_set_up_is_exit_2(tmp_path):
    problem = tmp_path / "broken.py"
    problem.write_text(
        "import torch\n\n\nclass Model(torch.nn.Module):\n    def forward(self, x):\n"
        "        return x\n\n\ndef get_inputs():\n    raise RuntimeError('no data')\n\n\n"
        "def get_init_inputs():\n    return []\n"
    )
    done = kernelab(str(problem), str(KB / "solutions/relu/correct/model_new.py"), *SMALL)
    assert done.returncode == 2
    assert "generating the inputs failed: RuntimeError: no data" in done.stderr


def test_suite_gives_one_table_of_every_verdict():
    done = kernelab("--suite", str(GM), "--json", *SMALL)
    assert done.returncode == 1  # the wrong solutions
    result = json.loads(done.stdout)
    by_name = {(row["problem"], Path(row["solution"]).stem): row for row in result["rows"]}
    assert len(by_name) == 2 * 2 + 5 + 6  # submission + slow each; 5 and 6 wrong ones
    for (problem, name), row in by_name.items():
        wrong = "wrong" in Path(row["solution"]).parts and name != "side_stream"
        assert row["status"] == ("fail" if wrong else "pass"), (problem, name, row["message"])
    assert result["summary"] == {"pass": 6, "fail": 9}  # side_stream passes on a CPU
    human = kernelab("--suite", str(GM), *SMALL)
    assert "15 verdicts: 9 fail, 6 pass" in " ".join(human.stdout.split())
