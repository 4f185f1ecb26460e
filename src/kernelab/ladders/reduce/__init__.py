"""The sum-reduction ladder: the registry provider and the Python entry point to every step.

`reduce_sum(step, x)` sums x (fp32, bf16 or fp16, fp32 accumulation) with one ladder step;
`implementations()` registers one Implementation per step of steps.STEPS, named
"reduce:01" ... "reduce:10", for op "reduce_sum". Compiling happens on first use (nvcc,
cached on disk); nothing here touches CUDA at import time. The launch lives in launch.py,
the engine (compile report, checks, timing, profiling) in ladder.py.
"""

from __future__ import annotations

from kernelab.ladders.reduce.launch import build_step, reduce_sum
from kernelab.ladders.reduce.steps import DTYPES, STEPS, Step, get_step
from kernelab.spec.registry import Implementation

__all__ = ["STEPS", "Step", "build_step", "get_step", "implementations", "reduce_sum"]


def _builder(step: Step):
    def build():
        build_step(step)  # compile the fp32 build now; other dtypes compile on first use

        def run(x):
            return reduce_sum(step, x)

        run.__name__ = f"reduce_{step.number:02d}_{step.slug}"
        return run

    return build


def implementations():
    return [
        Implementation(
            name=step.name,
            op="reduce_sum",
            build=_builder(step),
            dtypes=DTYPES,
            description=f"sum-reduction step {step.number}: {step.technique}",
            metadata=step.metadata(),
        )
        for step in STEPS
    ]
