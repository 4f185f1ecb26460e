"""KernelBench fixture problems rewritten to other sizes, for the judge's memory tests."""

from __future__ import annotations

from pathlib import Path

KERNELBENCH = Path(__file__).resolve().parent / "fixtures" / "eval" / "kernelbench"


def sized_softmax(folder: Path, rows: int, cols: int) -> Path:
    """The softmax fixture problem at rows x cols, written as softmax_<rows>x<cols>.py."""
    problem = folder / f"softmax_{rows}x{cols}.py"
    problem.write_text(
        (KERNELBENCH / "softmax.py")
        .read_text()
        .replace("batch_size = 2048", f"batch_size = {rows}")
        .replace("dim = 4093  # not a multiple of any tile", f"dim = {cols}")
    )
    return problem
