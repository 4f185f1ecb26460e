"""benchmarks/backward.py's plan, which needs no GPU: every case's bytes come from the cost
model, the tensors are far past L2, and bad options are refused before anything runs."""

from __future__ import annotations

import json

import pytest
from benchmark_scripts import load_script


def _script():
    return load_script("backward")


def test_the_plan_covers_the_sweep_with_the_cost_models_bytes(capsys):
    script = _script()
    assert script.main(["--only", "plan"]) == 0
    planned = json.loads(capsys.readouterr().out)
    rmsnorm = [c for c in planned if c["op"] == "rmsnorm_backward"]
    assert {c["shape"]["cols"] for c in rmsnorm} == set(script.COLS["rmsnorm"])
    assert {c["dtype"] for c in planned} == {"fp32", "bf16"}
    for case in planned:
        rows, cols = case["shape"]["rows"], case["shape"]["cols"]
        itemsize = 4 if case["dtype"] == "fp32" else 2
        assert rows * cols * itemsize <= script.TENSOR_BYTES
        assert rows * cols * itemsize >= script.TENSOR_BYTES // 2  # past any L2 (<= 128 MiB)
        extra = 0 if case["op"] == "softmax_backward" else 2 * cols * itemsize
        assert case["bytes"] == 3 * rows * cols * itemsize + extra


def test_quick_plan_takes_the_quick_columns(capsys):
    script = _script()
    assert script.main(["--only", "plan", "--quick", "--dtypes", "bf16"]) == 0
    planned = json.loads(capsys.readouterr().out)
    assert {c["shape"]["cols"] for c in planned} == set(script.QUICK_COLS)


@pytest.mark.parametrize("argv", [["--only", "sofmax"], ["--dtypes", "fp64"], ["--dtypes", ","]])
def test_bad_options_are_refused(argv):
    with pytest.raises(SystemExit) as raised:
        _script().parse(argv)
    assert raised.value.code == 2
