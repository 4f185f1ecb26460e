"""benchmarks/pytorch_targets.py's target list, which needs no GPU to build: the Hopper GEMM
step it times can be swapped (--hgemm-step) without touching the goals."""

from __future__ import annotations

from benchmark_scripts import load_script


def _script():
    return load_script("pytorch_targets")


def test_the_hopper_gemm_targets_time_the_step_asked_for_with_the_same_goals():
    script = _script()
    default = [t for t in script.targets({"gemm"}) if t.impl.startswith("hgemm:")]
    swapped = [t for t in script.targets({"gemm"}, "hgemm:18") if t.impl.startswith("hgemm:")]
    assert {t.impl for t in default} == {"hgemm:19"} and {t.impl for t in swapped} == {"hgemm:18"}
    assert [(t.shape, t.goal_value) for t in default] == [(t.shape, t.goal_value) for t in swapped]
    assert [t.goal_value for t in swapped] == [90.0, 100.0, 100.0]  # 2048^3, 4096^3, 8192^3
