"""The command-line options several commands share, declared once: the catalog GPU, the output
file, the timing budget. Each command keeps its own help text where the option means
something particular there (records, a report, a trace)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from kernelab.hardware.detect import DEFAULT_GPU

GPU_HELP = f"Catalog id, or auto (default: this GPU if detected, else {DEFAULT_GPU})."

GpuOption = Annotated[str | None, typer.Option("--gpu", help=GPU_HELP)]


def out_file_option(help: str, *, metavar: str = "FILE", path: bool = False):
    """`--out FILE`, a str (or a Path with path=True) that errors.output_file checks."""
    return Annotated[Path | None if path else str | None,
                     typer.Option("--out", metavar=metavar, help=help)]  # fmt: skip


def max_time_option(per: str):
    """`--max-time S`: the seconds of timing spent on each `per`, at most."""
    return Annotated[float, typer.Option("--max-time", help=f"Seconds of timing per {per}, at most.")]
