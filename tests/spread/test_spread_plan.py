"""The pure rules of spreading work over GPUs (kernelab.spread.plan and the merges), and the
command line's choices that need no Ray: which path a suite takes, the one-line errors,
the message when Ray is not installed, and the local path left as it was."""

from __future__ import annotations

import importlib.util
import io
import json
import shutil
import sys
from contextlib import redirect_stdout
from pathlib import Path

import pytest
from benchmark_scripts import load_script

from kernelab.cli import main
from kernelab.errors import KernelabError
from kernelab.spread.plan import (
    MAX_ATTEMPTS,
    Task,
    TaskBook,
    failed_message,
    gpus_to_use,
    lift_avoidance,
    next_attempt,
    pick_next,
    task_key,
    wants_ray,
)
from kernelab.spread.suites import merge_suite, plan_suite
from kernelab.spread.sweeps import merge_sweep, plan_sweep

EVAL = Path(__file__).parents[1] / "fixtures" / "eval"
KB = EVAL / "kernelbench"
GM = EVAL / "gpumode"
SMALL = ["--scale", "0.0625", "--device", "cpu", "--seed", "7", "--seeds", "1"]


def task(key: str, group: str) -> Task:
    return Task(key=key, group=group, label=key, payload={})


# --- which path, how many GPUs ---------------------------------------------------------------


@pytest.mark.parametrize(
    "requested, visible, address, expected",
    [
        (None, 0, None, False),  # no GPU: the local path (the CPU)
        (None, 1, None, False),
        (None, 8, None, True),  # every visible GPU by default
        (1, 8, None, False),  # one GPU runs here, without Ray
        (2, 1, None, True),
        (1, 1, "10.0.0.1:6379", True),  # a named cluster always goes through Ray
    ],
)
def test_which_runs_go_through_ray(requested, visible, address, expected):
    assert wants_ray(requested, visible, address) is expected


def test_gpus_are_never_more_than_the_cluster_or_the_tasks():
    assert gpus_to_use(None, 4, 100) == (4, None)
    assert gpus_to_use(2, 4, 100) == (2, None)
    assert gpus_to_use(8, 4, 100)[0] == 4 and "has 4" in gpus_to_use(8, 4, 100)[1]
    assert gpus_to_use(4, 4, 3) == (3, None)
    with pytest.raises(KernelabError, match="no GPU resources"):
        gpus_to_use(2, 0, 5)
    with pytest.raises(KernelabError, match="at least 1"):
        wants_ray(0, 4, None)


# --- which task next ----------------------------------------------------------------------------


def test_a_gpu_keeps_to_the_problem_it_set_up_then_spreads_the_others():
    pending = [task("a1", "A"), task("a2", "A"), task("b1", "B"), task("c1", "C")]
    assert pick_next(pending, "B", {"A"}, "n gpu 0", {}) == 2  # its own problem first
    assert pick_next(pending, None, {"A"}, "n gpu 0", {}) == 2  # then one nobody set up
    assert pick_next(pending, None, {"A", "B", "C"}, "n gpu 0", {}) == 0  # then any
    assert pick_next([], None, set(), "n gpu 0", {}) is None


def test_a_retried_task_avoids_the_gpu_it_failed_on():
    pending = [task("a1", "A"), task("a2", "A")]
    avoid = {"a1": {"n gpu 0"}}
    assert pick_next(pending, "A", set(), "n gpu 0", avoid) == 1  # not a1 here
    assert pick_next(pending, "A", set(), "n gpu 1", avoid) == 0
    assert pick_next(pending[:1], None, set(), None, avoid) is None  # a worker not yet placed
    # one GPU left in all, or every GPU failed it: it runs again where there is room
    assert lift_avoidance(avoid, {"n gpu 0"}) == {}
    assert lift_avoidance(avoid, {"n gpu 0", "n gpu 1"}) == avoid


def test_a_task_is_tried_twice_and_its_message_says_where_and_why():
    tried = [{"place": "n gpu 0", "reason": "no result after 60 s: cut"}]
    assert next_attempt(tried) and MAX_ATTEMPTS == 2
    tried.append({"place": None, "reason": "its GPU worker died (SIGKILL)"})
    assert not next_attempt(tried)
    message = failed_message(tried)
    assert message.startswith("the task failed 2 times (on n gpu 0: no result after 60 s")
    assert "on a GPU: its GPU worker died" in message


# --- the task records ---------------------------------------------------------------------------


def test_task_records_are_kept_resumed_and_never_mixed(tmp_path):
    book = TaskBook(tmp_path, {"kind": "suite", "scale": 1.0}, resume=False)
    book.write("k1", {"result": {"verdict": {"status": "pass"}}})
    book.write("k2", {"failed": "cut", "attempts": []})
    (tmp_path / "task-k3.json").write_text("{not json")  # a record cut mid-write: not done
    assert set(TaskBook(tmp_path, {"kind": "suite", "scale": 1.0}, resume=True).done()) == {
        "k1",
        "k2",
    }
    with pytest.raises(KernelabError, match="other scale; drop --resume"):
        TaskBook(tmp_path, {"kind": "suite", "scale": 0.5}, resume=True)
    fresh = TaskBook(tmp_path, {"kind": "suite", "scale": 0.5}, resume=False)
    assert fresh.done() == {}  # a new run starts from nothing


def test_task_keys_are_stable_and_tell_work_apart():
    assert task_key("suite", "/p", "/s") == task_key("suite", "/p", "/s")
    assert task_key("suite", "/p", "/s") != task_key("suite", "/p", "/t")
    shapes = [{"m": 1, "n": 2, "k": 3}, {"m": 4, "n": 5, "k": 6}]
    one, other = plan_sweep("torch.mm", shapes, {"dtype": "fp32"})
    assert one.key != other.key and one.group == other.group == "torch.mm"
    assert plan_sweep("torch.mm", shapes, {"dtype": "bf16"})[0].key != one.key


# --- merging ------------------------------------------------------------------------------------


def test_the_merged_suite_keeps_discovery_order_and_says_why_a_task_failed():
    found, tasks = plan_suite(KB)
    assert len(tasks) == sum(len(solutions) for _, solutions in found)
    assert len({t.key for t in tasks}) == len(tasks)
    ran_on = {"node": "10.0.0.2", "gpu": "1", "name": "NVIDIA H100"}
    records = {}
    for t in tasks[1:]:
        verdict = {"problem": "x", "format": "kernelbench", "solution": t.payload["solution"],
                   "status": "pass", "message": "ok", "records": [{"r": t.key}]}  # fmt: skip
        result = {"verdict": verdict, "setup_error": None, "skipped": None,
                  "baselines": {"b": 1}, "notes": [], "baseline_records": [{"b": t.key}]}  # fmt: skip
        records[t.key] = {"result": result, "ran_on": ran_on, "attempts": []}
    records[tasks[0].key] = {"failed": "the task failed 2 times (...)", "attempts": [{}, {}]}
    merged = merge_suite(KB, found, tasks, records, device="cuda", scale=1.0)
    assert [row["solution"] for row in merged["rows"]] == [
        str(s) for _, solutions in found for s in solutions
    ]
    first = merged["rows"][0]
    assert first["status"] == "error" and first["message"].startswith("the task failed 2")
    assert merged["rows"][1]["ran_on"] == ran_on
    assert merged["summary"] == {"error": 1, "pass": len(tasks) - 1}
    assert len(merged["records"]) == 2 * (len(tasks) - 1)  # baselines and verdicts
    assert list(merged) == ["directory", "device", "scale", "problems", "rows", "summary",
                            "records"]  # fmt: skip


def test_the_merged_sweep_keeps_shape_order_and_each_card_apart():
    shapes = [{"n": 1}, {"n": 2}, {"n": 3}]
    tasks = plan_sweep("k", shapes, {})
    on = [{"node": "a", "gpu": "0", "name": "H100"}, {"node": "b", "gpu": "0", "name": "A100"}]

    def done(shape, card, place):
        row = {"implementation": "k", "shape": shape, "check_ok": True}
        record = {"op": "x", "shape": shape, "extra": {"bound": "memory"}}
        return {"result": {"rows": [row], "records": [record], "gpu": place["name"],
                           "card": card}, "ran_on": place, "attempts": []}  # fmt: skip

    records = {
        tasks[0].key: done(shapes[0], "h100-sxm", on[0]),
        tasks[2].key: done(shapes[2], "a100-sxm", on[1]),
        tasks[1].key: {"failed": "the task failed 2 times (...)", "attempts": [{}, {}]},
    }
    merged = merge_sweep("k", tasks, records)
    assert [row["shape"] for row in merged["rows"]] == shapes
    assert [row["check_ok"] for row in merged["rows"]] == [True, False, True]
    assert set(merged["by_card"]) == {"h100-sxm", "a100-sxm"}  # never one file of two cards
    (h100,) = merged["by_card"]["h100-sxm"]
    assert h100["extra"] == {"bound": "memory", "ran_on": on[0]}
    assert merged["gpus"] == ["H100", "A100"]


# --- the command line without Ray ------------------------------------------------------------


def run(*args) -> tuple[int, str]:
    out = io.StringIO()
    with redirect_stdout(out):
        code = main(list(args))
    return code, out.getvalue()


@pytest.fixture
def no_ray(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError


def test_more_than_one_gpu_without_ray_is_one_line(no_ray, capsys):
    for command in (
        ["eval", "--suite", str(GM), "--gpus", "2", *SMALL],
        ["bench", "torch.mm", "--sizes", "8", "--gpus", "2"],
    ):
        assert main(command) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "needs Ray, which is not installed" in err
        assert "pip install 'kernelab[ray]'" in err


@pytest.mark.parametrize(
    "args, match",
    [
        (["eval", "--suite", str(GM), "--gpus", "0"], "--gpus must be at least 1"),
        (["eval", "--suite", str(GM), "--gpus", "1", "--resume"], "apply to a suite spread"),
        (["eval", str(KB / "relu.py"), str(KB / "relu.py"), "--gpus", "2"], "apply to --suite"),
        (["eval", "--suite", str(GM), "--ray-address", "nowhere"], "HOST:PORT"),
        (["bench", "torch.mm", "--sizes", "8", "--resume"], "apply to a sweep spread"),
        (["bench", "torch.mm", "--sizes", "8", "--gpus", "2", "--plot", "a.png"], "--plot"),
    ],
)
def test_bad_spread_options_are_one_line(args, match, capsys):
    assert main([*args, *(["--device", "cpu"] if args[0] == "eval" else [])]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and match in err


@pytest.mark.parametrize(
    "args",
    [
        ["eval", "--suite", str(GM), *SMALL, "--gpus", "2", "--tasks-dir", "/proc/x"],
        ["bench", "torch.mm", "--sizes", "8", "--gpus", "2", "--tasks-dir", "/proc/x"],
    ],
)
def test_an_unwritable_tasks_dir_is_one_line(args, capsys):
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--tasks-dir /proc/x: cannot write in /proc" in err


@pytest.mark.parametrize(
    "args",
    [
        ["eval", "--suite", str(GM), *SMALL, "--gpus", "2"],
        ["bench", "torch.mm", "--sizes", "8", "--gpus", "2"],
    ],
)
def test_gpus_on_a_machine_without_one_is_one_line_before_ray(args, capsys, monkeypatch,
                                                               tmp_path):  # fmt: skip
    ray = pytest.importorskip("ray")
    if ray.is_initialized():
        pytest.skip("a Ray session of another test is up: its GPUs would count")
    from kernelab.spread import engine

    monkeypatch.setattr(engine, "local_gpu_count", lambda: 0)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setenv("KERNELAB_CACHE", str(tmp_path / "cache"))
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "this machine's GPUs and it has none" in err
    assert not ray.is_initialized() and not (tmp_path / "cache").exists()


def test_one_gpu_judges_here_as_before(no_ray, tmp_path):
    suite = tmp_path / "suite"
    (suite / "solutions" / "relu").mkdir(parents=True)
    shutil.copy(KB / "relu.py", suite / "relu.py")
    for name in ("correct/model_new.py", "wrong/zeros.py"):
        shutil.copy(KB / "solutions/relu" / name, suite / "solutions/relu" / Path(name).name)
    plain = run("eval", "--suite", str(suite), *SMALL, "--json")
    one = run("eval", "--suite", str(suite), *SMALL, "--json", "--gpus", "1")
    assert plain[0] == one[0] == 1
    assert steady(json.loads(plain[1])) == steady(json.loads(one[1]))
    assert "spread" not in json.loads(one[1])


def steady(result: dict) -> dict:
    """A suite's result without what differs from one run to the next: the memory free at
    the time and the worker's random uid."""
    rows = [{k: v for k, v in row.items() if k not in ("memory", "wall")} for row in result["rows"]]
    return {**result, "rows": rows}


# --- benchmarks/spread_suite.py without a GPU ------------------------------------------------


def _benchmark():
    return load_script("spread_suite")


def test_the_benchmark_plans_copies_of_the_suite_and_states_its_targets(tmp_path):
    script = _benchmark()
    suite = script.replicate_suite(KB, tmp_path / "suite", 3)
    found, tasks = plan_suite(suite)
    one = plan_suite(KB)[1]
    assert len(found) == 3 * len(plan_suite(KB)[0]) and len(tasks) == 3 * len(one)
    out = tmp_path / "plan.json"
    assert script.main(["--dry-run", "--gpus", "4", "--copies", "2", "--out", str(out)]) == 0
    record = json.loads(out.read_text())
    assert record["dry_run"] and record["plan"]["tasks"] == 2 * len(one)
    assert "0.9 * 4" in record["plan"]["targets"]["scaling"]


def test_the_benchmark_checks_each_target_against_its_goal():
    script = _benchmark()
    met = script.check_targets(4, 40, {"local": 100.0, "ray1": 104.0, "rayN": 27.0}, [])
    assert met["scaling"]["met"] and met["overhead"]["met"] and met["parity"]["met"]
    assert met["scaling"]["speedup"] == pytest.approx(100 / 27)
    missed = script.check_targets(4, 40, {"local": 100.0, "ray1": 106.0, "rayN": 28.0}, ["x"])
    assert not missed["scaling"]["met"]  # 3.57x < 3.6x
    assert not missed["overhead"]["met"] and not missed["parity"]["met"]
    a = {("relu", "solutions/relu/a.py"): "pass"}
    b = {("relu", "solutions/relu/a.py"): "fail"}
    assert script.mismatches(a, a) == [] and script.mismatches(a, b) == [
        "relu solutions/relu/a.py: pass vs fail"
    ]


def test_a_spread_suite_never_writes_two_cards_into_one_record_file(tmp_path):
    from kernelab.commands.evaluate import _save_per_card
    from kernelab.harness.records import Record, load_records

    def record(gpu: str, gpu_id: str | None) -> dict:
        stats = {"median": 1.0, "rel_noise": 0.0}
        return Record(op="relu", implementation="x", shape={"n": 1}, dtype="fp32", mode="cold",
                      samples_ms=[1.0], stats=stats, gpu=gpu, gpu_id=gpu_id).to_dict()  # fmt: skip

    out = tmp_path / "eval.json"
    assert _save_per_card([record("NVIDIA H100", "h100-sxm")] * 2, out) == str(out)
    assert len(load_records(out)) == 2
    saved = _save_per_card(
        [record("NVIDIA H100", "h100-sxm"), record("Odd Card", None)], tmp_path / "two.json"
    )
    files = sorted(Path(name) for name in saved.split(", "))
    assert [f.name for f in files] == ["two.h100-sxm.json", "two.odd-card.json"]
    assert all(len(load_records(f)) == 1 for f in files)


def test_several_visible_gpus_spread_by_default_only_where_ray_is_installed(monkeypatch, capsys):
    import torch

    from kernelab.commands.evaluate import goes_spread

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    assert goes_spread(1, None) is False  # asked for one: here, as before
    monkeypatch.setitem(sys.modules, "ray", None)
    assert goes_spread(None, None) is False
    assert "4 GPUs visible, judging on one: pip install 'kernelab[ray]'" in capsys.readouterr().err
    monkeypatch.delitem(sys.modules, "ray")
    if importlib.util.find_spec("ray") is not None:
        assert goes_spread(None, None) is True
