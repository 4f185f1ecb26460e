"""benchmarks/decode_step.py without a GPU: its arguments, its record layout (decode_kernels.py's),
its target judgement, one measured case at the tiny config on the CPU with stand-in timers
(check, rows, records, a path that cannot run there), the documented timeline command, and a
one-line refusal where no GPU is visible."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from benchmark_scripts import load_script

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "benchmarks" / "decode_step.py"


@pytest.fixture(scope="module")
def bench():
    return load_script("decode_step")


def _run(*args):
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                          env=env, timeout=120)  # fmt: skip


def test_help_names_the_paths_and_options(bench):
    result = _run("-h")
    assert result.returncode == 0, result.stderr
    for word in ("--quick", "--out", "--lengths", "--timeline", "--steps"):
        assert word in result.stdout
    unwrapped = "".join(result.stdout.split())  # argparse wraps the epilog anywhere
    assert "paths:" + ",".join(bench.PATHS) in unwrapped
    assert {"eager", "compiled", "graphed-eager", "kernelab-graphed"} <= set(bench.PATHS)


def test_the_docstring_gives_the_timeline_command(bench):
    assert "kernelab timeline --warmup 5 --steps 20 -- python3 benchmarks/decode_step.py" in (
        bench.__doc__
    )


def test_defaults_and_quick(bench):
    full, quick = bench.parse([]), bench.parse(["--quick"])
    assert full.lengths == quick.lengths == (1024, 8192)
    assert full.batches == bench.BATCHES and quick.batches == (1,)
    assert full.paths == bench.PATHS
    assert bench.parse(["--batches", "2,8", "--paths", "eager,compiled"]).batches == (2, 8)


@pytest.mark.parametrize(
    "args, match",
    [
        (["--paths", "eager,fast"], "unknown path"),
        (["--timeline", "graphed"], "unknown path"),
        (["--lengths", "1k"], "comma list of integers"),
        (["--batches", "0"], "batch of 0"),
        (["--lengths", "-5"], "non-negative"),
        (["--timeline", "eager", "--steps", "0"], "--steps"),
    ],
)
def test_bad_arguments_are_one_line_errors(args, match):
    result = _run(*args)
    assert result.returncode == 2
    assert match in result.stderr.strip().splitlines()[-1]


def test_without_a_gpu_it_refuses_in_one_line():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a GPU is present: the benchmark would run")
    for args in ((), ("--timeline", "kernelab-graphed", "--steps", "3")):
        result = _run(*args)
        assert result.returncode == 2
        assert result.stderr.strip() == (
            "error: the decode step is timed on a CUDA GPU; none is visible"
        )


def test_record_layout_is_decode_kernels_layout(bench):
    cost = {"flops": 4.0e8, "bytes": 4.4e8}
    record = bench.make_record("kernelab-graphed", 1, 1024, "bf16", cost, 0.2, "timer", "H100",
                               check=True)  # fmt: skip
    assert set(record) >= {"op", "implementation", "shape", "dtype", "median_ms", "flops",
                           "bytes", "achieved_tbps", "achieved_tflops", "gpu", "timer"}  # fmt: skip
    assert record["op"] == "decode_step" and record["implementation"] == "kernelab-graphed"
    assert record["shape"]["batch"] == 1 and record["shape"]["length"] == 1024
    assert record["achieved_tbps"] == pytest.approx(4.4e8 / 0.2e-3 / 1e12)
    assert record["check"] is True


def _row(path, length, do_bench, harness, batch=1, check=True):
    return {"part": "step", "path": path, "batch": batch, "length": length, "check": check,
            "do_bench_us": do_bench, "harness_us": harness}  # fmt: skip


def test_judge_needs_both_timers_at_each_measured_length(bench):
    rows = [
        _row("compiled", 1024, 300.0, 310.0), _row("kernelab-graphed", 1024, 290.0, 305.0),
        _row("compiled", 8192, 330.0, 340.0), _row("kernelab-graphed", 8192, 320.0, 345.0),
        _row("kernelab-graphed", 1024, 900.0, 900.0, batch=4),  # not judged: batch 4
    ]  # fmt: skip
    verdicts = {v["case"]: v for v in bench.judge(rows)}
    assert set(verdicts) == {"batch 1, KV 1024", "batch 1, KV 8192"}
    assert verdicts["batch 1, KV 1024"]["met"] is True
    assert verdicts["batch 1, KV 8192"]["met"] is False  # the harness says slower
    assert verdicts["batch 1, KV 8192"]["ratio_harness"] == pytest.approx(345 / 340)
    assert verdicts["batch 1, KV 1024"]["path"] == "kernelab-graphed"


def test_judge_takes_the_faster_kernelab_attention(bench):
    rows = [_row("compiled", 1024, 300.0, 300.0), _row("kernelab-graphed", 1024, 320.0, 320.0),
            _row("kernelab-splitkv-graphed", 1024, 290.0, 295.0)]  # fmt: skip
    (verdict,) = bench.judge(rows)
    assert verdict["met"] is True and verdict["path"] == "kernelab-splitkv-graphed"
    rows[2]["check"] = False  # a failed path never counts, however fast
    (verdict,) = bench.judge(rows)
    assert verdict["met"] is False and verdict["path"] == "kernelab-graphed"


def test_judge_fails_a_missing_or_unchecked_path_and_skips_unmeasured_lengths(bench):
    failed = [_row("compiled", 1024, 300.0, 300.0),
              _row("kernelab-graphed", 1024, 1.0, 1.0, check=False)]  # fmt: skip
    (verdict,) = bench.judge(failed)
    assert verdict["met"] is False and "failed" in verdict["why"]
    (missing,) = bench.judge([_row("compiled", 8192, 300.0, 300.0)])
    assert missing["case"] == "batch 1, KV 8192" and missing["met"] is False
    assert bench.judge([]) == []


@pytest.mark.parametrize("path", ["eager", "kernelab"])
def test_kernelab_timeline_runs_on_the_step_loop_without_a_gpu(tmp_path, capsys, monkeypatch, path):
    """The documented timeline command at the tiny config on the CPU (the kernelab path under
    Triton's interpreter): the loop marks each token and the capture records the steps asked
    for, with the step's ops in them."""
    import json

    pytest.importorskip("torch")
    from kernelab.cli import main

    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setenv("PYTHONPATH", str(ROOT / "src"))
    argv = ["timeline", "--out", str(tmp_path / "out"), "--steps", "3", "--warmup", "2",
            "--top", "0", "--json", "--", "python", str(SCRIPT), "--timeline", path, "--config", "tiny", "--device", "cpu",
            "--length", "6", "--steps", "10"]  # fmt: skip
    assert main(argv) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["capture"]["mode"] == "steps" and data["capture"]["steps"] == 3
    calls = {row["name"]: row["calls"] for row in data["top"]}
    if path == "kernelab":  # per token: four GEMVs and one of each fused op
        expected = {"kernelab::gemv": 12, "kernelab::rmsnorm": 3, "kernelab::rope_": 3,
                    "kernelab::add_rmsnorm": 3, "kernelab::swiglu": 3}  # fmt: skip
    else:
        expected = {"aten::scaled_dot_product_attention": 3}
    assert {name: calls.get(name) for name in expected} == expected, calls


def test_cpu_timeline_takes_only_the_cpu_paths():
    result = _run("--timeline", "kernelab-graphed", "--device", "cpu")
    assert result.returncode == 2 and "--device cpu runs only" in result.stderr


def test_a_case_runs_end_to_end_on_the_cpu_with_stand_in_timers(bench, tmp_path):
    """measure_case at the tiny config in fp32: every path checked before it is timed, two
    records per timed path, the compiled path (CUDA graphs) a failed row with its reason."""
    import argparse
    import json
    import types

    torch = pytest.importorskip("torch")
    from triton_on_cpu import HAS_CUDA, kernel_module

    if HAS_CUDA:
        pytest.skip("on a GPU the benchmark itself runs")
    for name in ("norms", "gemv", "fused_norm", "rope", "swiglu", "decode_attention"):
        kernel_module(name)

    def do_bench(fn, warmup, rep, return_mode):
        assert return_mode == "all"  # every sample goes into the records
        fn()
        return [0.24, 0.25, 0.26]

    def benchmark(fn, mode, min_samples, max_time_s):
        fn()
        return types.SimpleNamespace(median_ms=0.5, samples_ms=[0.4, 0.5, 0.6])

    paths = ("eager", "kernelab", "kernelab-splitkv", "compiled")
    run = {"args": argparse.Namespace(paths=paths, quick=True), "torch": torch,
           "benchmark": benchmark, "do_bench": do_bench, "gpu": "cpu", "sync": lambda: None,
           "config": "tiny", "dtype": "fp32", "device": "cpu", "rows": [], "records": [],
           "copy_tbps": 1.0, "path": tmp_path / "decode_step.json", "host_calls": 2,
           "wall_calls": 2}  # fmt: skip
    bench.measure_case(run, 2, 5)
    rows = {row["path"]: row for row in run["rows"]}
    assert set(rows) == set(paths)
    for path in paths[:3]:
        row = rows[path]
        assert row["check"] and row["error"] <= row["budget"]
        assert (row["do_bench_us"], row["harness_us"]) == (250.0, 500.0)
        assert row["host_us"] > 0 and row["wall_us"] > 0
        assert row["pct_of_floor"] == pytest.approx(100 * row["floor_us"] / 500.0)
    failed = rows["compiled"]
    assert not failed["check"] and "needs a CUDA GPU" in failed["failure"]
    assert "harness_us" not in failed
    assert len(run["records"]) == 2 * 3
    assert {r["shape"]["config"] for r in run["records"]} == {"tiny"}
    saved = json.loads(run["path"].read_text())
    assert saved["config"] == "tiny" and len(saved["rows"]) == 4
    samples = {r["timer"]: r["samples_ms"] for r in run["records"]}
    assert samples == {"triton.testing.do_bench median": [0.24, 0.25, 0.26],
                       "kernelab.harness.timing.benchmark cold median": [0.4, 0.5, 0.6]}  # fmt: skip


def test_a_measurement_is_saved_in_the_one_record_schema(bench, tmp_path):
    from kernelab.harness.records import load_records

    cost = {"flops": 4.0e8, "bytes": 4.4e8}
    measurements = [bench.make_record("compiled", 1, 8192, "bf16", cost, ms, timer, "H100",
                                      check=True, error=0.004, samples_ms=[ms, ms * 1.01])
                    for ms, timer in ((0.27, "triton.testing.do_bench median"),
                                      (0.26, "kernelab.harness.timing.benchmark cold median"))]  # fmt: skip
    path = tmp_path / "decode_step.json"
    run = {"gpu": "H100", "copy_tbps": 3.0, "config": "llama3-8b", "rows": [], "path": path,
           "records": measurements}  # fmt: skip
    bench.save(run)
    records = load_records(path)
    assert [r.mode for r in records] == ["do_bench", "cold"]
    assert records[0].stats["median"] == pytest.approx(0.27) and records[0].gpu == "H100"
    assert records[1].extra["error"] == pytest.approx(0.004) and records[1].check == {"ok": True}
    assert records[1].extra["suite"] == "decode_step" and records[1].shape["length"] == 8192
    assert records[1].samples_ms == [0.26, 0.26 * 1.01]  # the lab recomputes the median
