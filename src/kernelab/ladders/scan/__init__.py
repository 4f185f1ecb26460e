"""The scan ladder: the registry provider and the Python entry to every step.

`scan(step, x, exclusive=False)` returns the inclusive (or exclusive) prefix sums of a 1-D
fp32 or int32 tensor; `implementations()` registers "scan:01".."scan:04" for op "scan".
Compiling happens on first use; nothing here touches CUDA at import time. The engine
(compile report, checks, timing beside torch.cumsum and CUB) is ladder.py.
"""

from __future__ import annotations

from kernelab.ladders.scan.launch import build_step, scan
from kernelab.ladders.scan.steps import DTYPES, STEPS, Step, get_step
from kernelab.spec.registry import Implementation

__all__ = ["STEPS", "Step", "build_step", "get_step", "implementations", "scan"]


def _builder(step: Step):
    def build():
        build_step(step)  # compile now, so the first timed call does not pay for nvcc

        def run(x, exclusive=False):
            return scan(step, x, exclusive)

        run.__name__ = f"scan_{step.number:02d}_{step.slug}"
        return run

    return build


def implementations() -> list[Implementation]:
    return [
        Implementation(
            name=step.name,
            op="scan",
            build=_builder(step),
            dtypes=DTYPES,
            description=f"scan step {step.number}: {step.technique}",
            metadata=step.metadata(),
        )
        for step in STEPS
    ]
