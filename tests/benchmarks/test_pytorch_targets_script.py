"""benchmarks/pytorch_targets.py's target list, which needs no GPU to build: the Hopper GEMM
step it times can be swapped (--hgemm-step) without touching the goals."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "pytorch_targets.py"


def _script():
    spec = importlib.util.spec_from_file_location("pytorch_targets_script", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_the_hopper_gemm_targets_time_the_step_asked_for_with_the_same_goals():
    script = _script()
    default = [t for t in script.targets({"gemm"}) if t.impl.startswith("hgemm:")]
    swapped = [t for t in script.targets({"gemm"}, "hgemm:18") if t.impl.startswith("hgemm:")]
    assert {t.impl for t in default} == {"hgemm:19"} and {t.impl for t in swapped} == {"hgemm:18"}
    assert [(t.shape, t.goal_value) for t in default] == [(t.shape, t.goal_value) for t in swapped]
    assert [t.goal_value for t in swapped] == [90.0, 100.0, 100.0]  # 2048^3, 4096^3, 8192^3
