"""The fp32 SGEMM ladder: the registry provider and the Python entry point to every step.

`sgemm(step, a, b)` computes a @ b with one ladder step (fp32, no TF32); `implementations()`
registers one Implementation per step of steps.STEPS, named "sgemm:01", "sgemm:02", ..., for
op "gemm". Compiling happens on first use (nvcc, cached on disk); nothing here touches CUDA at
import time. The launch lives in launch.py, the tile lookup in tuning.py, the ladder's engine
(compile report, checks, timing, tuning, profiling) in ladder.py and verify.py.
"""

from __future__ import annotations

from kernelab.ladders.provider import ladder_implementations
from kernelab.ladders.sgemm.launch import build_step, sgemm
from kernelab.ladders.sgemm.steps import STEPS, Step, get_step
from kernelab.ladders.sgemm.tuning import reference_defines

__all__ = ["STEPS", "Step", "build_step", "get_step", "implementations", "sgemm"]


def implementations():
    return ladder_implementations(
        STEPS,
        run_step=sgemm,
        build_step=build_step,
        prefix="sgemm",
        dtypes=("fp32",),
        label="SGEMM",
        metadata=lambda step: step.metadata(reference_defines(step)),
    )
