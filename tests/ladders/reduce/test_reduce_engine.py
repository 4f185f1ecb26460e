"""The reduction ladder's engine, CLI, op and read ceiling without a GPU: the table from a
recorded (synthetic) fixture, the float64 reference and its tolerance, the cache plumbing of
the read-only ceiling, the counters read from a profile, the compile report and bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from kernelab.errors import KernelabError
from kernelab.ladders.reduce import ladder
from kernelab.runtime.cuda import build as cuda_build

FIXTURES = Path(__file__).parent / "fixtures"
ROOT = Path(__file__).parents[3]
needs_nvcc = pytest.mark.skipif(cuda_build.find_nvcc() is None, reason="needs nvcc")


def _fixture():
    return json.loads((FIXTURES / "synthetic_measurements.json").read_text())


# ---- the table -----------------------------------------------------------------------------


def test_table_rows_from_the_fixture():
    data = _fixture()
    rows = ladder.table_rows(data["measurements"], data["read_ceiling_bytes_per_s"])
    by = {(r["step"], r["dtype"]): r for r in rows}
    n = 67108864
    step10 = by[("reduce:10", "fp32")]
    assert step10["gb_per_s"] == pytest.approx(n * 4 / 0.0671e-3 / 1e9)
    assert step10["pct_of_read_ceiling"] == pytest.approx(100 * n * 4 / 0.0671e-3 / 4.0e12)
    # the speedup is over the step before in the table, not over the anchor
    assert by[("reduce:02", "fp32")]["speedup_vs_prev"] == pytest.approx(2.0)
    assert step10["speedup_vs_prev"] == pytest.approx(0.32 / 0.0671)
    assert by[("reduce:01", "fp32")]["speedup_vs_prev"] is None
    assert by[("torch.sum", "fp32")]["speedup_vs_prev"] is None
    assert by[("reduce:01", "bf16")]["gb_per_s"] == pytest.approx(n * 2 / 0.5e-3 / 1e9)
    assert by[("reduce:01", "bf16")]["speedup_vs_prev"] is None  # another dtype, its own chain
    assert by[("reduce:02", "fp32")]["counter"]["value"] == 1500000
    assert by[("reduce:02", "fp32")]["expected_speedup"] == 1.6
    # without a read ceiling the percentage is absent, never invented
    assert all(
        r["pct_of_read_ceiling"] is None for r in ladder.table_rows(data["measurements"], None)
    )
    with pytest.raises(KernelabError, match="positive"):
        ladder.table_rows([{"step": "reduce:01", "n": 1, "dtype": "fp32", "median_ms": 0}], None)


def test_the_table_renders_with_its_columns_and_the_cub_line():
    from rich.console import Console

    from kernelab.commands.ladder_primitives import render_reduce_table

    data = _fixture()
    result = {"dtypes": ["fp32"], "sizes": [67108864], "gpu": "test GPU", "mode": "cold",
              "rows": ladder.table_rows(data["measurements"], 4.0e12),
              "read_ceiling_bytes_per_s": 4.0e12, "read_ceiling_source": "fixture",
              "cub": ladder.NO_CUB, "checks": []}  # fmt: skip
    console = Console(width=200, record=True)
    render_reduce_table(result, console)
    text = console.export_text()
    for column in ("GB/s", "% read roof", "speedup", "counter"):
        assert column in text
    assert "smem bank conflicts (ld) 1.5 M" in text
    assert "CUB anchor absent" in text and "4,000 GB/s" in text


def test_targets_are_judged_from_rows():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import reduce_ladder as script
    finally:
        sys.path.pop(0)
    data = _fixture()
    rows = ladder.table_rows(data["measurements"], data["read_ceiling_bytes_per_s"])
    targets = script.judge_targets(rows)
    read = next(t for t in targets if "read ceiling" in t["target"])
    assert read["met"] is True and read["value"] > 95  # 4.0 TB/s of a 4.0 TB/s roof
    torch_target = next(t for t in targets if "torch.sum" in t["target"])
    assert torch_target["met"] is True and torch_target["value"] == pytest.approx(0.08 / 0.0671)
    slower = [dict(r, median_ms=0.1) if r["step"] == "reduce:10" else r for r in rows]
    assert not next(t for t in script.judge_targets(slower) if "torch.sum" in t["target"])["met"]


def test_benchmark_script_shows_help():
    result = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "reduce_ladder.py"), "-h"],
                            capture_output=True, text=True, timeout=120)  # fmt: skip
    assert result.returncode == 0 and "--sizes" in result.stdout and "targets" in result.stdout


# ---- the op --------------------------------------------------------------------------------


def test_reduce_sum_op_reference_cost_and_tolerance():
    import torch

    from kernelab.harness.check import check_implementation
    from kernelab.harness.tolerances import tolerance
    from kernelab.spec.reference import get_op

    op = get_op("reduce_sum")
    (x,) = op.make_inputs({"n": 1001}, "bf16", seed=3)
    assert x.dtype == torch.bfloat16 and x.shape == (1001,)
    ref = op.reference(x)
    assert ref.dtype == torch.float64 and ref.dim() == 0
    assert ref.item() == pytest.approx(x.double().sum().item(), rel=0, abs=0)
    assert ref.item() > 500  # N(0,1) + 1: a sum near n, far from zero
    assert op.out_dtype("bf16") == "fp32"  # fp32 accumulation: held to fp32's threshold
    assert tolerance("bf16", None, op.out_dtype("bf16")).threshold < 2e-5
    cost = op.cost({"n": 1001}, "fp16")
    assert cost.flops == 1000 and cost.bytes == 1001 * 2 + 4
    assert check_implementation(op.torch_eager, "reduce_sum", {"n": 4099}, "fp16", device="cpu").ok
    # an fp16 accumulator is wrong by the derived threshold
    half = check_implementation(lambda t: t.sum(dtype=torch.float16).float(), "reduce_sum",
                                {"n": 4099}, "fp16", device="cpu")  # fmt: skip
    assert not half.ok


def test_registry_lists_every_step():
    from kernelab.spec.registry import get

    for step in ladder.STEPS:
        impl = get(step.name)
        assert impl.op == "reduce_sum" and impl.dtypes == ("fp32", "bf16", "fp16")
        assert impl.metadata["proof_metric"] == step.metric
    assert get("torch.sum").is_baseline


# ---- the read-only ceiling -----------------------------------------------------------------


def _measured(with_read: bool):
    from kernelab.harness.ceilings import Ceiling, MeasuredCeilings

    ceilings = {
        "copy": Ceiling("copy", "bytes/s", 4.28e12, 1.0, 0.01, {"bytes_per_buffer": 2**31}, 4.8e12),
        "bf16": Ceiling("bf16", "FLOP/s", 723e12, 0.19, 0.01, {"m": 4096, "n": 4096, "k": 4096}, 989.4e12),
    }  # fmt: skip
    if with_read:
        ceilings["read"] = Ceiling(
            "read", "bytes/s", 4.5e12, 0.95, 0.01, {"bytes_read": 2**32}, 4.8e12
        )
    return MeasuredCeilings("NVIDIA H200", "h200", "580.65.06", "2026-11-29T12:00:00+00:00",
                            False, ceilings)  # fmt: skip


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELAB_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("KERNELAB_CEILINGS", raising=False)
    return tmp_path / "cache"


def test_read_ceiling_is_cached_and_read_back(cache, monkeypatch):
    from kernelab.harness import ceilings
    from kernelab.harness.ceilings import DeviceIdentity, cache_path, load_measured, save_measured

    identity = DeviceIdentity(0, "NVIDIA H200", "h200", "580.65.06", (9, 0))
    save_measured(_measured(True), cache_path(identity))
    loaded = load_measured(cache_path(identity))
    assert ceilings.read_rate(loaded) == pytest.approx(4.5e12)
    assert loaded.ceilings["read"].ratio == pytest.approx(4.5 / 4.8)
    # a bandwidth, not a FLOP peak: the roofline's peaks leave it out
    assert loaded.to_ceilings().peak_flops == {"bf16": pytest.approx(723e12)}
    assert loaded.to_ceilings().bandwidth == pytest.approx(4.28e12)
    assert ceilings.read_rate(_measured(False)) is None

    monkeypatch.setattr(ceilings, "this_gpu", lambda command="kernelab": identity)
    rate, source = ladder.read_ceiling()
    assert rate == pytest.approx(4.5e12) and source.startswith("cached")


def test_the_ceilings_table_names_the_read_ceiling():
    from rich.console import Console

    from kernelab.commands.ceilings import render_measured

    console = Console(width=200, record=True)
    render_measured(_measured(True), "somewhere")(console)
    text = console.export_text()
    assert "read only (reductions)" in text and "4 GiB read" in text and "4.50 TB/s" in text


# ---- the profile's counters ----------------------------------------------------------------


def test_counters_come_from_each_steps_first_pass():
    def kernel(name, **metrics):
        return SimpleNamespace(name=f"{name}(const float *, long long, float *)",
                               metrics=metrics, duration_ns=1000)  # fmt: skip

    steps = [ladder.get_step(n) for n in (1, 3, 10)]
    kernels = [
        kernel("reduce_01", smsp__sass_average_branch_targets_threads_uniform_pct=0,
               **{"smsp__sass_average_branch_targets_threads_uniform.pct": 61.0}),
        kernel("reduce_01_partials"), kernel("reduce_01_partials"),
        kernel("reduce_03", **{"l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum": 0.0}),
        kernel("reduce_03_partials"),
        kernel("reduce_10"),
        kernel("unrelated_kernel"),
    ]  # fmt: skip
    found = ladder.counters_from_kernels(kernels, steps)
    assert found["reduce:01"]["value"] == 61.0 and found["reduce:01"]["launches"] == 3
    assert found["reduce:03"]["value"] == 0.0 and found["reduce:03"]["launches"] == 2
    assert found["reduce:10"]["value"] == 1  # one pass: one launch is the proof


# ---- the CLI -------------------------------------------------------------------------------


@needs_nvcc
def test_cli_without_gpu_prints_the_compile_report(capsys):
    from kernelab.cli import main

    assert main(["ladder", "reduce", "--steps", "1,9", "--dtype", "fp32,bf16", "--json"]) == 0
    captured = capsys.readouterr()
    data = json.loads(captured.out)  # exactly one JSON document on stdout
    assert data["timed"] is False
    assert [(r["step"], r["dtype"]) for r in data["compile"]] == [
        ("reduce:01", "fp32"), ("reduce:09", "fp32"), ("reduce:01", "bf16"), ("reduce:09", "bf16"),
    ]  # fmt: skip
    assert all(r["spill_store_bytes"] == 0 for r in data["compile"])
    assert data["compile"][1]["sass"].get("ldg_128", 1) > 0
    assert "need a CUDA GPU" in captured.err


@pytest.mark.parametrize(
    "args",
    [
        ["--sizes", "0"],
        ["--sizes", "-5"],
        ["--sizes", "2^x"],
        ["--dtype", "fp64"],
        ["--dtype", "int8"],
        ["--steps", "11"],
        ["--steps", "5-2"],
        ["--plot", "x.png"],
        ["--profile", "--sizes", "2^20,2^22"],
        ["--mode", "warm"],
    ],
)
def test_cli_rejects_bad_input_in_one_line(capsys, args):
    from kernelab.cli import main

    assert main(["ladder", "reduce", *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("kernelab:"), err


def test_parse_counts():
    from kernelab.commands.ladder_primitives import parse_counts

    assert parse_counts("1,2^20, 100003") == [1, 2**20, 100003]
    assert parse_counts("2^31") == [2**31]


# ---- do_bench and the host cost per call, beside the harness's median ------------------------


def test_time_ladder_records_do_bench_and_the_host_cost_beside_the_harness(monkeypatch):
    """The anchors timed on the CPU with stand-ins for the harness's timer, do_bench and the
    launch-cost loop: each measurement, table row and record carries the do_bench median and
    the host cost per call, and the table's time stays the harness's median."""
    import torch

    from kernelab.harness import ceilings
    from kernelab.harness.ceilings import DeviceIdentity
    from kernelab.harness.stats import summarize
    from kernelab.harness.timing import Timing
    from kernelab.spec.reference import get_op

    identity = DeviceIdentity(0, "NVIDIA H200", "h200", "580.65.06", (9, 0))
    monkeypatch.setattr(ceilings, "this_gpu", lambda command="kernelab": identity)
    real = get_op("reduce_sum")
    cpu = SimpleNamespace(
        make_inputs=lambda shape, dtype, seed, device: real.make_inputs(shape, dtype, seed=seed),
        cost=real.cost,
    )  # fmt: skip
    monkeypatch.setattr(ladder, "get_op", lambda name: cpu)
    monkeypatch.setattr(ladder, "cub_anchor", lambda: (None, ladder.NO_CUB))

    def timer(fn):
        assert fn().dtype == torch.float32  # the anchor really runs (torch.sum on the CPU)
        samples = [0.5, 0.4, 0.6]
        return Timing(samples_ms=samples, mode="cold", summary=summarize(samples),
                      stop_reason="converged")  # fmt: skip

    measurements, records, line = ladder.time_ladder(
        [], [1000, 4099], ["fp32", "bf16"], timer=timer,
        do_bench=lambda fn: [0.3, 0.2, 0.25, 0.9],
        host_cost=lambda fn, ms: {"calls": 10, "host_us": 7.0, "wall_us": 9.0,
                                  "device_us": ms * 1e3, "launch_bound": False},
    )  # fmt: skip
    assert line == ladder.NO_CUB
    assert [(m["step"], m["n"], m["dtype"]) for m in measurements] == [
        ("torch.sum", 1000, "fp32"), ("torch.sum", 4099, "fp32"),
        ("torch.sum", 1000, "bf16"), ("torch.sum", 4099, "bf16"),
    ]  # fmt: skip
    for m in measurements:
        assert m["median_ms"] == 0.5 and m["do_bench_median_ms"] == pytest.approx(0.275)
        assert m["do_bench_samples"] == 4 and m["host_cost"]["wall_us"] == 9.0
    for record in records:
        assert record.extra["ladder"] == "reduce" and record.extra["do_bench_median_ms"] > 0
        assert record.extra["host_cost"]["device_us"] == pytest.approx(500.0)
    rows = ladder.table_rows(measurements, 4.0e12)
    assert rows[0]["do_bench_median_ms"] == pytest.approx(0.275)
    assert rows[0]["host_cost"]["host_us"] == 7.0
    # measurements without the extras (an older fixture) give None, never an invented figure
    fixture_rows = ladder.table_rows(_fixture()["measurements"], 4.0e12)
    assert all(r["do_bench_median_ms"] is None for r in fixture_rows)
    assert all(r["host_cost"] is None for r in fixture_rows)
