"""benchmarks/primitives_ladders.py's judgement of its targets, from stand-in ladders: the
transpose against copy and torch, the histogram against the read ceiling (copy only where no
read ceiling was measured) and torch.bincount, the skewed and MoE cases stated beside it."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from benchmark_scripts import load_script

from kernelab.ladders import engine
from kernelab.ladders.histogram import ladder as histogram
from kernelab.ladders.transpose import ladder as transpose

ARGS = SimpleNamespace(quick=True, max_time=0.1)


def _row(step, shape, median_ms, gbps, pct_copy, pct_read=None, **extra):
    return {"step": step, "shape": shape, "median_ms": median_ms, "gbps": gbps,
            "pct_of_copy": pct_copy, "pct_of_read": pct_read,
            "read_ceiling_gbps": None if pct_read is None else 100 * gbps / pct_read,
            **extra}  # fmt: skip


def _stub_checks(monkeypatch, module, steps):
    monkeypatch.setattr(module, "parse_steps", lambda _: steps)
    monkeypatch.setattr(module, "check_steps", lambda steps, dtypes, progress: [
        {"step": s.name, "dtype": dtypes[0], "ok": True} for s in steps])  # fmt: skip


@pytest.mark.parametrize(("pct", "torch_ms", "passes"),
                         [(92.0, 1.2, True), (85.0, 1.2, False), (95.0, 0.9, False)])  # fmt: skip
def test_transpose_target_needs_copy_share_and_torch(monkeypatch, pct, torch_ms, passes):
    script = load_script("primitives_ladders")
    shape = {"rows": 8192, "cols": 8192}
    _stub_checks(monkeypatch, transpose, [SimpleNamespace(name="transpose:04")])
    rows = [_row("torch.transpose", shape, torch_ms, 1.0, 50.0),
            _row("transpose:04", shape, 1.0, 2.0, pct)]
    monkeypatch.setattr(transpose, "time_ladder", lambda *a, **k: (rows, ["record"]))
    records, summary = [], []
    script._transpose(ARGS, records, summary)
    assert [entry["pass"] for entry in summary] == [passes, passes]  # fp32 and bf16
    assert summary[0]["best"] == "transpose:04" and records == ["record", "record"]


def _histogram_rows(shape, *, pct_read, pct_copy, torch_ms, with_read=True):
    rows = []
    for distribution in ("uniform", "skewed", "moe"):
        rows.append(_row("torch.bincount", shape, torch_ms, 1.0, 10.0,
                         distribution=distribution))  # fmt: skip
        rows.append(_row("histogram:03", shape, 1.0, 5.0, pct_copy,
                         pct_read if with_read else None, distribution=distribution))  # fmt: skip
    return rows


@pytest.mark.parametrize(("pct_read", "pct_copy", "torch_ms", "passes"), [
    (82.0, 70.0, 6.0, True),    # above the read target though below it against copy
    (78.0, 90.0, 6.0, False),   # the read ceiling judges, not copy
    (90.0, 90.0, 4.0, False),   # under 5x torch.bincount
])  # fmt: skip
def test_histogram_target_is_judged_against_the_read_ceiling(
    monkeypatch, pct_read, pct_copy, torch_ms, passes
):
    script = load_script("primitives_ladders")
    _stub_checks(monkeypatch, histogram, [SimpleNamespace(name="histogram:03")])
    monkeypatch.setattr(engine, "read_ceiling", lambda *a, **k: (3.0e12, "stand-in"))
    seen = {}

    def time_ladder(steps, sizes, bins, dtype, **options):
        seen.update(options)
        return _histogram_rows({"n": sizes[0], "bins": bins}, pct_read=pct_read,
                               pct_copy=pct_copy, torch_ms=torch_ms), [], ["note"]  # fmt: skip

    monkeypatch.setattr(histogram, "time_ladder", time_ladder)
    summary = []
    script._histogram(ARGS, [], summary)
    assert seen["read"] == (3.0e12, "stand-in")  # measured once, handed to every timing
    assert seen["distributions"] == histogram.DISTRIBUTIONS
    assert {entry["pass"] for entry in summary} == {passes}
    entry = summary[0]
    assert entry["judged_against"] == "read" and entry["pct_of_read"] == pct_read
    assert entry["skewed_best"] == entry["moe_best"] == "histogram:03"


def test_without_a_read_ceiling_the_histogram_is_judged_against_copy(monkeypatch):
    script = load_script("primitives_ladders")
    _stub_checks(monkeypatch, histogram, [SimpleNamespace(name="histogram:03")])
    monkeypatch.setattr(engine, "read_ceiling", lambda *a, **k: (None, "not measured"))
    monkeypatch.setattr(histogram, "time_ladder", lambda steps, sizes, bins, dtype, **o: (
        _histogram_rows({"n": sizes[0], "bins": bins}, pct_read=None, pct_copy=85.0,
                        torch_ms=6.0, with_read=False), [], []))  # fmt: skip
    summary = []
    script._histogram(ARGS, [], summary)
    assert all(e["judged_against"] == "copy" and e["pass"] for e in summary)
