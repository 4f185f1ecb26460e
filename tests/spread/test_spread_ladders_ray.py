"""`kernelab ladder reduce --gpus 2` through a real Ray session on the CPU with two fake GPU
resources and a stand-in for the ladder's GPU half (spread_ladder_fakes): the same table,
rows and records as the ladder run here, each size on one GPU and named with it; resume;
Ctrl-C."""

from __future__ import annotations

import io
import json
import os
import time
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

import spread_ladder_fakes as fakes  # noqa: E402

import kernelab.commands.ladder_primitives as primitives  # noqa: E402
import kernelab.ladders.reduce.ladder as reduce_ladder  # noqa: E402
import kernelab.spread.ladders as spread_ladders  # noqa: E402
from kernelab.cli import main  # noqa: E402
from kernelab.spread import engine  # noqa: E402

HERE = Path(__file__).parent
ARGS = ["ladder", "reduce", "--sizes", "2^10,3000,2^12", "--dtype", "fp32,bf16"]
VOLATILE = ("timestamp", "git_commit", "git_dirty")  # when and from which checkout, not what


@pytest.fixture(scope="module")
def session():
    """One Ray session for the file; its workers import the stand-in beside this file."""
    before = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), before]))
    ray.init(num_cpus=2, num_gpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()
    if before is None:
        os.environ.pop("PYTHONPATH", None)
    else:
        os.environ["PYTHONPATH"] = before


def install_stand_in(monkeypatch) -> None:
    """The stand-in engine here (the local ladder), in every worker (the spread one), and a
    CUDA GPU that this process pretends to have."""
    monkeypatch.setattr(reduce_ladder, "check_steps", fakes.fake_check_steps)
    monkeypatch.setattr(reduce_ladder, "read_ceiling", fakes.fake_read_ceiling)
    monkeypatch.setattr(reduce_ladder, "time_ladder", fakes.fake_time_ladder)
    monkeypatch.setattr(reduce_ladder, "compile_report", lambda *_a, **_k: [])
    monkeypatch.setattr(primitives, "_has_gpu", lambda: True)
    monkeypatch.setattr(spread_ladders, "LadderRunner", fakes.CpuLadderRunner)


@pytest.fixture
def stand_in(monkeypatch):
    install_stand_in(monkeypatch)


def run(*args) -> tuple[int, str]:
    out = io.StringIO()
    with redirect_stdout(out), redirect_stderr(io.StringIO()):
        code = main(list(args))
    return code, out.getvalue()


def gpus_free_again(session, timeout: float = 20.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if session.available_resources().get("GPU", 0) == 2:
            return True
        time.sleep(0.2)
    return False


def without_ran_on(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in row.items() if k != "ran_on"} for row in rows]


def records_of(path: Path) -> list[dict]:
    return [{k: v for k, v in r.items() if k not in VOLATILE} for r in json.loads(path.read_text())]


@pytest.fixture(scope="module")
def both(session, tmp_path_factory):
    """The ladder run here and spread over two GPUs, as JSON and as the table."""
    with pytest.MonkeyPatch.context() as patch:
        install_stand_in(patch)
        root = tmp_path_factory.mktemp("ladder")
        found = {}
        for name, extra in (("local", []), ("spread", ["--gpus", "2", "--tasks-dir",
                                                        str(root / "tasks")])):  # fmt: skip
            code, text = run(*ARGS, *extra, "--out", str(root / f"{name}.json"), "--json")
            table_code, table = run(*ARGS, *extra, *(["--resume"] if extra else []))
            found[name] = (code, json.loads(text), table_code, table, root / f"{name}.json")
        return found, root


def test_the_spread_ladder_gives_the_local_rows_records_and_table(both, session):
    found, root = both
    code, local, table_code, local_table, local_out = found["local"]
    spread_code, spread, spread_table_code, spread_table, spread_out = found["spread"]
    assert code == spread_code == table_code == spread_table_code == 0
    assert spread["spread"]["tasks"] == 3 and spread["spread"]["gpus"] == 2
    # rows in the local order, each naming the GPU its size ran on
    assert without_ran_on(spread["rows"]) == local["rows"]
    by_size = {p["size"]: p["ran_on"] for p in spread["placed"]}
    assert all(row["ran_on"] == by_size[row["n"]] for row in spread["rows"])
    assert {ran_on["gpu"] for ran_on in by_size.values()} <= {"0", "1"}
    for key in ("gpu", "mode", "sizes", "dtypes", "read_ceiling_bytes_per_s", "cub"):
        assert spread[key] == local[key], key
    assert sorted(map(json.dumps, spread["checks"])) == sorted(map(json.dumps, local["checks"]))
    # one card model: one records file, the local one with ran_on added to each record
    spread_records = records_of(spread_out)
    for record in spread_records:
        assert record["extra"].pop("ran_on") == by_size[record["shape"]["n"]]
    assert spread_records == records_of(local_out)
    # the table: the local one, then where each size ran and the run
    local_lines = [line for line in local_table.splitlines() if not line.startswith("records")]
    spread_lines = spread_table.splitlines()
    assert spread_lines[: len(local_lines)] == local_lines
    assert spread_lines[len(local_lines)].startswith("ran on: 1024 ")
    assert "3 of 3 size(s) resumed" in spread_table
    assert gpus_free_again(session)


def test_resume_times_only_the_sizes_without_a_record(both, session, stand_in):
    found, root = both
    folder = root / "tasks"
    records = sorted(folder.glob("task-*.json"))
    kept = {path: path.stat().st_mtime_ns for path in records[1:]}
    records[0].unlink()
    code, text = run(*ARGS, "--gpus", "2", "--tasks-dir", str(folder), "--resume", "--json")
    again = json.loads(text)
    assert code == 0 and again["spread"]["resumed"] == 2
    assert without_ran_on(again["rows"]) == found["local"][1]["rows"]
    assert all(path.stat().st_mtime_ns == kept[path] for path in kept)  # not timed again
    assert len(list(folder.glob("task-*.json"))) == 3
    # the same folder for other settings is refused, not mixed in
    code = main([*ARGS[:-1], "fp32", "--gpus", "2", "--tasks-dir", str(folder), "--resume"])
    assert code == 2
    assert gpus_free_again(session)


def test_ctrl_c_stops_every_worker_and_keeps_the_finished_sizes(session, stand_in, tmp_path,
                                                                monkeypatch):  # fmt: skip
    collect, seen = engine._collect, []

    def interrupted(*args):
        if seen:
            raise KeyboardInterrupt  # as Ctrl-C arrives while the loop waits for results
        seen.append(1)
        return collect(*args)

    monkeypatch.setattr(engine, "_collect", interrupted)
    folder = tmp_path / "tasks"
    code, _ = run(*ARGS, "--gpus", "2", "--tasks-dir", str(folder))
    assert code == 130
    assert gpus_free_again(session)  # every worker stopped
    assert len(list(folder.glob("task-*.json"))) == 1  # what finished is kept
    monkeypatch.setattr(engine, "_collect", collect)
    code, text = run(*ARGS, "--gpus", "2", "--tasks-dir", str(folder), "--resume", "--json")
    assert code == 0 and json.loads(text)["spread"]["resumed"] == 1


def test_a_size_that_fails_on_both_gpus_is_listed_and_the_rest_are_timed(
    session, stand_in, tmp_path, monkeypatch
):
    monkeypatch.setattr(spread_ladders, "LadderRunner", fakes.FailingLadderRunner)
    code, text = run(*ARGS, "--gpus", "2", "--tasks-dir", str(tmp_path / "tasks"), "--json")
    result = json.loads(text)
    assert code == 1
    (failed,) = result["failed"]
    assert failed["size"] == 3000 and "the task failed 2 times" in failed["message"]
    assert failed["message"].count("RuntimeError: the stand-in fails at n=3000") == 2
    assert len({attempt["place"] for attempt in failed["attempts"]}) == 2  # tried on each GPU
    assert {row["n"] for row in result["rows"]} == {1024, 4096}
    assert gpus_free_again(session)
