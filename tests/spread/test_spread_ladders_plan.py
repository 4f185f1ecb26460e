"""The pure half of a ladder spread over GPUs (kernelab.spread.ladders): a task per size, the
ladder's result merged from the task records in the local order, each row and record naming
its GPU, and the one-line errors of `kernelab ladder ... --gpus N`. No Ray, no GPU."""

from __future__ import annotations

import sys

import pytest

from kernelab.cli import main
from kernelab.spread.ladders import merge_ladder, plan_ladder

SETTINGS = {"steps": None, "mode": "cold", "max_time": 2.0, "options": {"dtypes": ["fp32"]}}
H200 = {"node": "10.0.0.1", "gpu": "0", "name": "NVIDIA H200"}
H100 = {"node": "10.0.0.2", "gpu": "1", "name": "NVIDIA H100 80GB HBM3"}


def test_a_task_per_distinct_size_in_the_order_given():
    tasks = plan_ladder("reduce", [1 << 24, 1 << 20, 1 << 24, 7], SETTINGS)
    assert [t.payload["size"] for t in tasks] == [1 << 24, 1 << 20, 7]
    assert [t.label for t in tasks] == ["reduce 16777216", "reduce 1048576", "reduce 7"]
    assert len({t.key for t in tasks}) == 3 and {t.group for t in tasks} == {"reduce"}
    again = plan_ladder("reduce", [7], SETTINGS)
    assert again[0].key == tasks[2].key  # stable: the name of the task's record file
    other = plan_ladder("reduce", [7], {**SETTINGS, "options": {"dtypes": ["bf16"]}})
    assert other[0].key != tasks[2].key  # other settings, another task
    assert plan_ladder("scan", [7], SETTINGS)[0].key != tasks[2].key


def test_transpose_shapes_travel_as_lists():
    (task,) = plan_ladder("transpose", [(4096, 1000)], SETTINGS)
    assert task.payload == {"size": [4096, 1000]} and task.label == "transpose 4096x1000"


def _reduce_result(n: int, dtypes: list[str], card: str, gpu: str, ok: bool = True) -> dict:
    rows = [{"step": step, "n": n, "dtype": d, "median_ms": 1.0}
            for d in dtypes for step in ("torch.sum", "reduce:01")]  # fmt: skip
    records = [{"op": "reduce_sum", "implementation": r["step"], "shape": {"n": n},
                "dtype": r["dtype"], "extra": {"ladder": "reduce"}} for r in rows]  # fmt: skip
    checks = [{"step": "reduce:01", "n": 1, "dtype": d, "ok": True, "error": 0.1 * n}
              for d in dtypes]  # fmt: skip
    if not ok:
        checks.append({"step": "reduce:01", "n": n, "dtype": "fp32", "ok": False, "error": 9.0})
    extra = {"read_ceiling": [3e12, "cached"], "cub": "CUB line"}
    return {"rows": rows, "records": records, "checks": checks, "notes": [], "extra": extra,
            "gpu": gpu, "card": card}  # fmt: skip


def test_the_merge_keeps_the_local_order_and_names_every_gpu():
    dtypes = ["fp32", "bf16"]
    options = {"dtypes": dtypes}
    tasks = plan_ladder("reduce", [1024, 2048, 4096], {**SETTINGS, "options": options})
    done = {
        tasks[0].key: {"result": _reduce_result(1024, dtypes, "h200", "NVIDIA H200"),
                       "ran_on": H200, "attempts": []},
        tasks[1].key: {"result": _reduce_result(2048, dtypes, "h100-sxm", H100["name"], ok=False),
                       "ran_on": H100, "attempts": [{"place": "10.0.0.1 gpu 0", "reason": "cut"}]},
        tasks[2].key: {"failed": "the task failed 2 times (...)", "attempts": [{}, {}]},
    }  # fmt: skip
    merged = merge_ladder("reduce", tasks, done, options)
    # the local reduce ladder walks dtypes first, then sizes
    assert [(r["dtype"], r["n"]) for r in merged["rows"]][::2] == [
        ("fp32", 1024), ("fp32", 2048), ("bf16", 1024), ("bf16", 2048)
    ]  # fmt: skip
    assert all(r["ran_on"] == (H200 if r["n"] == 1024 else H100) for r in merged["rows"])
    assert list(merged["by_card"]) == ["h200", "h100-sxm"]  # never one file mixing cards
    for card, ran_on in (("h200", H200), ("h100-sxm", H100)):
        assert {r["extra"]["ran_on"]["name"] for r in merged["by_card"][card]} == {ran_on["name"]}
        assert [r["dtype"] for r in merged["by_card"][card]] == ["fp32"] * 2 + ["bf16"] * 2
    assert merged["gpus"] == ["NVIDIA H200", H100["name"]]
    # a check passed on both cards shows once; the one that failed names its GPU
    assert sum(c["n"] == 1 for c in merged["checks"]) == 2
    (bad,) = [c for c in merged["checks"] if not c["ok"]]
    assert bad["n"] == 2048 and bad["ran_on"] == H100
    (failed,) = merged["failed"]
    assert failed["size"] == 4096 and "failed 2 times" in failed["message"]
    assert [p["size"] for p in merged["placed"]] == [1024, 2048]
    assert merged["extra"]["read_ceilings"] == {"h200": [3e12, "cached"],
                                                "h100-sxm": [3e12, "cached"]}  # fmt: skip


def test_hgemm_grids_come_back_keyed_by_size_after_a_json_round_trip():
    tasks = plan_ladder("hgemm", [4096], SETTINGS)
    result = {"rows": [], "records": [], "checks": {"hgemm:01": [{"shape": {}, "ok": True}]},
              "notes": [], "gpu": "NVIDIA H200", "card": "h200",
              "extra": {"grids": {"hgemm:09": {"4096": 132}}, "paired": []}}  # fmt: skip
    merged = merge_ladder("hgemm", tasks, {tasks[0].key: {"result": result, "ran_on": H200}}, {})
    assert merged["extra"]["grids"] == {"hgemm:09": {4096: 132}}
    assert merged["checks"] == {"hgemm:01": [{"shape": {}, "ok": True}]}
    # the same check passed on another card, with its own errors: still one row
    other = {**result, "checks": {"hgemm:01": [{"shape": {}, "ok": True, "error": 0.2,
                                                "trials": [{"error": 0.2}]}]}}  # fmt: skip
    tasks += plan_ladder("hgemm", [8192], SETTINGS)
    done = {tasks[0].key: {"result": result, "ran_on": H200},
            tasks[1].key: {"result": other, "ran_on": H100}}  # fmt: skip
    assert len(merge_ladder("hgemm", tasks, done, {})["checks"]["hgemm:01"]) == 1


def _one_line_error(capsys, *args) -> str:
    code = main(["ladder", *args])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert err[0].startswith("kernelab: ")
    return err[0]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["reduce", "--resume"], "--resume and --tasks-dir apply to a ladder spread"),
        (["scan", "--tasks-dir", "x"], "--resume and --tasks-dir apply to a ladder spread"),
        (["reduce", "--gpus", "2", "--profile"], "--profile reads one size on one GPU"),
        (["sgemm", "--gpus", "2", "--plot", "x.png"], "--plot draws one card's ladder"),
        (["reduce", "--gpus", "0"], "--gpus must be at least 1"),
        (["reduce", "--gpus", "2", "--timeout", "0"], "--timeout must be a positive"),
        (["reduce", "--ray-address", "nowhere"], "--ray-address must be auto or HOST:PORT"),
        (["reduce", "--gpus", "2", "--sizes", "2^x"], "reduce sizes are positive"),
        (["reduce", "--steps", "1", "--gpus", "2", "--tasks-dir", "/proc/x"],
         "--tasks-dir /proc/x: cannot write in /proc"),
        (["scan", "--gpus", "2", "--tasks-dir", "/proc/x/y"], "cannot write in /proc"),
        (["reduce", "--gpus", "2", "--tasks-dir", ""], "not an empty string"),
    ],
)  # fmt: skip
def test_bad_spread_options_are_one_line(capsys, args, says):
    assert says in _one_line_error(capsys, *args)


def test_a_tasks_dir_that_is_a_file_is_one_line(capsys, tmp_path):
    (tmp_path / "a_file").write_text("")
    line = _one_line_error(capsys, "reduce", "--gpus", "2", "--tasks-dir", str(tmp_path / "a_file"))
    assert "is a file; give a folder" in line


def test_gpus_on_a_machine_without_one_is_one_line_before_ray_or_any_compile(
    capsys, monkeypatch, tmp_path
):
    ray = pytest.importorskip("ray")
    if ray.is_initialized():
        pytest.skip("a Ray session of another test is up: its GPUs would count")
    import kernelab.ladders.reduce.ladder as reduce_ladder
    from kernelab.spread import engine

    def no_compile(*_args, **_kwargs):
        raise AssertionError("compiled before the GPUs were counted")

    monkeypatch.setattr(reduce_ladder, "compile_report", no_compile)
    monkeypatch.setattr(engine, "local_gpu_count", lambda: 0)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setenv("KERNELAB_CACHE", str(tmp_path / "cache"))
    line = _one_line_error(capsys, "reduce", "--steps", "1", "--gpus", "2")
    assert "--gpus spreads over this machine's GPUs and it has none" in line
    assert not ray.is_initialized()  # Ray never started
    assert not (tmp_path / "cache").exists()  # no task folder, no run.json


def test_gpus_without_ray_says_so_before_any_compile(capsys, monkeypatch):
    import kernelab.ladders.reduce.ladder as reduce_ladder

    def no_compile(*_args, **_kwargs):
        raise AssertionError("compiled before Ray was found")

    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    monkeypatch.setattr(reduce_ladder, "compile_report", no_compile)
    line = _one_line_error(capsys, "reduce", "--sizes", "2^20,2^24", "--gpus", "2")
    assert "--gpus needs Ray, which is not installed: pip install 'kernelab[ray]'" in line


# --- the runner speaks each engine's language -----------------------------------------------

ENGINE_RESULTS = {
    "sgemm": {
        "check_steps": lambda steps, shapes, **_: [
            {"step": s.name, "shape": shapes[0], "ok": s.number != 2} for s in steps
        ],
        "time_ladder": ([], []),
    },
    "hgemm": {
        "check_steps": lambda steps, **kw: {
            s.name: [{"shape": sh, "ok": True} for sh in kw["shapes"]] for s in steps
        },
        "persistent_grids": {},
        "time_ladder": ([], []),
        "time_paired": [],
    },
    "reduce": {
        "check_steps": [],
        "read_ceiling": (3e12, "cached"),
        "time_ladder": ([], [], "CUB line"),
    },
    "transpose": {"check_steps": [], "time_ladder": ([], [])},
    "histogram": {"check_steps": [], "time_ladder": ([], [], ["a note"])},
    "scan": {"check_steps": [], "time_ladder": ([], [], ["a note"])},
}
OPTIONS = {
    "sgemm": {}, "hgemm": {"modes": ["cold"], "pairs": 3}, "reduce": {"dtypes": ["fp32"]},
    "transpose": {"dtype": "fp32"}, "histogram": {"dtype": "int32", "bins": 256},
    "scan": {"dtype": "int32"},
}  # fmt: skip
SIZES = {"transpose": [[64, 48], [32, 32]]}


@pytest.mark.parametrize("ladder", list(ENGINE_RESULTS))
def test_the_runner_calls_each_engine_with_the_arguments_its_functions_take(ladder, monkeypatch):
    import importlib
    import inspect

    from kernelab.harness.ceilings import DeviceIdentity
    from kernelab.spread.ladders import LadderRunner

    engine = importlib.import_module(f"kernelab.ladders.{ladder}.ladder")
    calls = []
    for name, answer in ENGINE_RESULTS[ladder].items():
        signature = inspect.signature(getattr(engine, name))

        def fake(*args, _name=name, _signature=signature, _answer=answer, **kwargs):
            _signature.bind(*args, **kwargs)  # a TypeError if the runner speaks otherwise
            calls.append(_name)
            return _answer(*args, **kwargs) if callable(_answer) else _answer

        monkeypatch.setattr(engine, name, fake)
    runner = LadderRunner(ladder=ladder, steps=None, mode="cold", max_time=0.5,
                          options=OPTIONS[ladder])  # fmt: skip
    monkeypatch.setattr(runner, "identity",
                        lambda: DeviceIdentity(0, "NVIDIA H200", "h200", None, (9, 0)))  # fmt: skip
    for size in SIZES.get(ladder, [4096, 1000]):
        found = runner.run({"size": size})
        assert found["gpu"] == "NVIDIA H200" and found["card"] == "h200"
        assert set(found) >= {"rows", "records", "checks", "notes", "extra"}
    if ladder in ("transpose", "histogram", "scan"):  # size-free checks once a card
        assert calls.count("check_steps") == 1
    if ladder == "hgemm":  # the awkward shapes once a card, then each size not among them
        fixed = engine.check_shapes()
        extra = [s for s in (4096, 1000) if {"m": s, "n": s, "k": s} not in fixed]
        assert calls.count("check_steps") == 1 + len(extra) and extra
    if ladder == "reduce":
        assert calls.count("read_ceiling") == 1 and found["extra"]["cub"] == "CUB line"
    if ladder == "hgemm":
        assert calls.count("time_paired") == 2
    if ladder == "sgemm":  # a step wrong at the task's size is not timed there
        assert "sgemm:02" not in {s.name for s in runner._passing({"sgemm:02"})}


def test_a_table_per_size_names_the_card_that_size_ran_on():
    from kernelab.commands.ladder_tables import gpu_at

    result = {"gpu": "NVIDIA H200, NVIDIA H100 80GB HBM3",
              "placed": [{"size": 1024, "ran_on": H200}, {"size": 2048, "ran_on": H100}]}  # fmt: skip
    assert gpu_at(result, 1024) == "NVIDIA H200" and gpu_at(result, 2048) == H100["name"]
    assert gpu_at({"gpu": "NVIDIA H200"}, 1024) == "NVIDIA H200"  # the local ladder


def test_an_unreachable_cluster_is_one_line_before_any_compile(capsys, monkeypatch):
    ray = pytest.importorskip("ray")
    if ray.is_initialized():
        pytest.skip("a Ray session of another test is up: the address would not be tried")
    import kernelab.ladders.scan.ladder as scan_ladder

    def no_compile(*_args, **_kwargs):
        raise AssertionError("compiled before the cluster was reached")

    monkeypatch.setattr(scan_ladder, "compile_scan", no_compile)
    line = _one_line_error(capsys, "scan", "--ray-address", "127.0.0.1:9")
    assert line.startswith("kernelab: cannot reach the Ray cluster at 127.0.0.1:9")
