"""Where kernelab keeps things on this machine and in the repository."""

from __future__ import annotations

from pathlib import Path


def repo_root() -> Path | None:
    """The source checkout this kernelab runs from, when it runs from one (editable install)."""
    here = Path(__file__).resolve()
    for parent in here.parents:
        if (parent / "pyproject.toml").exists() and (parent / "benchmarks").exists():
            return parent
    return None


def committed_results_dir(gpu_id: str = "h200") -> Path | None:
    root = repo_root()
    if root is None:
        return None
    path = root / "benchmarks" / "results" / gpu_id
    return path if path.exists() else None
