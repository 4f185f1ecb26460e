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


def spread_options(what: str, unit: str):
    """`--gpus N`, `--ray-address ADDR`, `--resume` and `--tasks-dir DIR`: spreading `what`
    (a suite, a sweep's shapes) over GPUs through Ray (kernelab.spread), `unit` per task."""
    gpus = Annotated[int | None, typer.Option(
        "--gpus", help=f"Spread {what} over this many GPUs through Ray.")]
    ray_address = Annotated[str | None, typer.Option(
        "--ray-address", help=f"Spread {what} over this Ray cluster (HOST:PORT or auto).")]
    resume = Annotated[bool, typer.Option(
        "--resume", help=f"Only the {unit}s a cut-short spread run left.")]
    tasks_dir = Annotated[Path | None, typer.Option(
        "--tasks-dir", help=f"Where a spread run keeps its finished {unit}s (a cache folder "
        "named after the run and its settings by default).")]
    return gpus, ray_address, resume, tasks_dir
