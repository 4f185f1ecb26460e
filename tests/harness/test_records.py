"""Result records: the schema round-trip, atomic saving, and labelling changes within noise."""

from __future__ import annotations

import json
import os

import pytest
from record_factory import make_record

from kernelab.errors import KernelabError
from kernelab.harness.records import (
    SCHEMA_VERSION,
    Record,
    append_record,
    compare_records,
    label_change,
    load_records,
    save_records,
    unmatched,
)


def test_round_trip_keeps_every_field(tmp_path):
    record = make_record(
        (2.0, 0.05),
        warnings=["w"],
        extra={"note": 1},
        pct_of_measured=None,
        clocks={"sm_mhz_max": 1980},
    )
    path = save_records([record], tmp_path / "r.json")
    (loaded,) = load_records(path)
    assert loaded == record
    assert loaded.schema_version == SCHEMA_VERSION
    assert loaded.median_ms == pytest.approx(2.0)
    raw = json.loads(path.read_text())
    assert isinstance(raw, list) and raw[0]["timestamp"].endswith("+00:00")  # ISO, UTC


def test_unknown_fields_are_kept_not_dropped():
    data = make_record().to_dict()
    data["from_the_future"] = 3
    assert Record.from_dict(data).extra["unrecognised"] == {"from_the_future": 3}


def test_a_newer_schema_or_a_missing_field_is_refused():
    data = make_record().to_dict()
    with pytest.raises(KernelabError, match="newer"):
        Record.from_dict({**data, "schema_version": SCHEMA_VERSION + 1})
    del data["samples_ms"]
    with pytest.raises(KernelabError, match="samples_ms"):
        Record.from_dict(data)


@pytest.mark.parametrize("stats", [None, [1.0], "fast"])
def test_stats_that_are_not_an_object_are_refused_in_one_line(stats):
    data = {**make_record().to_dict(), "stats": stats}
    with pytest.raises(KernelabError, match="must be a JSON object with a median"):
        Record.from_dict(data)


def test_load_errors_are_one_line(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    for path, match in ((bad, "not JSON"), (tmp_path / "missing.json", "no record file")):
        with pytest.raises(KernelabError, match=match) as caught:
            load_records(path)
        assert "\n" not in str(caught.value)


def test_save_is_atomic_and_leaves_no_temporary_files(tmp_path, monkeypatch):
    path = tmp_path / "records.json"
    save_records([make_record((1.0, 0.0))], path)
    before = path.read_text()

    def crash(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError):
        save_records([make_record((9.0, 0.0))], path)
    assert path.read_text() == before  # the old file is untouched
    assert [p.name for p in tmp_path.iterdir()] == ["records.json"]  # temp file removed


def test_append_adds_to_the_file(tmp_path):
    path = tmp_path / "sub" / "log.json"
    append_record(make_record((1.0, 0.0)), path)
    append_record(make_record((2.0, 0.0)), path)
    assert [r.median_ms for r in load_records(path)] == [1.0, 2.0]


def test_labels_follow_the_noise_rule():
    # 1 % floor: 0.5 % apart is SAME, 3 % apart is not.
    assert label_change(1.0, 1.005, 0.0, 0.0)[0] == "SAME"
    assert label_change(1.0, 0.97, 0.0, 0.0)[0] == "FAST"
    assert label_change(1.0, 1.03, 0.0, 0.0)[0] == "SLOW"
    # The noisier run decides the band: 3 % apart with 5 % noise is SAME.
    assert label_change(1.0, 1.03, 0.01, 0.05) == ("SAME", 0.05)


def test_compare_pairs_by_key_and_labels():
    old = [
        make_record((1.0, 0.002), implementation="a"),
        make_record((1.0, 0.002), implementation="b"),
        make_record((1.0, 0.2), implementation="c"),  # IQR / median = 0.4: a noisy run
        make_record((1.0, 0.0), implementation="gone"),
    ]
    new = [
        make_record((0.8, 0.002), implementation="a"),
        make_record((1.25, 0.002), implementation="b"),
        make_record((1.1, 0.002), implementation="c"),
        make_record((1.0, 0.0), implementation="a", mode="hot"),  # another mode: no partner
    ]
    by_impl = {c.implementation: c for c in compare_records(old, new)}
    assert set(by_impl) == {"a", "b", "c"}
    assert by_impl["a"].label == "FAST" and by_impl["a"].speedup == pytest.approx(1.25)
    assert by_impl["b"].label == "SLOW" and by_impl["b"].change_pct == pytest.approx(25.0)
    assert by_impl["c"].label == "SAME" and by_impl["c"].noise_pct == pytest.approx(40.0)
    only_old, only_new = unmatched(old, new)
    assert [r.implementation for r in only_old] == ["gone"]
    assert [(r.implementation, r.mode) for r in only_new] == [("a", "hot")]


def test_shapes_must_match_to_pair():
    old = [make_record((1.0, 0.0), shape={"rows": 1, "cols": 2})]
    new = [make_record((2.0, 0.0), shape={"cols": 2, "rows": 1}), make_record((2.0, 0.0))]
    (only,) = compare_records(old, new)  # key order in the dict does not matter
    assert only.shape == {"cols": 2, "rows": 1} and only.label == "SLOW"


def _git_repo(folder):
    import subprocess

    def git(*args):
        subprocess.run(["git", "-C", str(folder), *args], check=True, capture_output=True)

    folder.mkdir()
    git("init", "-q")
    (folder / "code.py").write_text("x = 1\n")
    git("add", "code.py")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "first")
    head = subprocess.run(["git", "-C", str(folder), "rev-parse", "HEAD"], check=True,
                          capture_output=True, text=True).stdout.strip()  # fmt: skip
    return head


def test_source_state_names_the_commit_and_whether_it_was_edited(tmp_path):
    import shutil

    from kernelab.harness.records import source_state

    if shutil.which("git") is None:
        pytest.skip("git is not installed here")
    head = _git_repo(tmp_path / "repo")
    code = tmp_path / "repo" / "code.py"
    assert source_state(code) == (head, False)
    (tmp_path / "repo" / "new_results.json").write_text("[]")  # untracked: still clean
    assert source_state(code) == (head, False)
    code.write_text("x = 2\n")
    assert source_state(code) == (head, True)
    outside = tmp_path / "plain" / "code.py"
    outside.parent.mkdir()
    outside.write_text("x = 1\n")
    assert source_state(outside) == (None, None)  # not in any checkout


def test_source_state_without_git_is_unknown(tmp_path, monkeypatch):
    import subprocess

    from kernelab.harness import records

    def no_git(*args, **kwargs):
        raise FileNotFoundError("git")

    monkeypatch.setattr(subprocess, "run", no_git)
    assert records.source_state(tmp_path / "x.py") == (None, None)


def test_records_carry_the_commit_and_old_records_stay_unknown(tmp_path, monkeypatch):
    from kernelab.harness import records

    monkeypatch.setattr(records, "_this_source", lambda: ("abc123", True))
    record = make_record()
    assert (record.git_commit, record.git_dirty) == ("abc123", True)
    path = save_records([record], tmp_path / "r.json")
    raw = json.loads(path.read_text())[0]
    assert raw["git_commit"] == "abc123" and raw["git_dirty"] is True
    del raw["git_commit"], raw["git_dirty"]  # a record written before the fields existed
    old = Record.from_dict(raw)
    assert old.git_commit is None and old.git_dirty is None
