"""The one shape every problem takes, whichever community format it came in: its cases, its
input generator, its reference and how to load a solution (kernelab.evaluate.formats reads the
formats into it). Also the helpers both format loaders share: scaling sizes, importing a file
as a module, one line for an exception.

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
    # outputs' worth the checker holds beside its own reference run, for the memory plan
    # (footprint.SetSize.checker): an allclose that makes differences and masks of the output
    checker_outputs: int = 0
    declared_cost: Callable[[Any], dict] | None = None  # data -> {"flops", "bytes", ...}
    notes: list[str] = field(default_factory=list)
    scale: float = 1.0  # the --scale it was loaded with (its workers load it the same way)

    def timing_cases(self) -> list[Case]:
        return self.benchmarks or self.tests


def scaled(value: int, scale: float) -> int:
    """A size shrunk by `scale`, never below SMALLEST_SCALED; smaller integers as they are.
    The floor keeps what a problem's small constants ask of its sizes: channels divisible by
    a group count, an image no smaller than its kernel (a 64-wide image at --scale 0.01 would
    be 1 wide, narrower than a 3-wide kernel)."""
    if scale == 1.0 or isinstance(value, bool) or value < SMALLEST_SCALED:
        return value
    return max(SMALLEST_SCALED, round(value * scale))


def check_scale(scale: float) -> float:
    if not isinstance(scale, (int, float)) or not 0 < scale <= 1:
        raise KernelabError(f"--scale must be in (0, 1], got {scale}")
    return float(scale)


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
