"""Registry entries for a ladder of CUDA GEMM steps (the SGEMM and the Hopper ladders)."""

from __future__ import annotations

from collections.abc import Callable


def ladder_implementations(
    steps,
    *,
    run_step: Callable,  # run_step(step, a, b) -> a @ b
    build_step: Callable,  # build_step(step): compile (cached) ahead of the first call
    prefix: str,  # "sgemm" / "hgemm": the function name seen by profilers
    dtypes: tuple[str, ...],
    label: str,  # "SGEMM" / "Hopper bf16 GEMM"
) -> list:
    from kernelab.kernels.registry import Implementation

    def callable_for(step):
        def build():
            build_step(step)  # compile now, so the first timed call does not pay for nvcc

            def run(a, b):
                return run_step(step, a, b)

            run.__name__ = f"{prefix}_{step.number:02d}_{step.slug}"
            return run

        return build

    return [
        Implementation(
            name=step.name,
            op="gemm",
            build=callable_for(step),
            dtypes=dtypes,
            description=f"{label} step {step.number}: {step.technique}",
            metadata=step.metadata(),
        )
        for step in steps
    ]
