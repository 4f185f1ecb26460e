"""The PMPP ladders in the lab: the stage (compile reports anywhere nvcc is; checks and timings
on a GPU, wired here with stand-ins for the engines), the report's PMPP section, and the drill's
PMPP questions, whose answers come from the cost models and the bank rule."""

from __future__ import annotations

import dataclasses
import json
import random
from pathlib import Path
from types import SimpleNamespace

import pytest
from test_gate import PMPP, pmpp_passing

from kernelab.harness.records import Record
from kernelab.harness.stats import summarize
from kernelab.lab import drill, pmpp
from kernelab.lab.compose import pmpp_section
from kernelab.lab.gate import pmpp_criteria
from kernelab.lab.report import Image, Paragraph, Table, to_markdown
from kernelab.lab.results import load_results


def _state(tmp_path: Path, on_gpu: bool) -> SimpleNamespace:
    records = tmp_path / "records"
    records.mkdir(exist_ok=True)
    return SimpleNamespace(gpu_id="h200", records_dir=records, on_gpu=on_gpu, out=tmp_path)


def _with(monkeypatch, **changes) -> list[pmpp.PrimitiveLadder]:
    """pmpp.LADDERS with each ladder's fields replaced by `changes` (the stand-ins)."""
    ladders = tuple(dataclasses.replace(ladder, **changes) for ladder in pmpp.LADDERS)
    monkeypatch.setattr(pmpp, "LADDERS", ladders)
    return list(ladders)


# --- the stage ----------------------------------------------------------------------------------


def test_every_issue_target_has_one_ladder_entry_and_each_ladder_its_own_records():
    assert [ladder.name for ladder in pmpp.LADDERS] == ["reduce", "scan", "histogram", "transpose"]
    assert {ladder.name: ladder.target.name for ladder in pmpp.LADDERS} == PMPP
    wired = [ladder.name for ladder in pmpp.LADDERS if ladder.compile and ladder.time]
    assert wired == ["reduce", "scan", "histogram", "transpose"]


def test_compile_all_writes_each_wired_ladders_rows_or_why_not(tmp_path, monkeypatch):
    _with(monkeypatch, compile=lambda progress: [{"step": "x:01", "registers": 12}])
    monkeypatch.setattr("kernelab.runtime.cuda.build.find_nvcc", lambda: "/usr/bin/nvcc")
    line = pmpp.compile_all(tmp_path, lambda _: None)
    assert line == "4 compile rows over 4 ladders"
    assert pmpp.read_compile(tmp_path)["reduce"] == {"rows": [{"step": "x:01", "registers": 12}]}
    monkeypatch.setattr("kernelab.runtime.cuda.build.find_nvcc", lambda: None)
    pmpp.compile_all(tmp_path, lambda _: None)
    assert "nvcc not found" in pmpp.read_compile(tmp_path)["histogram"]["skipped"]


def test_the_engines_compile_reports_cover_every_step(tmp_path):
    from kernelab.runtime.cuda.build import find_nvcc

    if find_nvcc() is None:
        pytest.skip("needs nvcc")
    from kernelab.ladders.histogram.steps import STEPS as HISTOGRAM
    from kernelab.ladders.reduce.steps import STEPS as REDUCE
    from kernelab.ladders.transpose.steps import STEPS as TRANSPOSE

    pmpp.compile_all(tmp_path, lambda _: None)
    compiled = pmpp.read_compile(tmp_path)
    for name, steps in (("reduce", REDUCE), ("histogram", HISTOGRAM), ("transpose", TRANSPOSE)):
        rows = compiled[name]["rows"]
        assert {r["step"] for r in rows} == {s.name for s in steps}, name
        assert all(r["registers"] > 0 for r in rows), name


def _one_record(ladder: str) -> Record:
    samples = [0.5, 0.5, 0.5]
    return Record(op="transpose", implementation="copy", shape={"rows": 64, "cols": 64},
                  dtype="fp32", mode="cold", samples_ms=samples,
                  stats=summarize(samples).to_dict(), extra={"ladder": ladder})  # fmt: skip


def test_time_all_writes_each_ladders_records_and_keeps_them_on_a_resumed_run(
    tmp_path, monkeypatch
):
    calls = []

    def fake_time(quick, progress):  # a stand-in for an engine on a GPU: no figures are claimed
        calls.append(quick)
        return [_one_record("stand-in")], ["CUB anchor absent"]

    _with(monkeypatch, time=fake_time)
    line = pmpp.time_all(tmp_path, True, lambda _: None)
    assert calls == [True] * 4 and "reduce: 1 timings" in line
    assert json.loads((tmp_path / "pmpp" / "reduce_records.json").read_text())[0]["implementation"] == "copy"
    assert pmpp.read_notes(tmp_path)["transpose"] == ["CUB anchor absent"]
    assert pmpp.time_all(tmp_path, True, lambda _: None).count("kept") == 4 and len(calls) == 4
    assert pmpp.read_notes(tmp_path)["transpose"] == ["CUB anchor absent"]  # kept, not lost


def test_the_reduce_adapter_times_only_correct_steps_beside_the_read_ceiling(monkeypatch):
    from kernelab.ladders.reduce import ladder as engine

    steps = engine.parse_steps("9-10")
    seen = {}
    monkeypatch.setattr(engine, "check_steps", lambda s, sizes, dtypes, progress: [
        {"step": "reduce:09", "ok": True}, {"step": "reduce:10", "ok": False}])  # fmt: skip

    def fake_time_ladder(good, sizes, dtypes, *, max_time_s, progress):
        seen.update(steps=[s.name for s in good], sizes=sizes, dtypes=dtypes)
        return [], [_one_record("reduce")], "CUB anchor absent"

    monkeypatch.setattr(engine, "parse_steps", lambda spec: steps)
    monkeypatch.setattr(engine, "time_ladder", fake_time_ladder)
    monkeypatch.setattr(pmpp, "read_ceiling_record", lambda quick, progress: _one_record("ceiling"))
    records, notes = pmpp.get_ladder("reduce").time(True, lambda _: None)
    assert seen == {"steps": ["reduce:09"], "sizes": pmpp.REDUCE_SIZES[True], "dtypes": ["fp32"]}
    assert [r.extra["ladder"] for r in records] == ["ceiling", "reduce"]
    assert notes == ["reduce:10 failed its check and was not timed", "CUB anchor absent"]
    # the judged size is in the lab's set: 64 MiB of fp32 and more
    assert max(pmpp.REDUCE_SIZES[True]) * 4 >= 64 * 1024**2


def test_the_read_ceiling_is_a_record_with_its_samples(monkeypatch):
    timing = SimpleNamespace(median_ms=0.25, rel_noise=0.01, samples_ms=[0.25, 0.25, 0.26],
                             mode="cold", summary=summarize([0.25, 0.25, 0.26]))  # fmt: skip
    monkeypatch.setattr("kernelab.probes.bandwidth.hbm_read",
                        lambda nbytes, max_time_s: (nbytes, timing))  # fmt: skip
    identity = SimpleNamespace(name="stand-in GPU", gpu_id=None, driver=None)
    monkeypatch.setattr("kernelab.harness.ceilings.this_gpu", lambda who: identity)
    record = pmpp.read_ceiling_record(True, lambda _: None)
    assert record.implementation == pmpp.READ_CEILING and record.op == "reduce_sum"
    assert record.shape == {"n": pmpp.READ_CEILING_BYTES[True] // 4}
    assert record.samples_ms == [0.25, 0.25, 0.26]
    assert record.extra == {"ladder": "reduce", "ceiling": "read"}


# --- the report's section -----------------------------------------------------------------------


def _text(report) -> str:
    return to_markdown(report, Path("/"))


def test_without_a_gpu_the_section_shows_compile_tables_and_one_line_per_ladder(tmp_path):
    from kernelab.lab.report import Report

    state = _state(tmp_path, on_gpu=False)
    (state.records_dir / "pmpp").mkdir()
    (state.records_dir / "pmpp" / "compile.json").write_text(json.dumps({"pmpp_compile": {
        "reduce": {"rows": [{"step": "reduce:01", "dtype": "fp32", "technique": "interleaved",
                             "registers": 12, "static_smem_bytes": 1024,
                             "spill_store_bytes": 0, "spill_load_bytes": 0}]}}}))  # fmt: skip
    report = Report("t")
    pmpp_section(report, state, load_results(None), tmp_path / "figures")
    text = _text(report)
    assert "| reduce:01 | fp32 | interleaved | 12 | 1024 | 0 |" in text
    lines = [b.text for b in report.blocks if isinstance(b, Paragraph)]
    for title in ("Sum reduction (reduce)", "Inclusive scan (scan)", "Histogram (histogram)",
                  "Matrix transpose (transpose)"):  # fmt: skip
        assert any(line.startswith(f"{title}: timing needs a GPU") for line in lines), title
    assert not any(isinstance(b, Image) for b in report.blocks)


def test_the_roofline_placement_says_memory_bound_at_an_intensity_near_zero():
    rows = pmpp.placement_rows("h200")
    assert [row[0] for row in rows] == ["reduce", "scan", "histogram", "transpose"]
    for row in rows:
        assert row[7] == "memory" and float(row[5]) <= 0.25, row  # ridge: 206 FLOP/byte
    reduce = rows[0]
    assert reduce[4] == "256.0 MiB"  # 2^26 fp32 read, one fp32 written


def test_with_records_each_ladder_gets_its_table_and_chart(tmp_path):
    """Synthetic records (test_gate.pmpp_passing): the section's table and chart come from them."""
    from kernelab.lab.report import Report

    state = _state(tmp_path, on_gpu=True)
    pmpp_passing(state.records_dir)
    results = load_results(state.records_dir)
    report = Report("t")
    pmpp_section(report, state, results, tmp_path / "figures")
    images = [b for b in report.blocks if isinstance(b, Image)]
    assert [b.path.name for b in images] == [f"pmpp_{n}.png" for n in
                                             ("reduce", "scan", "histogram", "transpose")]  # fmt: skip
    assert all(b.path.exists() and "NVIDIA H200" in b.caption for b in images)
    tables = [b for b in report.blocks if isinstance(b, Table) and b.header[0] == "case"]
    transpose = next(t for t in tables if any(r[1] == "transpose:03" for r in t.rows))
    row = next(r for r in transpose.rows if r[1] == "transpose:03")
    assert row[3:] == ["2,800", "93.3", "1.12"]  # GB/s, % of the copy, x torch.transpose
    reduce = next(t for t in tables if any(r[1] == "reduce:10" for r in t.rows))
    assert reduce.rows[0][:2] == ["any", pmpp.READ_CEILING]
    assert sum(r[1] == pmpp.READ_CEILING for r in reduce.rows) == 1  # once, not per case too
    # the histogram is judged against its own read ceiling, as the reduction is
    histogram = next(t for t in tables if any(r[1] == "histogram:03" for r in t.rows))
    assert histogram.rows[0][:2] == ["any", pmpp.READ_CEILING]
    assert {r[0] for r in histogram.rows[1:]} == {"n=2^26 bins=256 int32 uniform",
                                                  "n=2^26 bins=256 int32 skewed"}  # fmt: skip
    best = next(r for r in histogram.rows if r[0].endswith("uniform") and r[1] == "histogram:03")
    assert best[4] == "81.2"  # 2,600 GB/s of the 3,200 GB/s read ceiling
    # the gate reads the same records
    assert all(c.passed for c in pmpp_criteria(results))


@pytest.mark.gpu
def test_the_lab_stage_on_a_gpu_writes_records_the_gate_judges(tmp_path):
    pmpp.time_all(tmp_path, True, print)
    results = load_results(tmp_path)
    for criterion in pmpp_criteria(results):
        if criterion.name != PMPP["scan"]:
            assert "no records" not in criterion.evidence, criterion.evidence
            assert "cases meet it" in criterion.evidence, criterion.evidence


# --- the drill ----------------------------------------------------------------------------------


def test_bank_conflicts_follow_the_bank_rule():
    assert drill.bank_conflict_ways(lambda lane: lane) == 1  # sequential: one word per bank
    assert drill.bank_conflict_ways(lambda lane: 2 * lane) == 2
    assert drill.bank_conflict_ways(lambda lane: 32 * lane) == 32  # a column of a 32x32 tile
    assert drill.bank_conflict_ways(lambda lane: 33 * lane) == 1  # the padded 32x33 tile
    assert drill.bank_conflict_ways(lambda lane: 0) == 1  # one word for all: a broadcast


@pytest.mark.parametrize("maker", drill.PMPP_QUESTIONS, ids=lambda m: m.__name__)
def test_each_pmpp_question_accepts_its_answer_with_its_unit_and_rejects_far_ones(maker):
    for seed in range(12):
        question = maker(random.Random(seed))
        assert question.kind == "pmpp" and question.explanation
        assert question.judge(f"{question.answer:g}")
        assert question.judge(f"{question.answer:g} {question.unit}")
        assert not question.judge(f"{question.answer * 1.5:g}")
        assert f"accepted: {question.accepted_range()[0]:.4g}" in question.explanation


def test_the_pmpp_answers_come_from_the_models():
    from kernelab.roofline import costs

    reduction = next(q for seed in range(40)
                     if "2^26" in (q := drill.reduction_bytes_question(random.Random(seed))).prompt)  # fmt: skip
    assert reduction.answer == drill.figure(costs.reduce_sum(2**26, dtype="fp32").bytes / 1e6)
    assert reduction.judge("268 MB") and reduction.judge("0.268 GB")
    scans = {q.prompt.split(", ")[1].split(":")[0]: q.answer
             for q in (drill.scan_passes_question(random.Random(s)) for s in range(20))}  # fmt: skip
    assert scans == {"reduce-then-scan": 3.0, "single-pass decoupled look-back": 2.0}
    tiles = {q.prompt.split("[32][")[1].split("]")[0]: q.answer
             for q in (drill.padded_tile_question(random.Random(s)) for s in range(20))}  # fmt: skip
    assert tiles == {"32": 32.0, "33": 1.0}
    skewed = [drill.skewed_histogram_question(random.Random(s)) for s in range(20)]
    assert {"global" in q.prompt for q in skewed} == {True, False}  # both kinds are asked
    for q in skewed:
        n = 2 ** int(q.prompt.split("2^")[1].split(" ")[0])
        assert q.answer == (n if "with global atomics" in q.prompt else n // 32), q.prompt
    assert all("one address" in q.explanation for q in skewed)


def test_a_drill_round_asks_the_pmpp_and_decode_questions_too():
    kinds = [q.kind for q in drill.make_questions(10, seed=3)]
    assert kinds.count("pmpp") == 2 and kinds.count("decode") == 2


def test_a_run_without_a_gpu_never_marks_the_gpu_stage_done():
    """A lab folder first run without a GPU, then resumed on one, must still time the ladders:
    the compile-only stage has its own name."""
    from kernelab.lab.run import CPU_STAGES, GPU_STAGES

    cpu = {name for name, _ in CPU_STAGES[1:]}
    gpu = {name for name, _ in GPU_STAGES}
    assert "pmpp-compile" in cpu and "pmpp" in gpu and not cpu & gpu


def test_the_gpu_stage_compiles_then_times_into_the_runs_records(tmp_path, monkeypatch):
    from kernelab.lab import run as lab_run

    calls = []
    monkeypatch.setattr(pmpp, "compile_all", lambda where, progress: calls.append(
        ("compile", where)) or "24 compile rows over 3 ladders")  # fmt: skip
    monkeypatch.setattr(pmpp, "time_all", lambda where, quick, progress: calls.append(
        ("time", where, quick)) or "reduce: 42 timings")  # fmt: skip
    state = lab_run.LabState(out=tmp_path, quick=True, gpu_id="h200", on_gpu=True)
    line = lab_run.stage_pmpp(state, lambda _: None)
    assert line == "24 compile rows over 3 ladders; reduce: 42 timings"
    assert calls == [("compile", state.records_dir), ("time", state.records_dir, True)]
