"""The engine the transpose, histogram and scan ladders share, without a GPU: the rows a
timing makes (GB/s, % of the copy and of the read ceiling, speedup over the step before and
over the anchor) from a stand-in timer; the do_bench median and the host cost per call each
row and record carries beside the harness's median; and the verdict a profiled proof metric
gets."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from kernelab.ladders import engine
from kernelab.ladders.engine import timed_rows, verdict

TIMES = {"copy": 1.0, "torch.x": 4.0, "x:01": 8.0, "x:02": 2.0}


def _timer(fn):
    return SimpleNamespace(median_ms=TIMES[fn()], rel_noise=0.01)


ENTRIES = [(name, "t", lambda name=name: name) for name in ("torch.x", "x:01", "x:02")]


def test_rows_relate_each_step_to_the_copy_the_step_before_and_the_anchor():
    rows = timed_rows(
        ENTRIES, bytes_moved=2e9, copy=lambda: "copy", copy_bytes=2e9, anchor="torch.x",
        mode="cold", max_time_s=1.0, progress=lambda _: None, timer=_timer,
    )  # fmt: skip
    by = {r["step"]: r for r in rows}
    assert by["copy"]["gbps"] == 2000 and by["copy"]["pct_of_copy"] == 100
    assert by["x:02"]["pct_of_copy"] == 50 and by["x:01"]["pct_of_copy"] == 12.5
    assert by["x:01"]["speedup_vs_prev"] is None  # the anchor is no step
    assert by["x:02"]["speedup_vs_prev"] == 4.0
    assert by["x:02"]["speedup_vs_anchor"] == 2.0 and by["x:01"]["speedup_vs_anchor"] == 0.5
    # without a read ceiling, no % of read; beside a stand-in timer, no do_bench or host cost
    assert all(r["pct_of_read"] is None and r["read_ceiling_gbps"] is None for r in rows)
    assert not any("do_bench_median_ms" in r or "host_cost" in r for r in rows)


def test_rows_give_the_read_ceiling_beside_the_copy():
    """A histogram's bytes are read once: 1e9 bytes in 0.5 ms is 2000 GB/s, 50 % of a
    4 TB/s read roof, while the copy of the same values (2e9 bytes moved in 1 ms) runs at
    2000 GB/s too: 100 % of copy. The two columns differ and each says what it divides by."""
    times = {"copy": 1.0, "torch.x": 1.0, "x:01": 0.5}

    def timer(fn):
        return SimpleNamespace(median_ms=times[fn()], rel_noise=0.0)

    entries = [(name, "t", lambda name=name: name) for name in ("torch.x", "x:01")]
    rows = timed_rows(
        entries, bytes_moved=1e9, copy=lambda: "copy", copy_bytes=2e9, anchor="torch.x",
        mode="cold", max_time_s=1.0, progress=lambda _: None, timer=timer,
        read_bytes_per_s=4e12,
    )  # fmt: skip
    by = {r["step"]: r for r in rows}
    assert by["x:01"]["gbps"] == pytest.approx(2000)
    assert by["x:01"]["pct_of_read"] == pytest.approx(50.0)
    assert by["x:01"]["pct_of_copy"] == pytest.approx(100.0)
    assert by["copy"]["pct_of_read"] == pytest.approx(50.0)  # the copy's read + write rate
    assert all(r["read_ceiling_gbps"] == pytest.approx(4000) for r in rows)


def test_rows_carry_the_do_bench_median_and_the_host_cost_per_call():
    """do_bench's samples reduce to their median and count; the host cost is the harness's
    launch-cost loop (N back-to-back calls, one synchronize at the end), here under a stand-in
    clock that advances 3 us per issued call and 40 us at the synchronize."""
    from kernelab.harness.launch_cost import measure_host_cost

    now = [0.0]
    calls = []

    def clock():
        return now[0]

    def synchronize():
        now[0] += 40e-6

    def counted(fn):
        def call():
            now[0] += 3e-6
            calls.append(1)
            return fn()

        return call

    def do_bench(fn):
        return [TIMES[fn()] * f for f in (1.1, 0.9, 1.0)]  # median: the time itself

    def host_cost(fn, device_ms):
        return measure_host_cost(counted(fn), device_ms, synchronize=synchronize, clock=clock)

    rows = timed_rows(
        ENTRIES, bytes_moved=2e9, copy=lambda: "copy", copy_bytes=2e9, anchor="torch.x",
        mode="cold", max_time_s=1.0, progress=lambda _: None, timer=_timer,
        do_bench=do_bench, host_cost=lambda fn, ms: host_cost(fn, ms).to_dict(),
    )  # fmt: skip
    by = {r["step"]: r for r in rows}
    for name, ms in TIMES.items():
        assert by[name]["do_bench_median_ms"] == pytest.approx(ms)
        assert by[name]["do_bench_samples"] == 3
        host = by[name]["host_cost"]
        assert host["calls"] >= 10 and host["device_us"] == pytest.approx(ms * 1e3)
        assert host["host_us"] == pytest.approx(3.0)
        # wall: the loop's calls and the one synchronize after them, over the calls
        assert host["wall_us"] == pytest.approx(3.0 + 40.0 / host["calls"])
        assert host["launch_bound"] is False  # 3 us to issue, >= 1 ms on the device
    assert by["x:02"]["median_ms"] == 2.0  # the harness's median stays the table's time


def test_time_call_leaves_out_what_is_not_asked_and_resolves_the_real_ones(monkeypatch):
    timing, extra = engine.time_call(lambda: "x:02", _timer)
    assert timing.median_ms == 2.0 and extra == {}
    _, extra = engine.time_call(lambda: "x:02", _timer, do_bench=lambda fn: [], host_cost=False)
    assert extra == {"do_bench_median_ms": None, "do_bench_samples": 0}
    # beside a stand-in timer nothing real is timed; with the harness, do_bench where Triton
    # imports and the launch-cost loop
    assert engine.resolve_extras(_timer, None, None) == (False, False)
    monkeypatch.setattr(engine, "do_bench_sampler", lambda: "triton's")
    assert engine.resolve_extras(None, None, None) == ("triton's", engine._host_cost)
    assert engine.resolve_extras(None, False, False) == (False, False)


def test_records_keep_the_extras(monkeypatch):
    from kernelab.harness import ceilings
    from kernelab.harness.ceilings import DeviceIdentity
    from kernelab.harness.stats import summarize
    from kernelab.harness.timing import Timing

    identity = DeviceIdentity(0, "NVIDIA H200", "h200", "580.65.06", (9, 0))
    monkeypatch.setattr(ceilings, "this_gpu", lambda command="kernelab": identity)

    def timer(fn):
        samples = [TIMES[fn()]] * 5
        return Timing(samples_ms=samples, mode="cold", summary=summarize(samples),
                      stop_reason="converged")  # fmt: skip

    rows = timed_rows(
        ENTRIES, bytes_moved=2e9, copy=lambda: "copy", copy_bytes=2e9, anchor="torch.x",
        mode="cold", max_time_s=1.0, progress=lambda _: None, timer=timer,
        read_bytes_per_s=4e12, do_bench=lambda fn: [TIMES[fn()]],
        host_cost=lambda fn, ms: {"calls": 10, "host_us": 5.0, "wall_us": ms * 1e3},
    )  # fmt: skip
    row = next(r for r in rows if r["step"] == "x:02")
    row["shape"] = {"n": 1}
    record = engine.to_record("histogram", row, "int32", SimpleNamespace(bytes=2e9))
    assert record.extra["do_bench_median_ms"] == 2.0 and record.extra["do_bench_samples"] == 1
    assert record.extra["host_cost"] == {"calls": 10, "host_us": 5.0, "wall_us": 2000.0}
    assert record.extra["pct_of_read"] == pytest.approx(25.0)
    assert record.extra["ladder"] == "histogram" and "timing" not in record.extra
    assert record.median_ms == 2.0 and record.gpu == "NVIDIA H200"


def test_verdicts():
    assert verdict("zero", 1e6, 0) == "PASS" and verdict("zero", 0, 3) == "FAIL"
    # ncu's background of extra wavefronts passes; a 2-way conflict on every other load fails
    assert verdict("zero", 4_108_130, 13_481, per_load=13_481 / 131_072) == "PASS"
    assert verdict("zero", 2_019_378, 80_011, per_load=80_011 / 131_072) == "FAIL"
    assert verdict("down", 10, 5) == "PASS" and verdict("down", 5, 10) == "FAIL"
    assert verdict("down", None, 5) == "NO-PREV" and verdict("down", 5, None) == "MISSING"
    assert verdict("reference", None, 7) == "PASS"
