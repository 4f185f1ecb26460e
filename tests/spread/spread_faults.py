"""Runners for the Ray tests, importable by the Ray workers (the tests put this folder on
their PYTHONPATH): the suite's runner with faults injected by a solution's file name, and
the sweep's runner on the CPU with a wall-clock stand-in for the CUDA timer."""

from __future__ import annotations

import os
import time
from pathlib import Path

from kernelab.spread.suites import SuiteRunner
from kernelab.spread.sweeps import SweepRunner


def _first_time(payload: dict) -> bool:
    """True the first time this solution is run in this suite (a marker beside the suite)."""
    markers = Path(payload["problem"]).parent.parent / "markers"
    markers.mkdir(exist_ok=True)
    marker = markers / Path(payload["solution"]).name
    if marker.exists():
        return False
    marker.touch()
    return True


class FaultySuiteRunner(SuiteRunner):
    """hang_once*.py hangs its first task; dies*.py kills its worker every time."""

    def run(self, payload: dict) -> dict:
        name = Path(payload["solution"]).name
        if name.startswith("dies"):
            os._exit(3)
        if name.startswith("hang_once") and _first_time(payload):
            while True:
                time.sleep(0.1)
        return super().run(payload)


class SlowSuiteRunner(SuiteRunner):
    """Every task takes a while longer, so that a test can interrupt a run half-way."""

    def run(self, payload: dict) -> dict:
        time.sleep(0.5)
        return super().run(payload)


def wall_clock_benchmark(fn, *, mode, min_samples, max_time_s, **_):
    from kernelab.harness.stats import summarize
    from kernelab.harness.timing import Timing

    samples = []
    for _ in range(min_samples):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1e3)
    return Timing(samples_ms=samples, mode=mode, summary=summarize(samples), stop_reason="test")


class CpuSweepRunner(SweepRunner):
    """The sweep's runner on the CPU: an H200 named as the card, the torch baselines only,
    wall-clock timing in place of CUDA events."""

    def __init__(self, **kwargs):
        import kernelab.harness.timing as timing
        from kernelab.spec import registry

        registry.PROVIDERS = ("kernelab.ops.torch_baselines",)
        timing.benchmark = wall_clock_benchmark
        os.environ.pop("KERNELAB_CEILINGS", None)
        super().__init__(**kwargs)

    def identity(self):
        from kernelab.harness.ceilings import DeviceIdentity

        return DeviceIdentity(0, "NVIDIA H200", "h200", "580.65.06", (9, 0))
