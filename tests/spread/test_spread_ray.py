"""Suites and sweeps spread over GPUs through a real Ray session on the CPU: two fake GPU
resources, the CPU suite judged through the task path. Scheduling and verdict parity with
the local path, resume, a hung task cut and tried again on the other GPU, a dead worker,
Ctrl-C, an unreachable cluster, and a sweep whose records name their GPU."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import time
from contextlib import redirect_stdout
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

from kernelab.cli import main  # noqa: E402
from kernelab.errors import KernelabError  # noqa: E402
from kernelab.evaluate.verdict import Options  # noqa: E402
from kernelab.spread import engine  # noqa: E402
from kernelab.spread.suites import spread_suite  # noqa: E402
from kernelab.spread.sweeps import spread_sweep  # noqa: E402

HERE = Path(__file__).parent
EVAL = HERE.parent / "fixtures" / "eval"
GM = EVAL / "gpumode"
KB = EVAL / "kernelbench"
SMALL = ["--scale", "0.0625", "--device", "cpu", "--seed", "7", "--seeds", "1"]
OPTIONS = Options(seeds=1, seed=7)


@pytest.fixture(scope="module")
def session():
    """One Ray session for the whole file (starting one takes seconds on two cores); its
    workers find the fault-injecting runners beside this file."""
    before = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), before]))
    ray.init(num_cpus=2, num_gpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()
    if before is None:
        os.environ.pop("PYTHONPATH", None)
    else:
        os.environ["PYTHONPATH"] = before


def eval_json(*args) -> tuple[int, dict]:
    out = io.StringIO()
    with redirect_stdout(out):
        code = main(["eval", *args, "--json"])
    return code, json.loads(out.getvalue())


def statuses(result: dict) -> dict:
    return {(row["problem"], row["solution"]): row["status"] for row in result["rows"]}


def gpus_free_again(session, timeout: float = 20.0) -> bool:
    """Every worker of the last run gone: both fake GPUs free again."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if session.available_resources().get("GPU", 0) == 2:
            return True
        time.sleep(0.2)
    return False


@pytest.fixture(scope="module")
def mixed_suite(tmp_path_factory) -> Path:
    """GPU MODE's relu problem with two correct solutions and two wrong ones."""
    suite = tmp_path_factory.mktemp("mixed")
    problem = suite / "relu_py"
    shutil.copytree(GM / "relu_py", problem, ignore=shutil.ignore_patterns("solutions"))
    shutil.copy(GM / "utils.py", suite / "utils.py")  # the problem's shared helpers
    for name in ("correct/slow.py", "wrong/zeros.py", "wrong/mutates_input.py"):
        (problem / "solutions" / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(GM / "relu_py" / "solutions" / name, problem / "solutions" / name)
    return suite


@pytest.fixture(scope="module")
def spread_run(session, mixed_suite, tmp_path_factory):
    folder = tmp_path_factory.mktemp("tasks")
    code, result = eval_json(
        "--suite", str(mixed_suite), *SMALL, "--gpus", "2", "--tasks-dir", str(folder)
    )
    return code, result, folder


def test_the_spread_suite_gives_the_local_verdicts_problem_by_problem(
    spread_run, mixed_suite, session
):
    code, spread, folder = spread_run
    local_code, local = eval_json("--suite", str(mixed_suite), *SMALL)
    assert code == local_code == 1  # the known-wrong solutions
    assert statuses(spread) == statuses(local)  # same order, same verdicts
    assert [r["message"] for r in spread["rows"]] == [r["message"] for r in local["rows"]]
    assert spread["summary"] == local["summary"]
    assert [p["problem"] for p in spread["problems"]] == [p["problem"] for p in local["problems"]]
    # one task per (problem, solution), over both GPUs, each verdict naming its GPU
    assert spread["spread"]["tasks"] == len(local["rows"]) and spread["spread"]["gpus"] == 2
    assert {row["ran_on"]["gpu"] for row in spread["rows"]} == {"0", "1"}
    assert len(list(folder.glob("task-*.json"))) == len(local["rows"])
    assert gpus_free_again(session)


def test_resume_judges_only_the_tasks_without_a_record(spread_run, mixed_suite, session):
    _, first, folder = spread_run
    records = sorted(folder.glob("task-*.json"))
    kept = {path: path.stat().st_mtime_ns for path in records[2:]}
    for path in records[:2]:
        path.unlink()
    code, again = eval_json(
        "--suite", str(mixed_suite), *SMALL, "--gpus", "2", "--tasks-dir", str(folder), "--resume"
    )
    assert code == 1 and again["spread"]["resumed"] == len(records) - 2
    assert statuses(again) == statuses(first)
    assert all(path.stat().st_mtime_ns == kept[path] for path in kept)  # not judged again
    assert len(list(folder.glob("task-*.json"))) == len(records)
    # the same folder for other settings is refused, not mixed in
    with pytest.raises(KernelabError, match="other options"):
        spread_suite(
            mixed_suite, device="cpu", scale=0.0625, options=Options(seeds=2, seed=7), timeout=300,
            gpus=2, address=None, resume=True, folder=folder, show_progress=False,
        )  # fmt: skip


def small_suite(root: Path, names: list[str]) -> Path:
    """The KernelBench relu problem with the correct solution copied under `names`."""
    suite = root / "suite"
    (suite / "solutions" / "relu").mkdir(parents=True)
    shutil.copy(KB / "relu.py", suite / "relu.py")
    for name in names:
        shutil.copy(KB / "solutions/relu/correct/model_new.py", suite / "solutions/relu" / name)
    return suite


def test_a_hung_task_is_cut_and_retried_on_the_other_gpu_and_a_dead_one_fails(session, tmp_path):
    suite = small_suite(tmp_path, ["hang_once.py", "dies.py", "fine.py"])
    result = spread_suite(
        suite, device="cpu", scale=0.0625, options=OPTIONS, timeout=60, gpus=2, address=None,
        folder=tmp_path / "tasks", runner_cls=_runner("FaultySuiteRunner"), deadline_s=20,
        show_progress=False,
    )  # fmt: skip
    rows = {Path(row["solution"]).name: row for row in result["rows"]}
    assert rows["fine.py"]["status"] == "pass" and "attempts" not in rows["fine.py"]
    hung = rows["hang_once.py"]
    assert hung["status"] == "pass"  # the second try
    (attempt,) = hung["attempts"]
    assert "no result after 20 s: cut" in attempt["reason"]
    assert attempt["place"] != f"{hung['ran_on']['node']} gpu {hung['ran_on']['gpu']}"
    dead = rows["dies.py"]
    assert dead["status"] == "error" and "the task failed 2 times" in dead["message"]
    assert dead["message"].count("its GPU worker died") == 2
    assert gpus_free_again(session)


def _runner(name: str):
    import spread_faults

    return getattr(spread_faults, name)


def test_ctrl_c_stops_every_task_and_keeps_the_finished_records(session, tmp_path, monkeypatch):
    suite = small_suite(tmp_path, [f"s{i}.py" for i in range(3)])
    folder = tmp_path / "tasks"
    collect, seen = engine._collect, []

    def interrupted(*args):
        if len(seen) == 1:
            raise KeyboardInterrupt  # as Ctrl-C arrives while the loop waits for results
        seen.append(1)
        return collect(*args)

    monkeypatch.setattr(engine, "_collect", interrupted)
    with pytest.raises(KeyboardInterrupt):
        spread_suite(
            suite, device="cpu", scale=0.0625, options=OPTIONS, timeout=60, gpus=2,
            address=None, folder=folder, runner_cls=_runner("SlowSuiteRunner"),
            show_progress=False,
        )  # fmt: skip
    assert gpus_free_again(session)  # every worker stopped
    assert len(list(folder.glob("task-*.json"))) == 1  # what finished is kept
    monkeypatch.setattr(engine, "_collect", collect)
    result = spread_suite(
        suite, device="cpu", scale=0.0625, options=OPTIONS, timeout=60, gpus=2, address=None,
        folder=folder, resume=True, show_progress=False,
    )  # fmt: skip
    assert result["spread"]["resumed"] == 1 and result["summary"] == {"pass": 3}


def test_ctrl_c_on_the_command_line_is_exit_130(session, tmp_path, monkeypatch):
    suite = small_suite(tmp_path, ["a.py", "b.py"])

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(engine, "_collect", interrupted)
    code = main(["eval", "--suite", str(suite), *SMALL, "--gpus", "2",
                 "--tasks-dir", str(tmp_path / "tasks")])  # fmt: skip
    assert code == 130
    assert gpus_free_again(session)


def test_an_unreachable_cluster_is_one_line_and_exit_2():
    start = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "kernelab.cli", "eval", "--suite", str(GM), *SMALL,
         "--ray-address", "127.0.0.1:9"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("kernelab: cannot reach the Ray cluster at")
    assert time.monotonic() - start < 60


def test_a_sweep_spread_over_gpus_names_the_gpu_of_every_record(session, tmp_path):
    shapes = [{"m": 3, "n": 17, "k": 5}, {"m": 64, "n": 32, "k": 48}, {"m": 1, "n": 1, "k": 7}]
    result = spread_sweep(
        "torch.mm", shapes, baselines=["torch.mm.tf32"], dtype="fp32",
        mode="cold", min_samples=2, max_time=0.1, device="cpu", gpus=2, address=None,
        deadline_s=120, folder=tmp_path / "tasks", runner_cls=_runner("CpuSweepRunner"),
        show_progress=False,
    )  # fmt: skip
    mains = [row for row in result["rows"] if row["implementation"] == "torch.mm"]
    assert [row["shape"] for row in mains] == shapes  # shape order kept
    assert all(row["check_ok"] for row in result["rows"])
    for row in mains:  # the ratio of two times taken on the same GPU
        (ratio,) = row["speedup_vs"].values()
        base = next(
            r for r in result["rows"]
            if r["shape"] == row["shape"] and r["implementation"] != "torch.mm"
        )  # fmt: skip
        assert base["ran_on"] == row["ran_on"]
        assert ratio == pytest.approx(base["median_ms"] / row["median_ms"])
    assert list(result["by_card"]) == ["h200"] and result["gpus"] == ["NVIDIA H200"]
    records = result["by_card"]["h200"]
    assert len(records) == 2 * len(shapes)
    assert all(r["extra"]["ran_on"]["gpu"] in ("0", "1") for r in records)
    assert gpus_free_again(session)


def test_bench_spread_without_a_gpu_fails_each_shape_with_the_reason(session, tmp_path):
    out = io.StringIO()
    with redirect_stdout(out):
        code = main(["bench", "torch.softmax", "--sizes", "4x8", "--dtype", "fp32",
                     "--no-baselines", "--gpus", "2", "--tasks-dir", str(tmp_path), "--json"])  # fmt: skip
    assert code == 1
    (row,) = json.loads(out.getvalue())["rows"]
    assert not row["check_ok"] and "needs a CUDA GPU" in row["check_message"]
    assert len(row["attempts"]) == 2
