"""A script of benchmarks/ loaded as a module, for the tests of its CPU-testable parts."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def load_script(name: str):
    """benchmarks/<name>.py as a fresh module named <name>_script."""
    spec = importlib.util.spec_from_file_location(f"{name}_script", BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module
