"""One internal shape for a problem, whichever community format it came in.

KernelBench (a file with `class Model`, `get_inputs()`, `get_init_inputs()`) and GPU MODE
reference-kernels (a directory with reference.py, task.py, task.yml) both load into a
Problem (kernelab.evaluate.problem): a seeded input generator, the reference computation, the
problem's own checker when it has one, the cases to run, and how to load a solution. `data` is
whatever the format passes to a solution: KernelBench a list of forward() inputs, GPU MODE its
one `data` object (often a tuple holding preallocated output buffers).
"""

from __future__ import annotations

from pathlib import Path

from kernelab.errors import KernelabError
from kernelab.evaluate.gpumode import load_gpumode
from kernelab.evaluate.kernelbench import load_kernelbench
from kernelab.evaluate.problem import (  # noqa: F401  (the names callers import from here)
    FORMATS,
    Case,
    Problem,
    check_scale,
    describe_exception,
    import_file,
    scaled,
)


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
        problem = load_kernelbench(path, device=device, scale=scale)
    else:
        problem = load_gpumode(path if path.is_dir() else path.parent, device=device, scale=scale)
    problem.scale = scale
    return problem
