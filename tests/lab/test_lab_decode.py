"""The decode kernels in the lab (kernelab.lab.decode): the plan the stage times, the weight
bytes of an 8B model, the targets judged from the suite's newest records, and the report's
section with and without them."""

from __future__ import annotations

import json

import pytest
from test_gate import DECODE, _gate, decode_passing, folder  # noqa: F401  (the fixture)

from kernelab.lab import decode
from kernelab.lab.report import Report, to_markdown
from kernelab.lab.results import load_results


def _edit_records(path, change):
    records = json.loads(path.read_text())
    for r in records:
        change(r)
    path.write_text(json.dumps(records))


def _scale(path, factor, implementation, **shape):
    def change(r):
        if r["implementation"] == implementation and all(
            r["shape"].get(k) == v for k, v in shape.items()
        ):
            r["samples_ms"] = [s * factor for s in r["samples_ms"]]

    _edit_records(path, change)


def test_the_plan_names_registered_kernels_at_shapes_their_ops_accept():
    from kernelab.spec import registry
    from kernelab.spec.reference import get_op

    for quick in (True, False):
        cases = decode.plan(quick)
        assert {c.role for c in cases} == {"gemv", "quant", "fused"}
        for case in cases:
            for name in (case.implementation, *case.baselines):
                assert registry.get(name).op == case.op, name
            get_op(case.op).validate(case.shape)
            get_op(case.op).check_dtype(case.dtype)
        assert {c.shape["m"] for c in cases if c.role == "gemv"} >= {1, 16}


def test_an_8b_model_streams_its_projection_and_head_weights_per_token():
    params = 32 * sum(n * k for n, k in decode.LLAMA3_8B_LAYER) + 128256 * 4096
    assert params == 7_504_658_432
    assert decode.model_bytes("bf16") == pytest.approx(2 * params, rel=1e-3)
    # int8: a byte per weight and an fp32 scale per output row (and x and y: a few MB in all)
    assert decode.model_bytes("int8") == pytest.approx(params, rel=2e-3)
    # int4: half a byte per weight and an fp16 scale per 128 of them
    assert decode.model_bytes("int4") == pytest.approx(params * (0.5 + 2 / 128), rel=2e-3)
    rows = decode.model_rows("h100-sxm", None)
    assert [r[0] for r in rows] == ["bf16", "int8", "int4"] and rows[2][3] == "-"
    assert float(rows[0][2]) == pytest.approx(2 * params / 3.35e12 * 1e3, rel=1e-2)


def test_without_records_every_target_fails_saying_so():
    verdicts = decode.targets([], None)
    assert [name for name, _, _ in verdicts] == [name for name, _ in decode.TARGETS]
    for _, met, evidence in verdicts:
        assert not met and evidence.startswith("not measured (") and "on this card" in evidence


def test_the_passing_folder_meets_each_target_from_its_samples(folder):  # noqa: F811
    verdicts = _gate(folder)
    for kind in ("gemv", "quant", "fused"):
        assert verdicts[DECODE[kind]].passed, verdicts[DECODE[kind]].evidence
    gemv = verdicts[DECODE["gemv"]].evidence
    assert "95 % of copy" in gemv and "the run's own copy" in gemv
    assert "3.50x the bf16 GEMV" in verdicts[DECODE["quant"]].evidence
    fused = verdicts[DECODE["fused"]].evidence
    assert "stated, not judged" in fused and "rows=8192" in fused


def test_a_gemv_slower_than_cublas_at_m16_fails(folder):  # noqa: F811
    _scale(folder / "decode_records.json", 1.5, "triton.gemv", m=16)
    criterion = _gate(folder)[DECODE["gemv"]]
    assert not criterion.passed and "m=16 4096x4096" in criterion.evidence
    assert "0.84x cuBLAS" in criterion.evidence


def test_slow_quantized_gemvs_and_fused_ops_fail(folder):  # noqa: F811
    _scale(folder / "decode_records.json", 1.5, "triton.quant_gemv.int4")
    _scale(folder / "decode_records.json", 1.2, "triton.swiglu", rows=8192)
    verdicts = _gate(folder)
    assert not verdicts[DECODE["quant"]].passed
    assert "2.33x the bf16 GEMV (needs 3x)" in verdicts[DECODE["quant"]].evidence
    assert not verdicts[DECODE["fused"]].passed
    assert "triton.swiglu rows=8192 cols=14336: 77 % of copy" in verdicts[DECODE["fused"]].evidence


def test_without_its_own_copy_the_suite_uses_the_measured_ceilings(folder):  # noqa: F811
    path = folder / "decode_records.json"
    records = [r for r in json.loads(path.read_text()) if r["implementation"] != "copy"]
    path.write_text(json.dumps(records))
    assert "no copy ceiling" in _gate(folder)[DECODE["gemv"]].evidence
    (folder / "ceilings.json").write_text(json.dumps(
        {"gpu": "NVIDIA H200", "ceilings": {"copy": {"rate": 4.0e12}}}))  # fmt: skip
    evidence = _gate(folder)[DECODE["gemv"]].evidence
    assert "the measured ceilings' copy" in evidence and "95 % of copy" in evidence


def test_the_section_shows_the_walk_and_says_what_needs_a_gpu(tmp_path, folder):  # noqa: F811
    empty = load_results(tmp_path / "nothing")
    report = Report("r")
    decode.section(report, "h100-sxm", False, empty, tmp_path / "figures")
    text = to_markdown(report, tmp_path)
    assert "memory-bound" not in text.split("Decode")[0]
    assert "timing needs a GPU" in text and "Llama-3-8B" in text
    assert (tmp_path / "figures" / "decode_walk.png").stat().st_size > 10_000
    for m in ("| 1 |", "| 16 |", "| 64 |"):
        assert m in text
    measured = Report("r")
    decode.section(measured, "h200", True, load_results(folder), tmp_path / "figures")
    text = to_markdown(measured, tmp_path)
    assert "triton.quant_gemv.int4" in text and "| 95 |" in text  # % of the run's copy


@pytest.mark.parametrize("gpu", ["m3-max", "m2-max", "rtx-5090"])
def test_a_card_without_a_bf16_rate_skips_the_walk_in_one_line(tmp_path, gpu):
    report = Report("r")
    decode.section(report, gpu, False, load_results(tmp_path / "nothing"), tmp_path / "figures")
    text = to_markdown(report, tmp_path)
    assert f"No batch walk here: the catalog lists no dense bf16 rate for the {gpu}" in text
    assert "| m* |" not in text and not (tmp_path / "figures" / "decode_walk.png").exists()
    assert f"floor ms ({gpu} datasheet)" in text  # the weight bytes need only the bandwidth


def test_the_walk_refuses_a_dtype_the_card_has_no_rate_for():
    from kernelab.errors import KernelabError
    from kernelab.ops.gemv.roofline_walk import walk

    with pytest.raises(KernelabError, match="no dense bf16 rate for the rtx-5090"):
        walk(4096, 4096, gpu="rtx-5090", dtype="bf16")


def test_the_walk_turns_compute_bound_at_its_crossover():
    rows = decode.walk_rows("h100-sxm")
    square = [r for r in rows if r[0] == "4096x4096"]
    crossing = square[0][6]
    assert isinstance(crossing, int) and crossing > 64  # never within the decode batches
    assert all(r[4] == "memory" for r in square)


@pytest.mark.gpu
def test_the_stage_checks_then_times_each_case_beside_its_baseline():
    from kernelab.harness.ceilings import this_gpu

    cases = [c for c in decode.plan(True) if c.shape.get("m") == 1 or c.shape.get("rows") == 1]
    records, failed = decode.measure(this_gpu("test"), cases, lambda line: None, max_time_s=0.1)
    assert not failed, failed
    assert records[0].implementation == "copy" and records[0].achieved_gbps > 500
    timed = {(r.implementation, tuple(sorted(r.shape.items()))) for r in records}
    for case in cases:
        for name in (case.implementation, *case.baselines):
            assert (name, tuple(sorted(case.shape.items()))) in timed
    assert all(r.check.get("ok") for r in records[1:])
    assert all(r.extra["suite"] == decode.SUITE for r in records)


def test_the_drill_asks_bytes_per_token_and_the_gemv_intensity():
    import random

    from kernelab.lab import drill
    from kernelab.roofline.costs import gemv_batched

    for seed in range(12):
        question = drill.decode_bytes_question(random.Random(seed))
        weight = next(w for w in ("bf16", "int8", "int4") if f"with {w} weights" in question.prompt)
        assert question.answer == pytest.approx(decode.model_bytes(weight) / 1e9, rel=0.01)
        assert question.judge(f"{question.answer} GB") and not question.judge("1 GB")
        bound = drill.decode_bound_question(random.Random(seed))
        m = int(bound.prompt.split("m = ")[1].split(" ")[0])
        cost = gemv_batched(m, 4096, 4096, dtype="bf16")
        assert bound.answer == pytest.approx(cost.flops / cost.bytes, rel=0.01)
        assert not bound.judge(str(bound.answer * 3))
