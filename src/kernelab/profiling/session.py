"""Profile something end to end: run ncu, keep the report, read its kernels back.

Two targets:
  a registered implementation (`profile_implementation`, `run_implementation`): ncu runs
      kernelab.profiling.runner, which warms the kernel up and launches it once more inside
      an NVTX range; only kernels in that range are profiled
  any command (`run_command`): the caller picks kernels by name regex, NVTX range and
      launch skip/count
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from kernelab.errors import KernelabError
from kernelab.profiling import ncu
from kernelab.profiling.metrics import EXTRA_METRICS, FOCUSED_SECTIONS
from kernelab.profiling.report import KernelProfile, load_report
from kernelab.profiling.runner import DEFAULT_WARMUP, PROFILE_RANGE

PROFILE_DIR_ENV = "KERNELAB_PROFILE_DIR"
DEFAULT_PROFILE_DIR = "kernelab-profiles"


@dataclass
class ProfileRun:
    report_path: Path
    command: list  # the ncu argv that ran
    kernels: list  # [KernelProfile]
    implementation: str | None = None
    op: str | None = None
    shape: dict = field(default_factory=dict)
    dtype: str | None = None
    predicted: object = None  # the cost model's OpCost for the op, when known

    def main_kernel(self) -> KernelProfile:
        """The longest-running profiled kernel (the GEMM, not its split-K reduction)."""
        if not self.kernels:
            raise KernelabError(f"{self.report_path}: the report holds no kernel")
        return max(self.kernels, key=lambda k: k.duration_ns or 0.0)


def default_report_path(stem: str) -> Path:
    """Where a profile run keeps its report when no --out is given."""
    safe = re.sub(r"[^A-Za-z0-9_.=-]+", "_", stem).strip("_") or "profile"
    return Path(os.environ.get(PROFILE_DIR_ENV, DEFAULT_PROFILE_DIR)) / f"{safe}.ncu-rep"


def _metrics_with(extra: Sequence[str] | None) -> tuple[str, ...]:
    return tuple(dict.fromkeys((*EXTRA_METRICS, *(extra or ()))))


def check_implementation_request(name: str, shape: dict, dtype: str | None):
    """(implementation, op spec, clean shape, dtype) or a one-line KernelabError."""
    from kernelab.spec import registry
    from kernelab.spec.reference import get_op

    impl = registry.get(name)
    op = get_op(impl.op)
    clean = op.validate(shape)
    dtype = dtype or impl.dtypes[0]
    if dtype not in impl.dtypes:
        raise KernelabError(
            f"{name} does not take {dtype} inputs (it takes {', '.join(impl.dtypes)})"
        )
    op.check_dtype(dtype)
    return impl, op, clean, dtype


def run_implementation(
    name: str,
    shape: dict,
    dtype: str | None = None,
    *,
    metrics: Sequence[str] | None = None,
    sections: Sequence[str] | str = FOCUSED_SECTIONS,
    out_path=None,
    warmup: int = DEFAULT_WARMUP,
    timeout_s: float | None = None,
) -> ProfileRun:
    """Profile one launch of a registered implementation after `warmup` unprofiled ones."""
    impl, op, clean, dtype = check_implementation_request(name, shape, dtype)
    stem = "_".join([name, *(f"{k}{v}" for k, v in clean.items()), dtype])
    out = ncu.report_path(out_path) if out_path else default_report_path(stem)
    target = [
        sys.executable,
        "-m",
        "kernelab.profiling.runner",
        name,
        "--shape",
        json.dumps(clean),
        "--dtype",
        dtype,
        "--warmup",
        str(warmup),
        "--range",
        PROFILE_RANGE,
    ]
    report, command, _ = ncu.run_ncu(
        target,
        out_path=out,
        sections=sections,
        metrics=_metrics_with(metrics),
        nvtx_range=PROFILE_RANGE + "/",  # a push/pop range: ncu wants the trailing slash
        launch_count=None,  # every kernel inside the range
        timeout_s=timeout_s,
    )
    return ProfileRun(
        report_path=report,
        command=command,
        kernels=load_report(report),
        implementation=name,
        op=impl.op,
        shape=clean,
        dtype=dtype,
        predicted=op.cost(clean, dtype),
    )


def profile_implementation(
    name: str, shape: dict, dtype: str, *, metrics: Sequence[str] | None = None
) -> KernelProfile:
    """The profile of a registered implementation's main kernel at `shape` and `dtype`
    (for `kernelab ladder sgemm --profile`). `metrics` are added to kernelab's own."""
    return run_implementation(name, shape, dtype, metrics=metrics).main_kernel()


def run_command(
    target_cmd: Sequence[str],
    *,
    kernel_regex: str | None = None,
    nvtx_range: str | None = None,
    launch_skip: int = 0,
    launch_count: int | None = 1,
    sections: Sequence[str] | str = FOCUSED_SECTIONS,
    metrics: Sequence[str] | None = None,
    out_path=None,
    timeout_s: float | None = None,
) -> ProfileRun:
    """Profile the kernels of any command that match the filters."""
    target = [str(part) for part in target_cmd]
    if not target:
        raise KernelabError("nothing to profile: give a command after '--'")
    out = ncu.report_path(out_path) if out_path else default_report_path(Path(target[-1]).stem)
    options = dict(
        out_path=out,
        kernel_regex=kernel_regex,
        nvtx_range=nvtx_range,
        launch_skip=launch_skip,
        launch_count=launch_count,
        sections=sections,
        metrics=_metrics_with(metrics),
    )
    report, command, _ = ncu.run_ncu(target, timeout_s=timeout_s, **options)
    return ProfileRun(
        report_path=report,
        command=command,
        kernels=load_report(report),
    )
