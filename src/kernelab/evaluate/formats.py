"""One internal shape for a problem, whichever community format it came in.

KernelBench (a file with `class Model`, `get_inputs()`, `get_init_inputs()`) and GPU MODE
reference-kernels (a directory with reference.py, task.py, task.yml) both load into a
Problem: a seeded input generator, the reference computation, the problem's own checker
when it has one, the cases to run, and how to load a solution. `data` is whatever the
format passes to a solution: KernelBench a list of forward() inputs, GPU MODE its one
`data` object (often a tuple holding preallocated output buffers).

Scaling (`scale` below 1, for correctness on a CPU): every integer size of 16 or more shrinks
to round(size * scale), at least 1; smaller integers (dims, kernel sizes, counts) and seeds
stay. KernelBench sizes are the problem module's integer constants, GPU MODE sizes the
integer fields of each case.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernelab.errors import KernelabError

FORMATS = ("kernelbench", "gpumode")
SMALLEST_SCALED = 16


@dataclass(frozen=True)
class Case:
    label: str  # "m=256 n=128" or "default"
    params: dict  # the case's own fields (GPU MODE: generate_input's keyword arguments)
    seed: int | None  # the seed the case names (GPU MODE), None when it names none
    kind: str = "test"  # "test" or "benchmark"


@dataclass
class Problem:
    name: str
    format: str  # one of FORMATS
    path: Path
    device: Any  # torch.device the data lives on
    tests: list[Case]
    benchmarks: list[Case]
    generate: Callable[[Case, int], Any]  # (case, seed) -> data on `device`
    reference: Callable[[Any], Any]  # data -> output, as the problem computes it
    reference64: Callable[[Any], Any]  # float64 data -> output: the same, run in float64
    compile_reference: Callable[[], Callable[[Any], Any]]  # torch.compile of the reference
    load_solution: Callable[[Path], Callable[[Any], Any]]  # file -> data -> output
    checker: Callable[[Any, Any], tuple[bool, str]] | None = None  # the problem's own
    checker_name: str = ""
    declared_cost: Callable[[Any], dict] | None = None  # data -> {"flops", "bytes", ...}
    notes: list[str] = field(default_factory=list)
    scale: float = 1.0  # the --scale it was loaded with (its workers load it the same way)

    def timing_cases(self) -> list[Case]:
        return self.benchmarks or self.tests


def scaled(value: int, scale: float) -> int:
    """A size shrunk by `scale`; small integers (< SMALLEST_SCALED) as they are."""
    if scale == 1.0 or isinstance(value, bool) or value < SMALLEST_SCALED:
        return value
    return max(1, round(value * scale))


def check_scale(scale: float) -> float:
    if not isinstance(scale, (int, float)) or not 0 < scale <= 1:
        raise KernelabError(f"--scale must be in (0, 1], got {scale}")
    return float(scale)


def detect_format(path: str | Path) -> str:
    """'gpumode' for a directory with reference.py, 'kernelbench' for a file defining
    `class Model`; a one-line KernelabError for anything else."""
    path = Path(path)
    if not path.exists():
        raise KernelabError(f"no such problem: {path}")
    if path.is_dir():
        if (path / "reference.py").is_file():
            return "gpumode"
        raise KernelabError(
            f"{path} is a directory without reference.py: not a GPU MODE problem "
            "(a KernelBench problem is a .py file)"
        )
    if path.name == "reference.py" and (path.parent / "task.yml").is_file():
        return "gpumode"
    if path.suffix == ".py":
        text = path.read_text(errors="replace")
        if "class Model" in text and "get_inputs" in text:
            return "kernelbench"
        if "ref_kernel" in text and "generate_input" in text:
            return "gpumode"
    raise KernelabError(
        f"{path} is neither a KernelBench problem (a .py file with class Model and "
        "get_inputs) nor a GPU MODE problem (a directory with reference.py and task.yml)"
    )


def load_problem(path: str | Path, *, device, scale: float = 1.0) -> Problem:
    """Load the problem at `path` (format detected) with its data on `device`."""
    import torch

    scale = check_scale(scale)
    device = torch.device(device)
    kind = detect_format(path)
    path = Path(path)
    if kind == "kernelbench":
        from kernelab.evaluate.kernelbench import load_kernelbench

        problem = load_kernelbench(path, device=device, scale=scale)
    else:
        from kernelab.evaluate.gpumode import load_gpumode

        problem = load_gpumode(path if path.is_dir() else path.parent, device=device, scale=scale)
    problem.scale = scale
    return problem


def import_file(path: Path, module_name: str):
    """Execute a Python file as module `module_name` (registered in sys.modules, so that
    decorators that look their module up, like triton.jit's, work)."""
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        why = "not a Python file (.py)" if path.suffix != ".py" else "no loader for it"
        raise KernelabError(f"cannot import {path}: {why}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(module_name, None)
        raise
    return module


def describe_exception(exc: BaseException) -> str:
    """ "ValueError: bad shape" on one line, at most 300 characters."""
    text = " ".join(str(exc).split())
    line = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    return line if len(line) <= 300 else line[:297] + "..."
