"""`kernelab ladder NAME --gpus 2` on a machine with two CUDA GPUs and Ray: every size timed
on one card with its anchors, every row and record naming that card, the records in one file
per card model, and the same rows as the ladder run here on one GPU. Needs two CUDA GPUs."""

from __future__ import annotations

import io
import json
from contextlib import redirect_stdout

import pytest

FAST = ["--max-time", "0.2", "--timeout", "900", "--json"]


def _two_gpus():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available() or torch.cuda.device_count() < 2:
        pytest.skip("needs two CUDA GPUs")
    pytest.importorskip("ray")


def _run(*args) -> tuple[int, dict]:
    from kernelab.cli import main

    out = io.StringIO()
    with redirect_stdout(out):
        code = main(list(args))
    return code, json.loads(out.getvalue())


def _size(row: dict):
    if "n" in row:
        return row["n"]
    if "size" in row:
        return row["size"]
    return tuple(row["shape"].values())


@pytest.mark.gpu
def test_the_reduce_ladder_over_two_gpus_times_each_size_on_one_card(tmp_path):
    _two_gpus()
    args = ["ladder", "reduce", "--sizes", "2^20,2^24", "--dtype", "fp32", *FAST]
    code, local = _run(*args, "--gpus", "1")
    out = tmp_path / "reduce.json"
    spread_code, spread = _run(*args, "--gpus", "2", "--tasks-dir", str(tmp_path / "tasks"),
                               "--out", str(out))  # fmt: skip
    assert code == spread_code == 0 and not spread["failed"]
    assert all(c["ok"] for c in spread["checks"])
    key = [(r["step"], r["n"], r["dtype"]) for r in local["rows"]]
    assert [(r["step"], r["n"], r["dtype"]) for r in spread["rows"]] == key
    placed = {p["size"]: p["ran_on"] for p in spread["placed"]}
    assert {ran_on["gpu"] for ran_on in placed.values()} == {"0", "1"}  # a size per GPU
    assert all("NVIDIA" in ran_on["name"] for ran_on in placed.values())
    for row in spread["rows"]:  # every ratio divides two times taken on the size's card
        assert row["ran_on"] == placed[row["n"]]
        assert row["pct_of_read_ceiling"] is not None and row["median_ms"] > 0
    records = json.loads(out.read_text())
    assert len(records) == len(spread["rows"])
    assert len({r["gpu"] for r in records}) == 1  # one card model per file
    assert {r["extra"]["ran_on"]["gpu"] for r in records} == {"0", "1"}


@pytest.mark.gpu
@pytest.mark.parametrize(
    ("ladder", "sizes", "more"),
    [
        ("transpose", "1024,2048x512", []),
        ("histogram", "1048576,4000037", []),
        ("scan", "1048576,3000017", []),
        ("sgemm", "512,1024", ["--steps", "4-6"]),
        ("hgemm", "2048,4096", ["--mode", "cold"]),
    ],
)
def test_every_ladder_spreads_its_sizes_over_two_gpus(tmp_path, ladder, sizes, more):
    _two_gpus()
    out = tmp_path / f"{ladder}.json"
    code, result = _run("ladder", ladder, "--sizes", sizes, *more, *FAST, "--gpus", "2",
                        "--tasks-dir", str(tmp_path / "tasks"), "--out", str(out))  # fmt: skip
    assert code == 0 and not result["failed"] and result["spread"]["tasks"] == 2
    rows = result["timing" if ladder == "hgemm" else "rows"]
    placed = [p["ran_on"] for p in result["placed"]]
    assert {ran_on["gpu"] for ran_on in placed} == {"0", "1"}
    sizes_seen = list(dict.fromkeys(_size(r) for r in rows))
    assert len(sizes_seen) == 2  # both sizes timed, in the order given
    for row in rows:
        same = [r for r in rows if _size(r) == _size(row)]
        assert all(r["ran_on"] == row["ran_on"] for r in same)  # a size's rows: one card
    records = json.loads(out.read_text())
    assert records and all("ran_on" in r["extra"] for r in records)
    assert len({r["gpu"] for r in records}) == 1
