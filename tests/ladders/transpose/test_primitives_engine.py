"""The engine the transpose and histogram ladders share, without a GPU: the rows a timing
makes (GB/s, % of the copy, speedup over the step before and over the anchor) from a stand-in
timer, and the verdict a profiled proof metric gets."""

from __future__ import annotations

from types import SimpleNamespace

from kernelab.ladders.engine import timed_rows, verdict


def test_rows_relate_each_step_to_the_copy_the_step_before_and_the_anchor():
    times = {"copy": 1.0, "torch.x": 4.0, "x:01": 8.0, "x:02": 2.0}

    def timer(fn):
        return SimpleNamespace(median_ms=times[fn()], rel_noise=0.01)

    entries = [(name, "t", lambda name=name: name) for name in ("torch.x", "x:01", "x:02")]
    rows = timed_rows(
        entries, bytes_moved=2e9, copy=lambda: "copy", copy_bytes=2e9, anchor="torch.x",
        mode="cold", max_time_s=1.0, progress=lambda _: None, timer=timer,
    )  # fmt: skip
    by = {r["step"]: r for r in rows}
    assert by["copy"]["gbps"] == 2000 and by["copy"]["pct_of_copy"] == 100
    assert by["x:02"]["pct_of_copy"] == 50 and by["x:01"]["pct_of_copy"] == 12.5
    assert by["x:01"]["speedup_vs_prev"] is None  # the anchor is no step
    assert by["x:02"]["speedup_vs_prev"] == 4.0
    assert by["x:02"]["speedup_vs_anchor"] == 2.0 and by["x:01"]["speedup_vs_anchor"] == 0.5


def test_verdicts():
    assert verdict("zero", 1e6, 0) == "PASS" and verdict("zero", 0, 3) == "FAIL"
    # ncu's background of extra wavefronts passes; a 2-way conflict on every other load fails
    assert verdict("zero", 4_108_130, 13_481, per_load=13_481 / 131_072) == "PASS"
    assert verdict("zero", 2_019_378, 80_011, per_load=80_011 / 131_072) == "FAIL"
    assert verdict("down", 10, 5) == "PASS" and verdict("down", 5, 10) == "FAIL"
    assert verdict("down", None, 5) == "NO-PREV" and verdict("down", 5, None) == "MISSING"
    assert verdict("reference", None, 7) == "PASS"
