"""The decode step and top-p sampling in the lab (kernelab.lab.decode): their targets judged
from the samples of the newest records, the waterfall and the sampling table in the report,
the stage's measuring code run on the CPU with stand-in timers, and records without samples
(what benchmarks/decode_step.py and benchmarks/sampling.py keep) shown but never judged."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from test_gate import (  # noqa: F401  (the fixture)
    SAMPLING_FLASHINFER,
    SAMPLING_TORCH,
    STEP,
    _gate,
    folder,
)

from kernelab.harness.records import save_records
from kernelab.lab import decode, decode_step
from kernelab.lab.report import Report, to_markdown
from kernelab.lab.results import load_results


def _edit(path, keep=lambda r: True, change=lambda r: None):
    records = [r for r in json.loads(path.read_text()) if keep(r)]
    for r in records:
        change(r)
    path.write_text(json.dumps(records))


def _scale(path, factor, implementation, **shape):
    def change(r):
        if r["implementation"] == implementation and all(
            r["shape"].get(k) == v for k, v in shape.items()
        ):
            r["samples_ms"] = [s * factor for s in r["samples_ms"]]

    _edit(path, change=change)


def _section(results, tmp_path, on_gpu=True) -> str:
    report = Report("r")
    decode.section(report, "h200", on_gpu, results, tmp_path / "figures")
    return to_markdown(report, tmp_path)


# --- the decode step ---------------------------------------------------------------------------


def test_the_step_passes_when_a_graphed_kernelab_block_beats_torch_compile(folder):  # noqa: F811
    criterion = _gate(folder)[STEP]
    assert criterion.passed, criterion.evidence
    assert "KV 1024: kernelab-graphed 150.0 us per token against torch.compile 160.0 us" in (
        criterion.evidence
    )
    assert "KV 8192" in criterion.evidence and "decode_step_records.json" in criterion.evidence


def test_the_faster_of_the_two_attentions_speaks(folder):  # noqa: F811
    path = folder / "decode_step_records.json"
    _scale(path, 1.2, "kernelab-graphed")  # 180 us: slower than torch.compile's 160
    criterion = _gate(folder)[STEP]
    assert criterion.passed and "kernelab-splitkv-graphed 155.0 us" in criterion.evidence
    _scale(path, 1.1, "kernelab-splitkv-graphed", length=8192)  # 187.55 against 176
    criterion = _gate(folder)[STEP]
    assert not criterion.passed
    assert ("KV 8192: kernelab-splitkv-graphed 187.6 us per token against torch.compile "
            "176.0 us (1.07x its time)") in criterion.evidence  # fmt: skip


def test_a_length_without_torch_compile_is_not_measured_not_passed(folder):  # noqa: F811
    _edit(folder / "decode_step_records.json",
          keep=lambda r: not (r["implementation"] == "compiled" and r["shape"]["length"] == 8192))  # fmt: skip
    criterion = _gate(folder)[STEP]
    assert not criterion.passed
    assert "KV 8192: not measured (torch.compile not timed at batch 1)" in criterion.evidence


def test_records_without_samples_are_shown_never_judged(tmp_path):
    """A benchmarks/decode_step.py document under decode/: medians and no samples."""
    out = tmp_path / "records"
    rows = []
    for path, us in (("eager", 900.0), ("compiled", 160.0), ("kernelab-graphed", 150.0)):
        for timer in ("triton.testing.do_bench median",
                      "kernelab.harness.timing.benchmark cold median"):  # fmt: skip
            rows.append({"op": "decode_step", "implementation": path,
                         "shape": {"batch": 1, "length": 1024, "config": "llama3-8b"},
                         "dtype": "bf16", "median_ms": us / 1e3, "gpu": "NVIDIA H200",
                         "timer": timer, "check": True})  # fmt: skip
    (out / "decode").mkdir(parents=True)
    (out / "decode" / "decode_step_run.json").write_text(json.dumps(
        {"gpu": "NVIDIA H200", "rows": [], "records": rows}))  # fmt: skip
    results = load_results(out)
    met, evidence = decode_step.step_target(results.records)
    assert not met and evidence.startswith("not measured (")
    assert "not judged, no samples: 3 decode-step timings in decode/decode_step_run.json" in evidence
    text = _section(results, tmp_path)
    assert "stored medians: the records keep no samples, so they are shown, not judged" in text
    assert "| 1 | 1024 | kernelab graphed | 150.0 |" in text


def test_the_waterfall_shows_each_path_in_order_against_the_floor(folder, tmp_path):  # noqa: F811
    from kernelab.ops.decode_step.config import LLAMA3_8B, step_cost

    text = _section(load_results(folder), tmp_path)
    assert (tmp_path / "figures" / "decode_step_waterfall.png").stat().st_size > 10_000
    part = text.split("Decode step: where the per-token time goes")[1].split("Sampling")[0]
    order = [part.index(words) for words in ("| torch eager |", "| torch.compile (reduce-overhead) |",
                                              "| eager in a CUDA graph |", "| kernelab graphed |")]  # fmt: skip
    assert order == sorted(order)
    floor = step_cost(LLAMA3_8B, 1, 1024, "bf16").bytes / 4000e9 * 1e6  # the fixture's copy
    assert f"| 1 | 1024 | kernelab graphed | 150.0 | 50.0 | 157.5 | {floor:,.1f} |" in part
    assert "copy ceiling (4,000 GB/s, the run's own copy)" in part


def test_without_records_the_step_and_sampling_are_not_measured(tmp_path):
    empty = load_results(tmp_path / "nothing")
    for kind, judged in (("step", decode_step.step_target), ("torch", decode_step.sampling_torch_target),
                         ("flashinfer", decode_step.sampling_flashinfer_target)):  # fmt: skip
        met, evidence = judged(empty.records)
        assert not met and evidence.startswith("not measured ("), kind
    text = _section(empty, tmp_path, on_gpu=False)
    assert text.count("Not measured (timing needs a GPU") == 2
    assert not (tmp_path / "figures" / "decode_step_waterfall.png").exists()


# --- top-p sampling ----------------------------------------------------------------------------


def test_sampling_passes_both_targets_from_the_samples(folder):  # noqa: F811
    verdicts = _gate(folder)
    torch_row, flashinfer_row = verdicts[SAMPLING_TORCH], verdicts[SAMPLING_FLASHINFER]
    assert torch_row.passed and flashinfer_row.passed
    assert "3 of 3 batches meet it (1, 16, 64)" in torch_row.evidence
    assert "batch 1: 10.00x torch" in torch_row.evidence
    assert "0.89x FlashInfer's time" in flashinfer_row.evidence
    assert "its probs-only kernel" in flashinfer_row.evidence


def test_a_batch_slower_than_3x_torch_fails_naming_it(folder):  # noqa: F811
    _scale(folder / "sampling_records.json", 4.0, "kernelab.sample", batch=16)
    criterion = _gate(folder)[SAMPLING_TORCH]
    assert not criterion.passed
    assert "2 of 3 batches meet it" in criterion.evidence
    assert "batch 16: 2.50x torch" in criterion.evidence


def test_the_ends_of_batch_1_to_64_must_be_measured(folder):  # noqa: F811
    _edit(folder / "sampling_records.json", keep=lambda r: r["shape"]["batch"] != 64)
    verdicts = _gate(folder)
    for name in (SAMPLING_TORCH, SAMPLING_FLASHINFER):
        assert not verdicts[name].passed
        assert "not measured at batch 64 (the target spans batch 1-64)" in verdicts[name].evidence


def test_flashinfer_slower_or_absent(folder):  # noqa: F811
    path = folder / "sampling_records.json"
    _scale(path, 1.5, "kernelab.sample", batch=1)  # 60.9 us against FlashInfer's 45.7
    criterion = _gate(folder)[SAMPLING_FLASHINFER]
    assert not criterion.passed and "batch 1: 1.33x FlashInfer's time" in criterion.evidence
    line = "flashinfer not importable here (ModuleNotFoundError: No module named 'flashinfer')"

    def absent(r):
        r["extra"]["flashinfer"] = line

    _edit(path, keep=lambda r: not r["implementation"].startswith("flashinfer."), change=absent)
    verdicts = _gate(folder)
    assert not verdicts[SAMPLING_FLASHINFER].passed
    assert verdicts[SAMPLING_FLASHINFER].evidence.startswith(f"not measured ({line}; ")
    assert verdicts[SAMPLING_TORCH].passed  # torch's bar does not need FlashInfer


def test_the_sampling_table_lists_each_sampler_per_batch(folder, tmp_path):  # noqa: F811
    text = _section(load_results(folder), tmp_path)
    part = text.split("Sampling: top-p over a 128K vocabulary")[1]
    assert "FlashInfer: flashinfer 0.test." in part
    rows = [line for line in part.splitlines() if line.startswith("| 1 | 128256 |")]
    assert [r.split(" | ")[2] for r in rows] == [
        "kernelab.sample", "torch.sort_top_p", "flashinfer.softmax+top_p_sampling_from_probs",
        "flashinfer.top_p_sampling_from_probs"]  # fmt: skip
    assert rows[0].endswith("| 10.00 |")


# --- the stage's measuring code, on the CPU with stand-ins ---------------------------------------

IDENTITY = SimpleNamespace(name="a test CPU", gpu_id=None, driver=None)


def _timer(fn):
    fn()
    samples = [0.010, 0.011, 0.0105, 0.0102, 0.0108]
    return SimpleNamespace(samples_ms=samples, mode="cold", median_ms=sorted(samples)[2])


def _host(fn, median_ms):
    return SimpleNamespace(host_us=3.0, wall_us=median_ms * 1e3 + 1.0)


def test_the_step_is_checked_then_timed_and_a_path_that_cannot_run_is_a_line(tmp_path):
    lines = []
    records, failed = decode_step.measure_step(
        IDENTITY, True, lines.append, config_name="tiny", device="cpu", dtype="fp32",
        paths=("eager", "compiled"), lengths=(5,), batches=(2,), timer=_timer, host_cost=_host,
    )  # fmt: skip
    assert [r.implementation for r in records] == ["eager"]
    record = records[0]
    assert record.op == "decode_step" and record.shape == {"batch": 2, "length": 5,
                                                           "config": "tiny"}  # fmt: skip
    assert record.check["ok"] and record.check["error"] <= record.check["threshold"]
    assert record.extra["suite"] == decode_step.STEP_SUITE and record.extra["host_us"] == 3.0
    assert len(failed) == 1 and "compiled batch=2 length=5" in failed[0]
    assert "needs a CUDA GPU" in failed[0]
    assert any("the block and its float64 reference" in line for line in lines)
    # the records read back with their samples, their figures what the samples give
    save_records(records, tmp_path / "records" / "decode_step_records.json")
    results = load_results(tmp_path / "records")
    assert results.records[0].extra["from_samples"] and not results.disagreements


def test_a_step_over_its_error_budget_is_not_timed(monkeypatch):
    from kernelab.ops import decode_step as ds

    monkeypatch.setattr(ds, "error_budget", lambda dtype, eager_error: -1.0)
    records, failed = decode_step.measure_step(
        IDENTITY, True, lambda line: None, config_name="tiny", device="cpu", dtype="fp32",
        paths=("eager",), lengths=(3,), batches=(1,), timer=_timer, host_cost=_host,
    )  # fmt: skip
    assert records == [] and "over the budget" in failed[0] and "not timed" in failed[0]


class _FlashInfer:
    """A stand-in for flashinfer.sampling: top-p from probs by the sort-based sampler."""

    @staticmethod
    def top_p_sampling_from_probs(probs, top_p):
        return decode_step.torch_top_p(probs.log(), top_p)


def test_sampling_checks_each_sampler_then_times_it():
    def ours(logits, top_p, seed, offset=0):
        return decode_step.torch_top_p(logits, top_p)

    records, failed, line = decode_step.measure_sampling(
        IDENTITY, True, lambda line: None, vocab=300, batches=(1, 3), device="cpu",
        sampler=ours, flashinfer=_FlashInfer(), timer=_timer, host_cost=_host,
    )  # fmt: skip
    assert not failed
    names = {(r.implementation, r.shape["batch"]) for r in records}
    for batch in (1, 3):
        for name in (decode_step.KERNELAB_SAMPLER, decode_step.TORCH_SAMPLER, decode_step.FLASHINFER_SAMPLER,
                     decode_step.FLASHINFER_PROBS_ONLY):  # fmt: skip
            assert (name, batch) in names
    assert all(r.op == "top_p_sampling" and r.bytes == r.shape["batch"] * 300 * 4 for r in records)
    assert all(r.extra["suite"] == decode_step.SAMPLING_SUITE for r in records)


def test_a_sampler_that_draws_outside_the_nucleus_is_not_timed():
    import torch

    def wrong(logits, top_p, seed, offset=0):
        return logits.argmin(dim=-1)  # the least likely token: never in the top-p set

    records, failed, line = decode_step.measure_sampling(
        IDENTITY, True, lambda line: None, vocab=300, batches=(2,), device="cpu",
        sampler=wrong, flashinfer=None, timer=_timer, host_cost=_host,
    )  # fmt: skip
    assert [r.implementation for r in records] == [decode_step.TORCH_SAMPLER]
    assert failed == ["kernelab.sample batch=2: drew a token outside the nucleus, not timed"]
    assert line == "flashinfer not given" and torch.is_tensor(wrong(torch.zeros(1, 3), 0.9, 0))


def test_another_vocabulary_is_not_the_targets(tmp_path):
    def ours(logits, top_p, seed, offset=0):
        return decode_step.torch_top_p(logits, top_p)

    records, _, _ = decode_step.measure_sampling(
        IDENTITY, True, lambda line: None, vocab=300, batches=(1,), device="cpu",
        sampler=ours, flashinfer=None, timer=_timer, host_cost=_host,
    )  # fmt: skip
    save_records(records, tmp_path / "sampling_records.json")
    met, evidence = decode_step.sampling_torch_target(load_results(tmp_path).records)
    assert not met and evidence.startswith("not measured (")
    assert "other vocabularies not judged: 300" in evidence


def test_flashinfer_status_names_what_it_found():
    module, line = decode_step.flashinfer_status()
    assert (module is None) == line.startswith("flashinfer not importable here (")


# --- the stage ---------------------------------------------------------------------------------


@pytest.fixture
def stage(tmp_path, monkeypatch):
    """stage_decode with its measuring parts stood in for: each returns one record."""
    from kernelab.harness import ceilings
    from kernelab.lab.run import LabState

    monkeypatch.setattr(ceilings, "this_gpu", lambda command="": IDENTITY)
    parts = {}
    for name in ("measure", "measure_step", "measure_sampling"):
        def part(*args, _name=name, **kwargs):
            if parts.get(_name) == "break":
                raise RuntimeError(f"{_name} broke")
            record = decode_step.timed_record(IDENTITY, "decode_step", _name, {"batch": 1}, "bf16",
                                         _timer(lambda: None), flops=0, nbytes=0,
                                         check={"ok": True}, extra={})  # fmt: skip
            found = ([record], [])
            return (*found, "flashinfer not given") if _name == "measure_sampling" else found

        monkeypatch.setattr(decode if name == "measure" else decode_step, name, part)
    state = LabState(out=tmp_path, quick=True, gpu_id="h200", on_gpu=True)
    state.records_dir.mkdir(parents=True)
    return state, parts


def test_the_decode_stage_writes_each_parts_records(stage):
    from kernelab.lab.run import GPU_STAGES, stage_decode

    state, _ = stage
    line = stage_decode(state, lambda text: None)
    for name in ("decode_records.json", "decode_step_records.json", "sampling_records.json"):
        assert (state.records_dir / name).is_file()
    assert "1 decode-step timings" in line and "1 sampling timings (flashinfer not given)" in line
    names = [name for name, _ in GPU_STAGES]
    assert names.index("pmpp") < names.index("pmpp-counters") < names.index("decode")


def test_a_part_that_breaks_fails_the_stage_and_keeps_the_others(stage):
    from kernelab.errors import KernelabError
    from kernelab.lab.run import stage_decode

    state, parts = stage
    parts["measure_step"] = "break"
    with pytest.raises(KernelabError, match="decode-step timings: RuntimeError: measure_step broke"):
        stage_decode(state, lambda text: None)
    assert (state.records_dir / "decode_records.json").is_file()
    assert (state.records_dir / "sampling_records.json").is_file()
    assert not (state.records_dir / "decode_step_records.json").exists()
