"""The command-line options several commands share, declared once: the catalog GPU, the output
file, the timing budget, the spread options; and how their values are read: a size count
(one grammar for bench and every ladder) and a comma list. Each command keeps its own help
text where the option means something particular there (records, a report, a trace)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated

import typer

from kernelab.errors import KernelabError, output_file
from kernelab.hardware.detect import DEFAULT_GPU

GPU_HELP = f"Catalog id, or auto (default: this GPU if detected, else {DEFAULT_GPU})."

GpuOption = Annotated[str | None, typer.Option("--gpu", help=GPU_HELP)]


def out_file_option(help: str, *, metavar: str = "FILE", path: bool = False):
    """`--out FILE`, a str (or a Path with path=True) that errors.output_file checks."""
    return Annotated[Path | None if path else str | None,
                     typer.Option("--out", metavar=metavar, help=help)]  # fmt: skip


def max_time_option(per: str):
    """`--max-time S`: the seconds of timing spent on each `per`, at most."""
    return Annotated[
        float, typer.Option("--max-time", help=f"Seconds of timing per {per}, at most.")
    ]


def spread_options(what: str, unit: str):
    """`--gpus N`, `--ray-address ADDR`, `--resume` and `--tasks-dir DIR`: spreading `what`
    (a suite, a sweep's shapes) over GPUs through Ray (kernelab.spread), `unit` per task."""
    gpus = Annotated[
        int | None, typer.Option("--gpus", help=f"Spread {what} over this many GPUs through Ray.")
    ]
    ray_address = Annotated[
        str | None,
        typer.Option(
            "--ray-address", help=f"Spread {what} over this Ray cluster (HOST:PORT or auto)."
        ),
    ]
    resume = Annotated[
        bool, typer.Option("--resume", help=f"Only the {unit}s a cut-short spread run left.")
    ]
    # A str, not a Path: "" must reach errors.output_folder as "", not as the current folder.
    tasks_dir = Annotated[
        str | None,
        typer.Option(
            "--tasks-dir",
            help=f"Where a spread run keeps its finished {unit}s (a cache folder "
            "named after the run and its settings by default).",
        ),
    ]
    return gpus, ray_address, resume, tasks_dir


RECORD_SUFFIXES = (".json",)  # what --out writes: harness.records.save_records writes plain JSON


def record_file(value: str | None, option: str = "--out") -> Path | None:
    """The records file an option names, checked up front as errors.output_file checks any
    file (a folder named as one says so), then its name: records are written as plain JSON, so
    a .json name (a .json.xz one would be read back through lzma and fail)."""
    path = output_file(value, option)
    if path is not None and path.suffix.lower() not in RECORD_SUFFIXES:
        raise KernelabError(
            f"{option} writes .json files; '{value}' ends in {path.suffix or 'no suffix'}"
        )
    return path


# --- sizes: one grammar for `bench --sizes` and every ladder's --sizes -----------------------

COUNT_SUFFIXES = {"k": 1024, "m": 1024**2, "g": 1024**3}  # binary: "256M" is 256 * 2^20
COUNT_FORMS = "a positive integer, K/M/G = 2^10/2^20/2^30, or B^E"
COUNT_LIMIT_BITS = 63  # no count reaches 2^63: torch sizes and the kernels' indices are int64
_DIGITS = re.compile(r"[0-9]+")  # ASCII only: str.isdigit() also takes "²", which int() refuses
_MAX_DIGITS = 20  # past 2^63 already; bounds int() before it runs


def parse_count(text: str, *, form: str = "", below: int = 1 << COUNT_LIMIT_BITS,
                too_large: str = "") -> int:  # fmt: skip
    """ "4096", "256M", "1G" or "2^20" as a positive int below `below`; one KernelabError line
    otherwise: `form` (what the sizes look like) for a malformed or non-positive count, else
    "'x' is not a size (...)" or "sizes must be positive, ..."; `too_large` for one past
    `below`.

    B^E is bounded before it is computed: E * floor(log2 B) already past the limit means the
    power is too, so "3^99999999" is refused at once instead of evaluated."""
    too_large = too_large or f"sizes must be below 2^{COUNT_LIMIT_BITS}"

    def malformed(default: str) -> KernelabError:
        return KernelabError(f"{form}; got '{text}'" if form else default)

    cleaned = text.strip().lower().replace("_", "")
    base, caret, exponent = cleaned.partition("^")
    if caret:
        if not (_DIGITS.fullmatch(base) and _DIGITS.fullmatch(exponent)):
            raise malformed(f"'{text}' is not a size ({COUNT_FORMS})")
        if len(base) > _MAX_DIGITS or len(exponent) > _MAX_DIGITS:
            raise KernelabError(f"{too_large}; got '{text}'")
        b, e = int(base), int(exponent)
        if b >= 2 and e * (b.bit_length() - 1) > below.bit_length():
            raise KernelabError(f"{too_large}; got '{text}'")
        value = b**e if b else 0  # 0^E is no size, 0^0 included
    else:
        factor = 1
        if cleaned and cleaned[-1] in COUNT_SUFFIXES:
            factor, cleaned = COUNT_SUFFIXES[cleaned[-1]], cleaned[:-1]
        if not _DIGITS.fullmatch(cleaned):
            raise malformed(f"'{text}' is not a size ({COUNT_FORMS})")
        if len(cleaned) > _MAX_DIGITS:
            raise KernelabError(f"{too_large}; got '{text}'")
        value = int(cleaned) * factor
    if value <= 0:
        raise malformed(f"sizes must be positive, got '{text}'")
    if value >= below:
        raise KernelabError(f"{too_large}; got '{text}'")
    return value


# --- comma lists ---------------------------------------------------------------------------


def comma_items(text: str | None, option: str, example: str) -> list[str] | None:
    """The stripped items of a comma list (None stays None: the option's default). An empty
    value or an empty item ("1,,3", "1,") is one KernelabError line: a blank is a typo, not
    "the default" nor "nothing"."""
    if text is None:
        return None
    items = [item.strip() for item in text.split(",")]
    if not text.strip():
        raise KernelabError(f"{option} needs a value, not an empty string; e.g. {option} {example}")
    if not all(items):
        raise KernelabError(f"{option} '{text}' has an empty item; e.g. {option} {example}")
    return items
