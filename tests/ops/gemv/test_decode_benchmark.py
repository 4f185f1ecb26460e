"""benchmarks/decode_kernels.py without a GPU: it explains itself, its roofline part (pure
arithmetic) agrees with the walk, --dry-run prints the plan and one line per absent anchor
package, the plan puts every kernel beside its baseline and anchors, the targets are judged
from records as they were set (on each timer, against that timer's copy ceiling), the run's
document is one file the records loader and the lab read, and the measured parts refuse a
machine without CUDA in one line."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
# before anything imports Triton: without CUDA it sets TRITON_INTERPRET, which the kernels
# that call other jitted functions need at Triton's import (tests/triton_on_cpu.py)
import triton_on_cpu  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]
BENCHMARKS = ROOT / "benchmarks"
SCRIPT = BENCHMARKS / "decode_kernels.py"


def _run(*args):
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                          env=env, timeout=120)  # fmt: skip


@pytest.fixture(scope="module")
def bench():
    sys.path.insert(0, str(BENCHMARKS))
    try:
        yield importlib.import_module("decode_kernels"), importlib.import_module("judge_decode")
    finally:
        sys.path.remove(str(BENCHMARKS))


def test_help_names_every_part_and_option():
    result = _run("-h")
    assert result.returncode == 0, result.stderr
    for word in ("--only", "--quick", "--out", "--dry-run",
                 "copy, gemv, quant, fused, gate_up, roofline"):  # fmt: skip
        assert word in result.stdout


def test_the_roofline_part_runs_without_a_gpu_and_matches_the_walk():
    from kernelab.ops.gemv.roofline_walk import walk

    result = _run("--only", "roofline", "--gpu", "h100-sxm")
    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)
    first = rows[0]
    expected = walk(4096, 4096, gpu="h100-sxm")
    assert first["case"] == "4096x4096 m=1"
    assert first["intensity"] == pytest.approx(expected["points"][0].intensity)
    assert first["crossover_m"] == expected["crossover_m"]
    assert len(rows) == 6 * 7  # six weight shapes, seven batches


def test_dry_run_prints_the_plan_anchors_and_targets_without_a_gpu(bench):
    decode_kernels, judge = bench
    result = _run("--dry-run", "--quick")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    cases = decode_kernels.plan(decode_kernels.PARTS, quick=True)
    assert lines[0].startswith(f"{len(cases)} cases (quick)")
    packages = [line for line in lines if line.startswith("anchor package ")]
    assert len(packages) == 4  # Liger-Kernel, flashinfer, torchao, gemlite: one line each
    for line in packages:  # importing, or absent with its reason, on one line
        assert line.endswith(": imports") or "not importable" in line
    assert [line.removeprefix("target: ") for line in lines if line.startswith("target: ")] == [
        *judge.TARGETS
    ]


def test_the_plan_puts_each_kernel_beside_its_baseline_and_anchors(bench):
    decode_kernels, _ = bench
    full = decode_kernels.plan(decode_kernels.PARTS, quick=False)
    gemv = [c for c in full if c.op == "gemv"]
    assert len(gemv) == 2 * 6 * 7  # bf16 and fp16, six weights, seven batches
    assert all(c.candidates[:2] == ("triton.gemv", "torch.gemv") for c in gemv)
    int4 = [c for c in full if c.op == "quant_gemv_int4"]
    assert int4 and all(c.int4_anchors and c.shape["group"] == 128 for c in int4)
    fused = [c for c in full if c.role == "fused" and c.op != "gate_up_swiglu"]
    assert {c.shape.get("rows", c.shape.get("tokens")) for c in fused} == {1, 64, 8192}
    for case in fused:
        assert f"torch.compile.{case.op}" in case.anchors and f"liger.{case.op}" in case.anchors
    gate_up = [c for c in full if c.op == "gate_up_swiglu"]
    assert {(c.shape["n"], c.shape["k"]) for c in gate_up} == {(14336, 4096)}
    assert all("kernelab.gemv+swiglu" in c.anchors for c in gate_up)
    # --only quant still times the bf16 GEMV its speedups are judged against
    alone = decode_kernels.plan(["quant"], quick=True)
    assert any(c.op == "gemv" and c.shape["m"] == 1 for c in alone)
    from kernelab.spec import registry

    for case in full:  # every registry name the plan uses exists, for the case's op
        for name in case.candidates:
            assert registry.get(name).op == case.op


def _record(implementation, op, shape, us, *, mode="cold", gbps=None, role="gemv"):
    from kernelab.harness.records import Record

    return Record(op=op, implementation=implementation, shape=shape, dtype="bf16", mode=mode,
                  samples_ms=[us * 1e-3], stats={"median": us * 1e-3}, achieved_gbps=gbps,
                  extra={"suite": "decode", "role": role})  # fmt: skip


def _gemv_run(ours_us: float, cublas_us: float, *, mode="cold", copy_gbps=3000.0):
    one = {"m": 1, "n": 4096, "k": 4096}
    sixteen = {"m": 16, "n": 4096, "k": 4096}
    return [
        _record("copy", "copy", {"bytes_per_buffer": 1}, 700.0, mode=mode, gbps=copy_gbps,
                role="ceiling"),
        _record("triton.gemv", "gemv", one, ours_us, mode=mode),
        _record("torch.gemv", "gemv", one, cublas_us, mode=mode),
        _record("triton.gemv", "gemv", sixteen, ours_us * 1.1, mode=mode),
        _record("torch.gemv", "gemv", sixteen, cublas_us * 1.1, mode=mode),
    ]  # fmt: skip


def test_the_gemv_target_needs_the_copy_ceiling_and_cublas(bench):
    _, judge = bench
    # 4096^2 bf16 = 33.5 MB of W: 12 us is 2796 GB/s, 93 % of a 3000 GB/s copy
    met, evidence = judge.judge_gemv(judge.Index(_gemv_run(12.0, 13.0), "cold"))
    assert met, evidence
    assert "2 of 2 cases" in evidence and "93 % of copy" in evidence
    slower = judge.judge_gemv(judge.Index(_gemv_run(12.0, 11.5), "cold"))
    assert slower[0] is False and "missed" in slower[1]
    below_copy = judge.judge_gemv(judge.Index(_gemv_run(14.0, 15.0), "cold"))  # 80 % of copy
    assert below_copy[0] is False
    assert judge.judge_gemv(judge.Index([], "cold"))[0] is None


def test_each_timer_is_judged_on_its_own_records(bench):
    _, judge = bench
    records = _gemv_run(12.0, 13.0) + _gemv_run(12.0, 11.0, mode="do_bench")
    verdicts = judge.judge(records, "NVIDIA H100 80GB HBM3")
    gemv = {v["timer"]: v for v in verdicts if v["target"] == judge.GEMV}
    assert gemv[judge.TIMERS["cold"]]["met"] is True
    assert gemv[judge.TIMERS["do_bench"]]["met"] is False
    assert all(v["gpu"] == "NVIDIA H100 80GB HBM3" for v in verdicts)
    # a record of another suite is no evidence
    other = [_record("triton.gemv", "gemv", {"m": 1, "n": 8, "k": 8}, 1.0)]
    other[0].extra["suite"] = "pmpp"
    assert judge.judge_gemv(judge.Index(other, "cold"))[0] is None


def test_the_quant_target_speedups_and_the_int4_anchors(bench):
    _, judge = bench
    mnk = {"m": 1, "n": 4096, "k": 4096}
    int4_shape = {**mnk, "group": 128}
    records = [_record("triton.gemv", "gemv", mnk, 30.0),
               _record("triton.quant_gemv.int4", "quant_gemv_int4", int4_shape, 9.0),
               _record("triton.quant_gemv.int8", "quant_gemv_int8", mnk, 16.0)]  # fmt: skip
    met, evidence = judge.judge_quant(judge.Index(records, "cold"))
    assert met and "int4 3.33x" in evidence and "not judged" in evidence  # no anchors here
    faster_anchor = _record("torchao.int4_weight_only", "quant_gemv_int4", int4_shape, 8.0)
    assert judge.judge_quant(judge.Index([*records, faster_anchor], "cold"))[0] is False
    slow_int8 = [*records[:2], _record("triton.quant_gemv.int8", "quant_gemv_int8", mnk, 17.0)]
    assert judge.judge_quant(judge.Index(slow_int8, "cold"))[0] is False  # 1.76x < 1.8x


def test_the_fused_target_judges_decode_and_prefill_rows_against_torch_compile(bench):
    _, judge = bench
    copy = _record("copy", "copy", {"bytes_per_buffer": 1}, 700.0, gbps=3000.0, role="ceiling")
    prefill, decode = {"rows": 8192, "cols": 4096}, {"rows": 1, "cols": 4096}
    ours = [_record("triton.add_rmsnorm", "add_rmsnorm", prefill, 100.0, gbps=2900.0,
                    role="fused"),
            _record("torch.compile.add_rmsnorm", "add_rmsnorm", prefill, 110.0, role="fused")]  # fmt: skip
    met, evidence = judge.judge_fused(judge.Index([copy, *ours], "cold"))
    assert met and "prefill rows: 97 % of copy" in evidence and "not measured" in evidence
    tiny = [_record("triton.add_rmsnorm", "add_rmsnorm", decode, 3.0, gbps=11.0, role="fused"),
            _record("torch.compile.add_rmsnorm", "add_rmsnorm", decode, 4.0, role="fused")]  # fmt: skip
    met, evidence = judge.judge_fused(judge.Index([copy, *ours, *tiny], "cold"))
    assert met is False and "add_rmsnorm rows=1: 0 % of copy" in evidence
    uncompiled = judge.judge_fused(judge.Index([copy, ours[0]], "cold"))
    assert uncompiled[0] is False and "no torch.compile timing" in uncompiled[1]


def test_the_document_is_one_file_the_loader_and_the_lab_read(tmp_path, bench):
    from kernelab.harness.records import load_records, save_records
    from kernelab.lab.decode import suite_records

    records = _gemv_run(12.0, 13.0) + _gemv_run(11.0, 13.0, mode="do_bench")
    for r in records:
        r.extra["from_samples"] = True  # as the lab's loader marks them
    path = save_records(records, tmp_path / "run.json",
                        document={"anchors": [{"anchor": "liger.rope", "ran": False,
                                               "why_not": "Liger-Kernel not importable"}]})  # fmt: skip
    data = json.loads(path.read_text())
    assert data["anchors"][0]["why_not"] == "Liger-Kernel not importable"
    assert len(load_records(path)) == len(records)
    lab = suite_records(records)  # the lab judges the harness's timings, not the twins
    assert lab and {r.mode for r in lab} == {"cold"}


def test_bad_arguments_are_one_line_errors():
    unknown_gpu = _run("--only", "roofline", "--gpu", "h100-sxn")
    assert unknown_gpu.returncode == 2 and "h100-sxm" in unknown_gpu.stderr
    assert len(unknown_gpu.stderr.strip().splitlines()) == 1
    unknown_part = _run("--only", "gemm")
    assert unknown_part.returncode == 2 and "unknown part" in unknown_part.stderr


def test_the_measured_parts_need_a_gpu():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a GPU is present: the measured parts would run")
    result = _run("--only", "gemv")
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "error: the measured parts need a CUDA GPU (only --only roofline runs without)"
    )


def test_the_measuring_code_runs_on_the_cpu_with_a_stand_in_timer(tmp_path, monkeypatch, bench):
    """measure_case end to end on the interpreter: each candidate checked, timed by the
    harness (a stand-in for its CUDA timer) and by do_bench (likewise), anchors beside, the
    records tagged for the suite and the document written; an anchor that fails its call
    is one line, not a crash."""
    if triton_on_cpu.HAS_CUDA:
        pytest.skip("a GPU is present: benchmarks/decode_kernels.py --quick runs for real")
    for name in ("gemv", "swiglu", "quant_gemv"):
        triton_on_cpu.kernel_module(name)
    decode_kernels, judge = bench
    import decode_anchors

    from kernelab.harness import timing
    from kernelab.harness.ceilings import DeviceIdentity
    from kernelab.harness.records import load_records
    from kernelab.harness.stats import summarize

    def stand_in(fn, **_):
        fn()
        samples = [0.010, 0.011, 0.012]
        return timing.Timing(samples, "cold", summarize(samples), "converged")

    monkeypatch.setattr(timing, "benchmark", stand_in)
    from kernelab.harness import launch_cost

    # the host-cost loop, short: each call is an interpreted kernel here
    monkeypatch.setattr(launch_cost, "CALLS_MAX", 10)
    monkeypatch.setattr(launch_cost, "WARMUP_CALLS", 1)
    monkeypatch.setattr(decode_kernels, "do_bench_samples", lambda fn: (fn(), [0.02, 0.021])[1])
    broken = decode_anchors.Anchor("broken.gate_up_swiglu", "gate_up_swiglu",
                                   lambda: lambda *inputs: 1 / 0, "raises")  # fmt: skip
    monkeypatch.setattr(decode_kernels, "anchors_for",
                        lambda op: [*decode_anchors.anchors_for(op), broken])  # fmt: skip
    identity = DeviceIdentity(0, "stand-in", "h100-sxm", None, (9, 0))
    run = decode_kernels.Run(identity, tmp_path / "run.json", 0.1, device="cpu")
    Case = decode_kernels.Case
    gate_up = Case("fused", "gate_up_swiglu", {"m": 2, "n": 19, "k": 37}, "fp32", "gate_up m=2",
                   ("triton.gate_up_swiglu", "torch.gate_up_swiglu"),
                   ("kernelab.gemv+swiglu", "torch.gate_up_swiglu.one_gemm",
                    "broken.gate_up_swiglu"))  # fmt: skip
    int4 = Case("quant", "quant_gemv_int4", {"m": 1, "n": 8, "k": 256, "group": 128}, "fp16",
                "int4 m=1", ("triton.quant_gemv.int4", "torch.quant_gemv.int4"),
                int4_anchors=True)  # fmt: skip
    for case in (gate_up, int4):
        decode_kernels.measure_case(run, case)
    names = {(r.implementation, r.mode) for r in run.records}
    for name in ("triton.gate_up_swiglu", "torch.gate_up_swiglu", "kernelab.gemv+swiglu",
                 "torch.gate_up_swiglu.one_gemm", "triton.quant_gemv.int4"):  # fmt: skip
        assert {(name, "cold"), (name, "do_bench")} <= names
    assert all(r.extra["suite"] == "decode" and r.extra["role"] in ("fused", "quant")
               for r in run.records)  # fmt: skip
    twin = next(r for r in run.records if r.mode == "do_bench")
    assert twin.median_ms == pytest.approx(0.0205) and twin.extra["host_cost"]["calls"] > 0
    assert len(run.failures) == 1 and run.failures[0].startswith("broken.gate_up_swiglu")
    assert "ZeroDivisionError" in run.failures[0] and "\n" not in run.failures[0]
    for name in decode_anchors.INT4_ANCHORS:  # absent here, or measured
        assert name in run.anchors
    verdicts = judge.judge(run.records, identity.name)
    run.save(verdicts)
    assert len(load_records(run.path)) == len(run.records)
