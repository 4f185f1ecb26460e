"""The report's do_bench section (kernelab.lab.pytorch_view): figures recomputed from the
samples in the records, goals that can fail, the host-cost table, nothing without a run."""

from __future__ import annotations

import json

from kernelab.harness.records import Record
from kernelab.lab.pytorch_view import pytorch_section, target_row
from kernelab.lab.report import Paragraph, Report, Table
from kernelab.lab.results import load_results


def _record(impl, shape, *, ours, base, goal, bytes_=0.0, stored_value=999.0) -> Record:
    return Record(
        op="gemm", implementation=impl, shape=shape, dtype="bf16", mode="do_bench",
        samples_ms=ours, stats={"median": sorted(ours)[len(ours) // 2]}, bytes=bytes_,
        extra={"baseline": "torch.mm", "baseline_samples_ms": base, "goal": goal,
               "value": stored_value, "met": True,  # stored figures the section must not use
               "harness_cold_median_ms": {"ours": 2.0, "base": 1.0},
               "host_cost": {"ours": {"wall_us": 30.0}, "base": {"wall_us": 12.0}}},
    )  # fmt: skip


def test_the_ratio_comes_from_the_two_sides_samples_and_can_fail():
    row = target_row(_record("hgemm:18", {"m": 8}, ours=[1.0, 1.1, 1.2], base=[1.0, 1.0, 0.9],
                             goal="pct >= 100.0"))  # fmt: skip
    assert row["value"] == 1.0 / 1.1 * 100.0  # medians 1.1 and 1.0, not the stored 999
    assert row["met"] is False
    assert row["harness"] == 50.0  # 1.0 / 2.0
    assert row["goal"] == ">= 100 % of torch.mm"


def test_a_rate_goal_is_bytes_over_the_median():
    row = target_row(_record("triton.softmax", {"rows": 2}, ours=[0.25, 0.25], base=[1.0],
                             goal="tbps >= 4.0", bytes_=1e9))  # fmt: skip
    assert row["value"] == 4.0 and row["met"] is True and row["unit"] == "TB/s"


def test_a_rate_goal_shows_the_copy_of_the_same_bytes_timed_in_the_same_run():
    record = _record("triton.softmax", {"rows": 2}, ours=[0.25, 0.25], base=[1.0],
                     goal="tbps >= 4.0", bytes_=1e9)  # fmt: skip
    assert target_row(record)["copy_tbps"] is None  # runs before the copy was timed
    record.extra["copy_ms"] = 0.24
    row = target_row(record)
    assert abs(row["copy_tbps"] - 1e9 / 0.24 / 1e9) < 1e-12
    assert abs(row["pct_of_copy"] - 96.0) < 1e-9  # copy 0.24 ms against ours 0.25 ms
    gemm = _record("hgemm:18", {"m": 8}, ours=[1.0], base=[1.0], goal="pct >= 100.0")
    gemm.extra["copy_ms"] = 0.5  # only a rate goal has a copy ceiling
    assert target_row(gemm)["copy_tbps"] is None


def test_records_without_baseline_samples_or_goal_are_left_out():
    assert target_row(_record("x", {}, ours=[1.0], base=[], goal="pct >= 90")) is None
    assert target_row(_record("x", {}, ours=[1.0], base=[1.0], goal="fast")) is None


def test_the_section_reads_the_latest_run_and_shows_both_tables(tmp_path):
    folder = tmp_path / "pytorch"
    folder.mkdir()
    old = _record("sgemm:13", {"m": 4}, ours=[9.0], base=[1.0], goal="pct >= 90.0")
    new = _record("sgemm:13", {"m": 4}, ours=[1.0], base=[1.0], goal="pct >= 90.0")
    launch = [{"impl": "triton.softmax", "shape": {"rows": 64, "cols": 4096}, "dtype": "bf16",
               "baseline": "torch.softmax", "ours": {"wall_us": 27.0},
               "base": {"wall_us": 8.0}},
              # device-bound: the goal reads host cost, the wall time stays beside it
              {"impl": "sgemm:13", "shape": {"m": 256}, "dtype": "fp32", "baseline": "torch.mm",
               "ours": {"host_us": 15.0, "wall_us": 48.8},
               "base": {"host_us": 19.5, "wall_us": 19.6}}]  # fmt: skip
    for name, record in (("pytorch_targets_20261201.json", old),
                         ("pytorch_targets_20261202.json", new)):  # fmt: skip
        (folder / name).write_text(json.dumps({"records": [record.to_dict()],
                                               "launch_costs": launch}))  # fmt: skip
    results = load_results(tmp_path)
    assert results.pytorch_file == "pytorch/pytorch_targets_20261202.json"
    report = Report("t")
    pytorch_section(report, results)
    targets, costs = [b for b in report.blocks if isinstance(b, Table)]
    [row] = targets.rows
    assert row[4] == "100.00 %" and row[-1] == "yes"
    assert row[6] == "-" and row[7] == "30 / 12"  # no copy ceiling for a % goal
    says = " ".join(b.text for b in report.blocks if isinstance(b, Paragraph))
    assert "the run's code predates direct launches" in says  # its rows say nothing of the path
    old_run, device_bound = costs.rows  # the first has no host figure: its wall stands in
    assert old_run[3:] == ["27.0 (27.0)", "8.0 (8.0, torch.softmax)", "+19.0", "NO"]
    assert device_bound[3:] == ["15.0 (48.8)", "19.5 (19.6, torch.mm)", "-4.5", "yes"]


def test_the_host_table_says_which_launch_path_the_run_took():
    from kernelab.lab.pytorch_view import _launch_path

    row = {"impl": "triton.softmax"}
    assert "direct launches (cuLaunchKernel)" in _launch_path([{**row, "direct_launch": True}])
    assert "KERNELAB_DIRECT_LAUNCH=0" in _launch_path([{**row, "direct_launch": False}])
    assert "differs" in _launch_path([{**row, "direct_launch": True}, row])
    failed = {**row, "error": "check failed"}  # a row that never timed says nothing of the path
    assert "direct launches" in _launch_path([{**row, "direct_launch": True}, failed])
    assert _launch_path([{"impl": "sgemm:13"}]) == ""  # no Triton op: nothing to say


def test_the_host_table_names_the_compiled_replay_when_every_plan_used_it():
    from kernelab.lab.pytorch_view import _launch_path

    def row(compiled_steps):
        plans = {"triton.softmax": {"steps": 1, "compiled_steps": compiled_steps}}
        return {"impl": "triton.softmax", "direct_launch": True, "plans": plans}

    assert "compiled_replay.c" in _launch_path([row(1), row(2)])
    said = _launch_path([row(1), row(0)])  # one plan on the Python path: not claimed
    assert "compiled_replay.c" not in said and "direct launches (cuLaunchKernel)" in said
    assert "compiled_replay.c" not in _launch_path([{**row(1), "plans": {}}])


def test_another_cards_run_gets_its_own_heading_source_and_note(tmp_path):
    from kernelab.lab.results import load_pytorch_run

    (tmp_path / "pytorch").mkdir()
    record = _record("sgemm:13", {"m": 4}, ours=[1.0], base=[1.0], goal="pct >= 90.0")
    (tmp_path / "pytorch" / "pytorch_targets_20261206.json").write_text(
        json.dumps({"records": [record.to_dict()], "launch_costs": []}))  # fmt: skip
    run = load_pytorch_run(tmp_path)
    assert run.records == [] and len(run.pytorch_records) == 1  # the run only, nothing gated
    report = Report("t")
    pytorch_section(report, run, card="on an H100", source="h100/x.json", note="Read it so.")
    heading, intro = report.blocks[0], report.blocks[1]
    assert heading.text.endswith(", on an H100")
    assert intro.text.startswith("From h100/x.json (") and intro.text.endswith(" Read it so.")
    assert load_pytorch_run(tmp_path / "absent").pytorch_records == []


def test_the_newest_run_is_read_whether_or_not_it_is_compressed(tmp_path):
    import lzma

    from kernelab.lab.results import load_pytorch_run

    (tmp_path / "pytorch").mkdir()

    def run_of(impl, when):
        record = _record(impl, {"m": 4}, ours=[1.0], base=[1.0], goal="pct >= 90.0")
        record.timestamp = when
        return json.dumps({"records": [record.to_dict()], "launch_costs": []})

    # newest by the records' timestamps, not by the file name
    (tmp_path / "pytorch" / "pytorch_targets_z.json").write_text(
        run_of("a:1", "2026-12-05T10:00:00+00:00"))  # fmt: skip
    with lzma.open(tmp_path / "pytorch" / "pytorch_targets_a.json.xz", "wt") as f:
        f.write(run_of("b:2", "2026-12-06T10:00:00+00:00"))
    run = load_pytorch_run(tmp_path)
    assert [r.implementation for r in run.pytorch_records] == ["b:2"]
    assert run.pytorch_file == "pytorch/pytorch_targets_a.json.xz"
    assert run.unreadable == []
    # a damaged archive is reported, not skipped in silence: it may be the newest run
    (tmp_path / "pytorch" / "pytorch_targets_20261207.json.xz").write_bytes(b"not xz")
    broken = load_pytorch_run(tmp_path)
    assert [u.split(":")[0] for u in broken.unreadable] == ["pytorch/pytorch_targets_20261207.json.xz"]


def test_no_run_no_section(tmp_path):
    report = Report("t")
    pytorch_section(report, load_results(tmp_path))
    assert report.blocks == []
