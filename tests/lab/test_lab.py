"""The lab: the CPU path end to end, resuming, the exit-criteria gate, and the drill."""

from __future__ import annotations

import json

import pytest

from kernelab.cli import main
from kernelab.harness.records import Record, save_records
from kernelab.lab import drill, gate
from kernelab.lab.results import ResultSet, load_results
from kernelab.lab.run import run_lab


def _record(impl: str, op: str, shape: dict, dtype: str, median_ms: float = 1.0, **kw) -> Record:
    """A record whose samples give `median_ms`, or, with achieved_gbps, the time its shape's
    bytes take at that rate: the gate and the tables read the samples, not stored rates."""
    from kernelab.spec.reference import get_op

    if kw.get("achieved_gbps"):
        median_ms = get_op(op).cost(shape, dtype).bytes / kw["achieved_gbps"] / 1e6
    return Record(op=op, implementation=impl, shape=shape, dtype=dtype, mode="cold",
                  samples_ms=[median_ms], stats={"median": median_ms}, gpu="NVIDIA H200",
                  gpu_id="h200", timestamp="2026-11-29T16:00:00+00:00", **kw)  # fmt: skip


def _ladder(pct: float) -> list[Record]:
    size = {"m": 4096, "n": 4096, "k": 4096}
    return [
        _record("torch.mm", "gemm", size, "fp32", extra={"ladder": "sgemm"}),
        _record("sgemm:05", "gemm", size, "fp32", 100 / 30.0, extra={"ladder": "sgemm"}),
        _record("sgemm:11", "gemm", size, "fp32", 100 / pct, extra={"ladder": "sgemm"}),
    ]


def _softmax(tbps: float, columns=(512, 4096, 65536, 262144)) -> list[Record]:
    return [_record("triton.softmax", "softmax", {"rows": 1024, "cols": c}, "bf16",
                    achieved_gbps=tbps * 1000) for c in columns]  # fmt: skip


def _by_name(criteria):
    return {c.name: c for c in criteria}


def test_cpu_lab_quick_writes_a_report_with_every_section(tmp_path, capsys):
    out = tmp_path / "lab"
    assert main(["lab", "--quick", "--out", str(out)]) == 0
    md = (out / "report.md").read_text()
    # no GPU here and none named: the report is about the default card, said so, and every
    # part of it (rooflines, committed records) is that card's
    assert "The GPU this report is about: h200, the default" in md
    for section in ("Exit criteria", "Roofline: every built-in kernel on h200",
                    "Triton kernels checked on the CPU", "CUDA ladder: compile report",
                    "| shape |",  # the roofline table names each kernel's shape
                    # from the committed H200 records:
                    "benchmarks/results/h200", "on NVIDIA H200",
                    "Hopper bf16 GEMM ladder, cold", "the inference example"):  # fmt: skip
        assert section in md, section
    assert "/benchmarks/results" not in md  # never this checkout's absolute path
    assert "{'" not in md
    assert "needs a CUDA GPU" in md or "without a GPU" in md
    page = (out / "report.html").read_text()
    assert page.startswith("<!doctype html>") and "data:image/png;base64," in page
    assert (out / "figures" / "roofline_builtin.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    interp = json.loads((out / "records" / "interpreter.json").read_text())["interpreter_checks"]
    assert interp and all(r["ok"] for r in interp)
    # without a GPU the opinion page falls back to the committed records it cites, and says so
    capsys.readouterr()
    assert main(["lab", "--quick", "--out", str(out), "--json"]) == 0  # resumed: no re-run
    data = json.loads(capsys.readouterr().out)
    assert data["on_gpu"] is False
    opinion = next(c for c in data["gate"] if c["name"] == OPINION)
    assert opinion["judged_on"] == "committed records (benchmarks/results/h200/)"
    assert {c["judged_on"] for c in data["gate"]} == {opinion["judged_on"]}


OPINION = "an informed opinion on Triton vs CUTLASS vs raw CUDA"


def test_cpu_lab_about_a_card_without_a_bf16_rate_writes_its_report(tmp_path, capsys):
    out = tmp_path / "lab"
    assert main(["lab", "--quick", "--gpu", "m3-max", "--out", str(out)]) == 0
    md = (out / "report.md").read_text()
    assert "no dense bf16 rate for the m3-max" in md and "floor ms (m3-max datasheet)" in md


@pytest.mark.gpu
def test_gpu_lab_quick_judges_every_criterion_on_its_own_run(tmp_path, capsys):
    """The main job as a user with a GPU runs it: every criterion judged on this run's
    records, the opinion page's claims confirmed or refuted by what this run measured."""
    out = tmp_path / "lab"
    code = main(["lab", "--quick", "--out", str(out), "--json"])
    data = json.loads(capsys.readouterr().out)
    assert data["on_gpu"] is True and not data["failed"], data["failed"]
    assert {c["judged_on"] for c in data["gate"]} == {"this run"}
    opinion = next(c for c in data["gate"] if c["name"] == OPINION)
    assert "judged on this run's measurements" in opinion["evidence"]
    # the page's claims hold on a Hopper card (its records: benchmarks/results/h200, h100)
    assert opinion["status"] == "PASS", opinion["evidence"]
    assert "claims confirmed by this run's samples" in opinion["evidence"]
    assert code == 0
    for criterion in data["gate"]:  # every verdict says why, from this run
        assert criterion["evidence"], criterion


def test_an_interrupted_lab_keeps_what_it_measured(tmp_path, monkeypatch):
    from kernelab.lab import run as lab_run

    calls = []

    def boom(state, progress):
        calls.append("compile")
        raise KeyboardInterrupt

    monkeypatch.setattr(lab_run, "CPU_STAGES", [lab_run.CPU_STAGES[0], ("compile", boom)])
    with pytest.raises(KeyboardInterrupt):
        run_lab(tmp_path, quick=True, gpu="h200", fresh=False, progress=lambda _: None)
    assert "rooflines" in json.loads((tmp_path / "records" / "stages.json").read_text())

    seen = []
    monkeypatch.setattr(
        lab_run, "CPU_STAGES", [lab_run.CPU_STAGES[0], ("compile", lambda s, p: "ok")]
    )
    run_lab(tmp_path, quick=True, gpu="h200", fresh=False, progress=seen.append)
    assert any(m.startswith("rooflines: kept from the earlier run") for m in seen)
    assert json.loads((tmp_path / "records" / "stages.json").read_text())["compile"] == "ok"


def test_a_change_of_gpu_places_the_rooflines_again(tmp_path, monkeypatch):
    from kernelab.lab import run as lab_run

    monkeypatch.setattr(lab_run, "CPU_STAGES", lab_run.CPU_STAGES[:1])  # the rooflines alone
    run_lab(tmp_path, quick=True, gpu="h200", fresh=False, progress=lambda _: None)
    seen = []
    state = run_lab(tmp_path, quick=True, gpu="a100-sxm", fresh=False, progress=seen.append)
    assert "rooflines: run again (the earlier run placed them on the h200; this report is " \
           "about the a100-sxm)" in seen  # fmt: skip
    assert not any("kept from the earlier run" in m for m in seen)
    placed = json.loads((tmp_path / "records" / "rooflines.json").read_text())
    assert placed["gpu"] == "a100-sxm" and "a100-sxm" in state.done["rooflines"]
    seen.clear()  # the same card again: kept
    run_lab(tmp_path, quick=True, gpu="a100-sxm", fresh=False, progress=seen.append)
    assert any(m.startswith("rooflines: kept from the earlier run") for m in seen)


def test_a_report_about_one_card_never_shows_anothers_measured_ceilings(tmp_path):
    from kernelab.lab import decode
    from kernelab.lab.compose import ceilings_section
    from kernelab.lab.paths import committed_results_dir
    from kernelab.lab.report import Report, to_markdown

    folder = committed_results_dir("h200")
    if folder is None:
        pytest.skip("needs the committed H200 records")
    results = load_results(folder)
    texts = {}
    for gpu in ("a100-sxm", "h200"):
        report = Report("r")
        ceilings_section(report, results, gpu)
        decode.section(report, gpu, False, results, tmp_path / gpu)
        texts[gpu] = to_markdown(report, tmp_path)
    other = texts["a100-sxm"]
    assert "None measured on the a100-sxm: the ceilings in these records are the h200's" in other
    assert "| copy |" not in other and "989.40" not in other  # no H200 datasheet either
    assert "| bf16 | 15.01 | 7.36 | - |" in other  # no floor from the H200's copy
    own = texts["h200"]
    assert "| copy | 4.25 | 4.80 |" in own and "| bf16 | 15.01 | 3.13 | 3.53 |" in own


def test_gate_judges_the_phase_bar_and_ours_apart(tmp_path):
    """75 % of cuBLAS meets the phase's bar, not ours; tests/lab/test_gate.py flips every
    criterion on a folder of records."""
    docs = tmp_path / "docs"
    docs.mkdir()
    good = _by_name(
        gate.evaluate_gate(ResultSet(folder=None, records=_ladder(93.0) + _softmax(4.1)), docs)
    )
    assert good["SGEMM at >= 90 % of cuBLAS fp32 (4096^3)"].passed
    assert good["softmax >= 4.0 TB/s at every row length"].passed
    assert good["fused softmax in Triton, autotuned and benchmarked"].passed

    weak = ResultSet(folder=None, records=_ladder(75.0) + _softmax(3.2, columns=(1024,)))
    (docs / "triton-vs-cutlass-vs-cuda.md").write_text("TODO (H200): fill")
    results = _by_name(gate.evaluate_gate(weak, docs))
    assert results["SGEMM at 70-80 % of cuBLAS fp32"].passed  # the phase's bar
    assert not results["SGEMM at >= 90 % of cuBLAS fp32 (4096^3)"].passed  # ours
    assert "sgemm:11" in results["SGEMM at >= 90 % of cuBLAS fp32 (4096^3)"].evidence
    assert not results["fused softmax in Triton, autotuned and benchmarked"].passed  # 1 shape
    assert not results["softmax >= 4.0 TB/s at every row length"].passed
    assert not results["Nsight Compute metrics pulled and the top bottleneck named"].passed
    assert not results["an informed opinion on Triton vs CUTLASS vs raw CUDA"].passed

    # nothing measured: no criterion can pass, the roofline, the numbers and the records'
    # own (no file read vouches for nothing) included
    empty = _by_name(gate.evaluate_gate(ResultSet(folder=None), None))
    assert not [name for name, c in empty.items() if c.passed]
    records = empty["every record file read, every stored figure agrees with its samples"]
    assert records.evidence.startswith("no record file read")


def test_exit_check_reads_a_results_folder(tmp_path, capsys):
    save_records(_ladder(60.0), tmp_path / "ladder.json")
    assert main(["exit-check", "--results", str(tmp_path), "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    statuses = {c["name"]: c["status"] for c in data["gate"]}
    assert statuses["SGEMM at 70-80 % of cuBLAS fp32"] == "FAIL"
    assert data["phase_passed"] is False
    assert load_results(tmp_path).machine().startswith("NVIDIA H200")


def test_exit_check_without_a_folder_is_one_line(tmp_path, capsys):
    assert main(["exit-check", "--results", str(tmp_path / "missing")]) == 2
    assert capsys.readouterr().err.count("\n") == 1


def _exit_2_in_one_line(capsys, argv) -> str:
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.startswith("kernelab: ")
    assert captured.err.count("\n") == 1
    return captured.err


@pytest.mark.parametrize("json_flag", [[], ["--json"]])
def test_exit_check_of_a_folder_without_record_files_is_exit_2(tmp_path, capsys, json_flag):
    from pathlib import Path

    err = _exit_2_in_one_line(capsys, ["exit-check", "--results", str(tmp_path), *json_flag])
    assert "holds no record files" in err
    ncu = Path(__file__).resolve().parents[1] / "fixtures" / "ncu"  # reports, no records
    assert "holds no record files" in _exit_2_in_one_line(
        capsys, ["exit-check", "--results", str(ncu), *json_flag]
    )


def test_exit_check_of_a_file_says_it_is_a_file(tmp_path, capsys):
    record_file = save_records(_ladder(60.0), tmp_path / "ladder.json")
    err = _exit_2_in_one_line(capsys, ["exit-check", "--results", str(record_file)])
    assert "is a file, not a folder" in err and "no such folder" not in err


def test_drill_scores_scripted_answers(tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELAB_CACHE", str(tmp_path))
    questions = drill.make_questions(6, seed=7)
    right = drill.run_drill(questions, lambda q: str(q.answer))
    assert all(o.correct for o in right)
    wrong = drill.run_drill(questions, lambda q: "compute" if q.answer == "memory" else "memory"
                            if isinstance(q.answer, str) else str(q.answer * 3))  # fmt: skip
    assert not any(o.correct for o in wrong)
    ticks = iter(range(0, 1000, 31))  # every answer takes 31 s: too slow
    slow = drill.run_drill(questions, lambda q: str(q.answer), clock=lambda: next(ticks))
    assert all(o.too_slow and not o.correct for o in slow)


def test_drill_agrees_with_the_catalog_and_cost_models():
    from kernelab.hardware.catalog import get_gpu

    cards = {q.prompt: q.answer for q in drill.flashcards()}
    assert cards["H100 SXM SM count?"] == 132
    assert cards["H100 SXM bf16 ridge point in FLOP/byte?"] == round(
        get_gpu("h100-sxm").ridge("bf16")
    )
    for q in drill.make_questions(30, seed=1):
        if q.kind == "bound":
            assert q.answer in ("memory", "compute")
        else:
            assert q.answer > 0


def test_drill_command_scores_a_scripted_run_without_counting_it(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("KERNELAB_CACHE", str(tmp_path))
    answers = ";".join(str(q.answer) for q in drill.make_questions(3, seed=11))
    assert main(["drill", "--rounds", "3", "--seed", "11", "--answers", answers, "--json"]) == 0
    first = json.loads(capsys.readouterr().out)
    assert first["correct"] == 3
    assert main(["drill", "--rounds", "3", "--seed", "11", "--answers", "x;y;z", "--json"]) == 0
    second = json.loads(capsys.readouterr().out)
    # Answers from a script (no terminal) are scored but never join the all-time tally.
    assert second["correct"] == 0
    assert second["all_time"] == {"asked": 0, "correct": 0, "counted": False}
    assert not drill.score_path().exists()


def test_kernel_table_compares_inside_one_run_and_shows_the_latest(tmp_path):
    from dataclasses import replace

    from kernelab.lab.compose import kernels_section
    from kernelab.lab.report import Report, Table

    case = {"rows": 4096, "cols": 4096}
    old = [_record("triton.softmax", "softmax", case, "fp32", achieved_gbps=3000.0),
           _record("torch.softmax", "softmax", case, "fp32", achieved_gbps=2000.0)]  # fmt: skip
    new = [
        replace(_record(impl, "softmax", case, "fp32", achieved_gbps=g),
                timestamp="2026-11-29T18:00:00+00:00")
        for impl, g in (("triton.softmax", 4000.0), ("eager.softmax", 2500.0))
    ]  # fmt: skip
    save_records(old, tmp_path / "a_old.json")
    save_records(new, tmp_path / "b_new.json")
    report = Report("t")
    kernels_section(report, load_results(tmp_path), tmp_path)
    (table,) = [b for b in report.blocks if isinstance(b, Table)]
    (row,) = table.rows
    assert row[3] == "4.00 TB/s"
    # The baseline is the new run's eager, never the old run's torch.softmax.
    assert row[5] == "eager.softmax: 2.50 TB/s"


def test_hgemm_gate_needs_one_step_at_target_against_the_faster_cublas():
    def row(impl, size, ms, mode="cold"):
        return {"impl": impl, "size": size, "mode": mode, "median_ms": ms, "tflops": 1.0}

    def gate_on(rows):
        results = ResultSet(folder=None)
        results.hgemm_summary = {"timing": rows}
        results.hgemm_records = [  # the samples behind each timing row
            _record(r["impl"], "gemm", {"m": r["size"], "n": r["size"], "k": r["size"]}, "bf16",
                    r["median_ms"]) for r in rows]  # fmt: skip
        for record, row in zip(results.hgemm_records, rows, strict=True):
            record.mode = row["mode"]
        gate.derive_all(results)
        return gate.hgemm_criterion(results)

    cublas = [row("torch.mm", s, 1.0) for s in (2048, 4096, 8192)]
    good = [row("hgemm:10", 2048, 1.05), row("hgemm:10", 4096, 0.99), row("hgemm:10", 8192, 0.98)]
    criterion = gate_on(cublas + good)
    assert criterion.passed and "hgemm:10" in criterion.evidence
    # cuBLAS timed again, faster, after the steps: the step no longer beats it at 4096.
    assert not gate_on(cublas + good + [row("torch.mm (again)", 4096, 0.95)]).passed
    # Two steps that each miss one size do not add up to one that meets all three.
    split = [row("hgemm:12", 2048, 1.05), row("hgemm:12", 4096, 0.99), row("hgemm:12", 8192, 1.1),
             row("hgemm:14", 2048, 1.05), row("hgemm:14", 4096, 1.02), row("hgemm:14", 8192, 0.9)]  # fmt: skip
    assert not gate_on(cublas + split).passed
    assert not gate_on(cublas + [row("hgemm:10", 4096, 0.5, mode="graph")]).passed
    assert not gate.hgemm_criterion(ResultSet(folder=None)).passed


def test_hgemm_gate_never_judges_interleaved_rounds_which_keep_no_samples():
    def rounds(impl, size, median):
        return {"impl": impl, "size": size, "mode": "cold", "pct_median": median}

    results = ResultSet(folder=None)
    results.hgemm_summary = {"rounds": [rounds("hgemm:10", s, 120.0) for s in (2048, 4096, 8192)]}
    criterion = gate.hgemm_criterion(results)
    assert not criterion.passed and "interleaved rounds keep no samples" in criterion.evidence


def _paired(impl, size, median, ci=(0.0, 0.0)):
    """A paired row whose pairs (cuBLAS time, step time) give `median` % as their median."""
    reference = [1.0, 1.01, 0.99]
    return {"impl": impl, "size": size, "mode": "cold", "pairs": 400, "pct_median": median,
            "pct_ci95": list(ci), "pct_p20": median - 1, "pct_p80": median + 1,
            "pairs_ahead": 200, "reference_ms": reference,
            "candidate_ms": [r * 100 / median for r in reference]}  # fmt: skip


def _judge_hgemm(results: ResultSet):
    """The hgemm criterion on a hand-built summary, its figures derived from the pairs anew."""
    results.derived = False
    gate.derive_all(results)
    return gate.hgemm_criterion(results)


def test_hgemm_gate_prefers_paired_calls_over_rounds():
    def rounds(impl, size, median):
        return {"impl": impl, "size": size, "mode": "cold", "pct_median": median}

    results = ResultSet(folder=None)
    results.hgemm_summary = {
        # the rounds would pass; the pairs, the finer measure, say 4096^3 is short
        "rounds": [rounds("hgemm:17", 2048, 95.0), rounds("hgemm:17", 4096, 101.4),
                   rounds("hgemm:17", 8192, 104.7)],
        "paired": [_paired("hgemm:17", 2048, 94.6), _paired("hgemm:17", 4096, 99.9),
                   _paired("hgemm:17", 8192, 103.1)],
    }  # fmt: skip
    criterion = _judge_hgemm(results)
    assert not criterion.passed and "alternating pairs" in criterion.evidence
    assert "4096^3 99.9 %" in criterion.evidence
    # hot pairs are reported, not judged
    results.hgemm_summary["paired"].append({**_paired("hgemm:17", 4096, 101.0), "mode": "hot"})
    assert not _judge_hgemm(results).passed
    results.hgemm_summary["paired"][1] = _paired("hgemm:17", 4096, 100.2)
    assert _judge_hgemm(results).passed


def test_hgemm_section_shows_the_paired_table():
    from kernelab.lab.compose import hgemm_section
    from kernelab.lab.report import Report, Table

    results = ResultSet(folder=None)
    results.hgemm_summary = {"steps": ["hgemm:17"],
                             "paired": [_paired("hgemm:17", 4096, 100.04, (99.96, 100.11))]}  # fmt: skip
    report = Report("t")
    hgemm_section(report, results)
    (paired,) = [b for b in report.blocks if isinstance(b, Table)]
    assert paired.rows == [["hgemm:17", "cold", "4096^3", "100.0", "100.0 - 100.1",
                            "99.0 - 101.0", "200 / 400"]]  # fmt: skip


def test_softmax_gate_judges_each_row_length_by_its_latest_run():
    from dataclasses import replace

    case = {"rows": 2048, "cols": 262144}

    def run(tbps, when):
        record = _record("triton.softmax", "softmax", case, "bf16", achieved_gbps=tbps * 1000)
        return replace(record, timestamp=when)

    def verdict(records):
        results = ResultSet(folder=None, records=records)
        gate.derive_all(results)
        return _by_name(gate.softmax_criteria(results))["softmax >= 4.0 TB/s at every row length"]

    old, new = run(2.59, "2026-11-29T16:00:00+00:00"), run(4.1, "2026-11-29T19:56:53+00:00")
    fast = verdict([old, new])
    # the 2.59 TB/s of the older run no longer counts once the row length is re-measured
    assert fast.passed and "1 measured shapes" in fast.evidence
    slow = verdict([run(3.11, "2026-11-29T19:56:53+00:00"), run(2.59, "2026-11-29T16:00:00+00:00")])
    assert not slow.passed and "3.11 TB/s" in slow.evidence


def test_hgemm_tables_mark_noisy_timings_and_show_the_interleaved_rounds():
    from kernelab.lab.compose import hgemm_section
    from kernelab.lab.report import Paragraph, Report, Table

    def row(impl, ms, noise):
        return {"impl": impl, "size": 2048, "mode": "cold", "median_ms": ms, "tflops": 600 / ms,
                "pct_of_cublas": 100 / ms, "rel_noise": noise}  # fmt: skip

    results = ResultSet(folder=None)
    results.hgemm_summary = {
        "steps": ["hgemm:10"],
        "timing": [row("torch.mm", 1.0, 0.02), row("hgemm:10", 10.0, 0.27)],
        "rounds": [{"impl": "hgemm:10", "size": 2048, "mode": "cold", "rounds": 7,
                    "pct_median": 93.6, "pct_min": 93.4, "pct_max": 95.9, "rounds_ahead": 0}],
    }  # fmt: skip
    report = Report("t")
    hgemm_section(report, results)
    timing, rounds = [b for b in report.blocks if isinstance(b, Table)]
    assert timing.rows[0][1] == "600 (100 %)" and timing.rows[1][1] == "60 (10 %) †"
    assert any(isinstance(b, Paragraph) and b.text.startswith("†") for b in report.blocks)
    assert rounds.rows == [["hgemm:10", "2048^3", "93.6", "93.4 - 95.9", "0 / 7"]]


def test_hgemm_plan_runs_only_on_hopper_with_nvcc():
    from kernelab.lab.run import hgemm_plan

    assert "sm_100" in hgemm_plan((10, 0), "/usr/bin/nvcc", quick=True)["skip"]
    assert "sm_80" in hgemm_plan((8, 0), "/usr/bin/nvcc", quick=False)["skip"]
    assert "nvcc" in hgemm_plan((9, 0), None, quick=True)["skip"]
    quick, full = hgemm_plan((9, 0), "nvcc", True), hgemm_plan((9, 0), "nvcc", False)
    assert quick["steps"] == "19" and quick["sizes"] == [2048, 4096, 8192]
    assert full["steps"].split(",")[-1] == "19" and full["pairs"] > quick["pairs"]


def test_hgemm_stage_writes_what_the_gate_reads(tmp_path, monkeypatch):
    """The stage's wiring with stand-ins for the GPU: it checks, pairs every correct step at
    every size, writes hgemm/summary.json, and the gate judges that file's cold pairs."""
    import torch

    from kernelab.lab import run as lab_run
    from kernelab.ladders.hgemm import ladder
    from kernelab.runtime.cuda import build

    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (9, 0))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "stand-in H200")
    monkeypatch.setattr(build, "find_nvcc", lambda: "/stand-in/nvcc")
    monkeypatch.setattr(ladder, "check_steps", lambda steps, progress: {
        s.name: [{"shape": {"m": 1, "n": 1, "k": 1}, "ok": True}] for s in steps})  # fmt: skip
    measured = {2048: 95.3, 4096: 100.3, 8192: 103.4}
    monkeypatch.setattr(ladder, "time_paired", lambda steps, size, pairs, progress: [
        _paired(s.name, size, measured[size]) for s in steps])  # fmt: skip
    state = lab_run.LabState(out=tmp_path, quick=True, gpu_id="h200", on_gpu=True)
    line = lab_run.stage_hgemm(state, lambda _: None)
    assert line == "hgemm:19 at 95.3 / 100.3 / 103.4 % of cuBLAS (2048/4096/8192^3)"
    summary = json.loads((tmp_path / "records" / "hgemm" / "summary.json").read_text())
    assert summary["steps"] == ["hgemm:19"] and len(summary["paired"]) == 3
    criterion = gate.hgemm_criterion(load_results(tmp_path / "records"))
    assert criterion.passed and "hgemm:19" in criterion.evidence
    # off Hopper the stage says why and writes nothing
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (8, 0))
    other = lab_run.LabState(out=tmp_path / "a100", quick=True, gpu_id="a100", on_gpu=True)
    assert lab_run.stage_hgemm(other, lambda _: None).startswith("skipped: the Hopper ladder")
    assert not (tmp_path / "a100" / "records" / "hgemm").exists()


def test_a_failing_stage_is_reported_the_others_run_and_the_next_run_retries_it(
    tmp_path, monkeypatch
):
    from kernelab.lab import run as lab_run

    def fault(state, progress):
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    ran = []
    monkeypatch.setattr(lab_run, "CPU_STAGES", [
        lab_run.CPU_STAGES[0], ("compile", fault), ("interpreter", lambda s, p: ran.append(1) or "ok")])  # fmt: skip
    seen = []
    state = run_lab(tmp_path, quick=True, gpu="h200", fresh=False, progress=seen.append)
    assert "illegal memory access" in state.failed["compile"] and ran == [1]
    assert any("Traceback" in m for m in seen) and "compile: failed" in "\n".join(seen)
    saved = json.loads((tmp_path / "records" / "stages.json").read_text())
    assert "compile" not in saved and saved["interpreter"] == "ok"
    # the next run keeps what worked and tries the failed stage again
    monkeypatch.setattr(lab_run, "CPU_STAGES", [
        lab_run.CPU_STAGES[0], ("compile", lambda s, p: "ok now"), ("interpreter", fault)])  # fmt: skip
    again = run_lab(tmp_path, quick=True, gpu="h200", fresh=False, progress=lambda _: None)
    assert again.done["compile"] == "ok now" and not again.failed


def test_every_stage_line_is_printed_and_other_progress_only_spins():
    from kernelab.commands.lab import is_stage_line
    from kernelab.lab.run import CPU_STAGES, GPU_STAGES

    for name, _ in CPU_STAGES + GPU_STAGES:
        assert is_stage_line(f"{name}: started"), name
    # the stage names come from the stage lists, so a stage's own lines are never silent
    assert is_stage_line("hgemm: hgemm:18 at 95.5 / 100.4 / 103.4 % of cuBLAS")
    # what the stages report on the way (ladder steps, checks) only updates the spinner
    assert not is_stage_line("checking hgemm:18 at 127x257x65")
    assert not is_stage_line("pairing hgemm:18 with cuBLAS at 4096^3, cold")
    assert not is_stage_line("hgemm:18: correct at every shape")
