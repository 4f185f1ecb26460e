"""benchmarks/triton_kernels.py without a GPU: its options, the teaching kernel it sets beside
each fast one (and where that kernel does not take a case), and every part run end to end on
Triton's CPU interpreter at small shapes with a stand-in timer: each kernel checked before it
is timed, the teaching rows and records beside the fast ones at the same shapes, the document
one the report's reader takes. Nothing here is a measurement: the timer returns a constant."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("torch")
# before anything imports Triton: without CUDA it sets TRITON_INTERPRET (tests/triton_on_cpu.py)
import triton_on_cpu  # noqa: E402
from benchmark_scripts import load_script  # noqa: E402

STAND_IN_MS = 1.0


@pytest.fixture(scope="module")
def script():
    return load_script("triton_kernels")


def test_out_is_resolved_after_the_gpu_and_the_help_says_where(script, capsys):
    assert script.parse([]).out is None  # default_results_dir, once the GPU is known
    with pytest.raises(SystemExit):
        script.parse(["-h"])
    text = " ".join(capsys.readouterr().out.split())
    assert "benchmarks/results/<card>/triton" in text and "$OUT" in text
    with pytest.raises(SystemExit) as raised:
        script.parse(["--only", "sofmax"])
    assert raised.value.code == 2


def test_each_op_has_its_registered_teaching_kernel(script):
    from kernelab.spec.registry import get

    assert set(script.TEACHING) == {"vector_add", "softmax", "layernorm", "rmsnorm", "gemm"}
    for op, name in script.TEACHING.items():
        impl = get(name)
        assert impl.op == op and name.startswith("triton.") and name.endswith(".teaching")


def test_the_teaching_kernel_is_refused_only_where_it_cannot_run(script):
    from kernelab.ops.norms import teaching as norms_teaching
    from kernelab.ops.softmax import teaching as softmax_teaching

    limit = softmax_teaching.MAX_COLS
    name, fn, why = script.teaching_kernel("softmax", {"rows": 1, "cols": limit}, "bf16")
    assert name == "triton.softmax.teaching" and callable(fn) and why is None
    name, fn, why = script.teaching_kernel("softmax", {"rows": 1, "cols": 2 * limit}, "fp32")
    assert fn is None and f"at most {limit} columns" in why
    # every norm row length the script times fits the teaching norms
    assert max(script.NORM_COLS + script.SWEEP_NORM_COLS) <= norms_teaching.MAX_COLS
    for op in ("layernorm", "rmsnorm"):
        assert script.teaching_kernel(op, {"rows": 1, "cols": 16384}, "fp32")[1] is not None
    assert script.teaching_kernel("vector_add", {"n": 1 << 30}, "bf16")[1] is not None
    assert script.teaching_kernel("gemm", {"m": 8, "n": 8, "k": 8}, "bf16")[1] is not None
    name, fn, why = script.teaching_kernel("gemm", {"m": 8, "n": 8, "k": 8}, "fp8")
    assert name == "triton.matmul.teaching" and fn is None and "fp8" in why


def _stand_in_timer(fn, max_time_s=0.6):
    fn()  # the call runs, so the path is exercised; its time is no measurement
    return STAND_IN_MS, {"samples_ms": [STAND_IN_MS], "rel_noise": 0.0}


def test_a_cpu_run_times_each_teaching_kernel_beside_its_fast_path(script, tmp_path, monkeypatch):
    if triton_on_cpu.HAS_CUDA:
        pytest.skip("on a GPU the benchmark itself runs")
    triton_on_cpu.interpreted_kernels()
    # small shapes for the interpreter (8 KiB tensors), and a teaching softmax that holds
    # at most 128 columns, so that a short row is refused as 16,384+ columns are on a GPU
    MAX_COLS = 128
    teaching = triton_on_cpu.kernel_module("softmax.teaching")
    monkeypatch.setattr(teaching, "MAX_COLS", MAX_COLS)
    monkeypatch.setattr(script, "GIB", 1 << 13)
    monkeypatch.setattr(script, "SOFTMAX_COLS", (64, 2 * MAX_COLS))
    monkeypatch.setattr(script, "NORM_COLS", (512,))
    monkeypatch.setattr(script, "MATMUL_SIZES", (64,))
    args = script.parse(["--no-compile", "--out", str(tmp_path)])
    run = script.Run(args, device="cpu")
    run.time_ms, run.timer_label = _stand_in_timer, "a stand-in (a CPU test: no measurement)"
    for part in ("copy", "vector_add", "softmax", "norms", "matmul"):
        getattr(script, f"part_{part}")(run)
    run.save()

    rows = list(run.rows)
    assert not [r for r in rows if r.get("error")], rows
    assert {r["part"] for r in rows} == {"vector_add", "softmax", "layernorm", "rmsnorm", "matmul"}
    for row in rows:
        assert row["check"] == "ok", row
        refused = row["part"] == "softmax" and row["case"].endswith(f"x{2 * MAX_COLS}")
        if refused:  # said why, not timed
            assert row["teaching"] is None and row["teaching_check"] == ""
            assert "at most" in row["teaching_note"]
        else:
            assert row["teaching_check"] == "ok" and row["teaching"] is not None, row
            assert "teaching_note" not in row

    # the records: the teaching kernel's under its registry name, at the fast path's shapes,
    # each with its own passed check
    by_name: dict[str, list] = {}
    for record in run.records:
        by_name.setdefault(record["implementation"], []).append(record)
    for fast, teaching in (("triton.vector_add", "triton.vector_add.teaching"),
                           ("triton.softmax", "triton.softmax.teaching"),
                           ("triton.layernorm", "triton.layernorm.teaching"),
                           ("triton.rmsnorm", "triton.rmsnorm.teaching"),
                           ("triton.gemm", "triton.matmul.teaching")):  # fmt: skip
        cases = {(json.dumps(r["shape"], sort_keys=True), r["dtype"]) for r in by_name[teaching]}
        fast_cases = {(json.dumps(r["shape"], sort_keys=True), r["dtype"]) for r in by_name[fast]}
        if fast == "triton.softmax":
            fast_cases = {c for c in fast_cases if json.loads(c[0])["cols"] <= MAX_COLS}
        assert cases == fast_cases and cases, teaching
        assert all(r["check"]["ok"] for r in by_name[teaching])
    assert {r["implementation"] for r in run.records} >= {"eager.softmax", "cublas.gemm"}

    # one document, read by the report's loader as records of the one schema
    from kernelab.lab.results import load_results

    (path,) = tmp_path.glob("triton_kernels_run_*.json")
    document = json.loads(path.read_text())
    assert document["rows"] == json.loads(json.dumps(rows, default=str))
    results = load_results(tmp_path)
    assert results.unreadable == [] and results.not_understood == []
    names = {r.implementation for r in results.records}
    assert {"triton.softmax.teaching", "triton.matmul.teaching"} <= names


def test_the_table_has_a_teaching_column(script, capsys):
    class Run:
        device, timer_label, copy_tbps = "cpu", "stand-in", None
        rows = [
            {"part": "softmax", "case": "1x32768", "dtype": "fp32", "check": "ok",
             "triton": 1.0, "pct": None, "pct_of": "copy", "teaching": None,
             "teaching_check": "", "eager": 0.5, "compile": None, "unit": "TB/s",
             "teaching_note": "triton.softmax.teaching holds a row in registers: at most "
                              "16384 columns"},
            {"part": "softmax", "case": "1x256", "dtype": "fp32", "check": "ok",
             "triton": 1.0, "pct": None, "pct_of": "copy", "teaching": 0.75,
             "teaching_check": "ok", "eager": 0.5, "compile": None, "unit": "TB/s"},
        ]  # fmt: skip

        def targets(self):
            return {}

    script.print_table(Run())
    lines = capsys.readouterr().out.splitlines()
    header = next(line for line in lines if line.startswith("part"))
    assert "teaching" in header
    assert "at most 16384 columns" in lines[-2] and "0.75" in lines[-1]
