"""`kernelab compare OLD NEW`: two record files side by side, FAST / SLOW / SAME within the noise.

Works anywhere: it reads record files, .json or .json.xz (from `kernelab bench --out`, the
cache, or benchmarks/results/<card>/), and touches no GPU. A file with no records, or a
record whose median, noise or samples are not usable numbers (0, null, a string, NaN) is
refused with one line naming the file and the record, before any arithmetic on it. Pairs
measured on different GPUs are compared with a one-line warning. Exit status: 0, or 1 with
--fail-on-slow when a pair is SLOW, for CI.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated

import typer

from kernelab.output import JsonOption, emit, note

COLOURS = {"FAST": "green", "SLOW": "red", "SAME": "dim"}


def shape_text(shape: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in shape.items())


COLUMNS = ("op", "implementation", "shape", "dtype", "mode", "old ms", "new ms", "change",
           "noise", "")  # fmt: skip
# On a terminal too narrow for every column: what a change is judged by (the op follows from
# the implementation; a line under the table names the mode when the pairs share one).
NARROW_COLUMNS = ("implementation", "shape", "dtype", "old ms", "new ms", "change", "noise", "")


def _cells(c: dict) -> dict:
    colour = COLOURS[c["label"]]
    return {
        "op": c["op"],
        "implementation": c["implementation"],
        "shape": shape_text(c["shape"]),
        "dtype": c["dtype"],
        "mode": c["mode"],
        "old ms": f"{c['old_ms']:.4f}",
        "new ms": f"{c['new_ms']:.4f}",
        "change": f"{c['change_pct']:+.1f} %",
        "noise": f"±{c['noise_pct']:.1f} %",
        "": f"[{colour}]{c['label']}[/{colour}]",
    }


def _table(result: dict, columns, *, title: str, narrow: bool):
    from rich import box

    from kernelab.output import Table

    # narrow: no edges and one space between columns, as `kernelab gpus` draws its catalog
    options = {"box": box.SIMPLE_HEAD, "show_edge": False, "pad_edge": False,
               "collapse_padding": True} if narrow else {}  # fmt: skip
    table = Table(title=title, **options)
    for column in columns:
        right = "ms" in column or column in ("change", "noise")
        # a figure never wraps; the names and the shape may, at their spaces
        table.add_column(column, justify="right" if right else "left",
                         no_wrap=column not in ("implementation", "shape"))  # fmt: skip
    for c in result["comparisons"]:
        cells = _cells(c)
        table.add_row(*(cells[column] for column in columns))
    return table


def _render(result: dict):
    def render(console) -> None:
        title = f"{result['old']} -> {result['new']}"
        table = _table(result, COLUMNS, title=title, narrow=False)
        if console.is_terminal and table.widths(console).minimum > console.width:
            modes = sorted({c["mode"] for c in result["comparisons"]})
            console.print(_table(result, NARROW_COLUMNS, title=title, narrow=True))
            hidden = (f"all {modes[0]} timings; the op column" if len(modes) == 1
                      else "the op and mode columns")  # fmt: skip
            console.print(f"{hidden} on a wider terminal, through a pipe, or with --json",
                          style="dim", highlight=False)  # fmt: skip
        else:
            console.print(table)
        counts = result["counts"]
        console.print(
            f"FAST {counts['FAST']}  SLOW {counts['SLOW']}  SAME {counts['SAME']}   ({result['rule']})"
        )

    return render


def _number(value, *, positive: bool) -> float | None:
    """`value` as a float when it is a finite number (positive, or non-negative), else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    if not math.isfinite(value) or value < 0 or (positive and value == 0):
        return None
    return value


def check_numbers(records, path: Path) -> None:
    """A one-line KernelabError for the first record whose median (ms) or noise cannot be
    compared: the median must be a positive number, the noise (IQR / median) a non-negative
    one or absent, and the shape a JSON object."""
    from kernelab.errors import KernelabError

    for index, record in enumerate(records):
        where = f"{path}: record {index} ({record.op} {record.implementation})"
        median = record.stats.get("median")
        if _number(median, positive=True) is None:
            raise KernelabError(
                f"{where}: stats.median is {median!r}; it must be a positive number of ms"
            )
        noise = record.stats.get("rel_noise", 0.0)
        if _number(noise, positive=False) is None:
            raise KernelabError(
                f"{where}: stats.rel_noise is {noise!r}; it must be a number >= 0, or absent"
            )
        if not isinstance(record.shape, dict):
            raise KernelabError(f"{where}: shape is {record.shape!r}; it must be a JSON object")
        # Only the median is compared, but samples that are there must be timings: a zero, a
        # NaN or a string among them says the median beside them is not to be trusted either.
        samples = record.samples_ms
        if samples is None:
            continue
        if not isinstance(samples, list):
            raise KernelabError(f"{where}: samples_ms is {samples!r}; it must be a list of ms")
        bad = next(((i, v) for i, v in enumerate(samples) if _number(v, positive=True) is None),
                   None)  # fmt: skip
        if bad is not None:
            raise KernelabError(f"{where}: samples_ms[{bad[0]}] is {bad[1]!r}; every sample "
                                "must be a positive number of ms")  # fmt: skip


def read_record_file(path: Path):
    """The records in `path`, refusing a folder or an unreadable path in one line."""
    from kernelab.errors import KernelabError
    from kernelab.harness.records import load_records

    if path.is_dir():
        raise KernelabError(f"{path} is a folder; give a record file (.json or .json.xz)")
    try:
        records = load_records(path)
    except OSError as exc:
        raise KernelabError(f"cannot read {path}: {exc.strerror or exc}") from None
    if not records:
        raise KernelabError(f"{path} holds no records; there is nothing to compare")
    check_numbers(records, path)
    return records


def gpus_differ(comparisons) -> str:
    """One line when any pair was measured on two different GPUs (a change that is the card's
    as much as the code's), else "". A side whose GPU is unknown is not counted."""
    mixed = [c for c in comparisons if c.old_gpu and c.new_gpu and c.old_gpu != c.new_gpu]
    if not mixed:
        return ""
    olds = sorted({c.old_gpu for c in mixed})
    news = sorted({c.new_gpu for c in mixed})
    return (f"{len(mixed)} of {len(comparisons)} pairs were measured on different GPUs "
            f"({', '.join(olds)} in the old file, {', '.join(news)} in the new): their change "
            "is the GPU's as much as the code's")  # fmt: skip


def register(app: typer.Typer) -> None:
    @app.command()
    def compare(
        old: Annotated[Path, typer.Argument(help="The earlier record file (.json or .json.xz).")],
        new: Annotated[Path, typer.Argument(help="The later record file (.json or .json.xz).")],
        fail_on_slow: Annotated[
            bool,
            typer.Option(
                "--fail-on-slow",
                help="Exit 1 when any pair is SLOW (for CI); the output is the same.",
            ),
        ] = False,
        as_json: JsonOption = False,
    ) -> None:
        """Compare two record files: FAST / SLOW / SAME, with the noise taken into account.

        Exit status: 0; 1 with --fail-on-slow when at least one pair is SLOW; 2 for a missing,
        empty or malformed file (a median of 0, null or a string is malformed, and so is a
        sample that is not a positive number). Pairs measured on different GPUs are compared
        with a warning, on stderr and in --json as gpus_differ.
        """
        from kernelab.harness.records import MIN_NOISE, compare_records, unmatched

        before, after = read_record_file(old), read_record_file(new)
        comparisons = compare_records(before, after)
        only_old, only_new = unmatched(before, after)
        if not comparisons:
            note(
                "no record in the two files measures the same thing (op, implementation, shape, dtype, mode)"
            )
        for label, records in (
            ("only in the old file", only_old),
            ("only in the new file", only_new),
        ):
            if records:
                note(f"{len(records)} record(s) {label}")
        differ = gpus_differ(comparisons)
        if differ:
            note(f"warning: {differ}")
        result = {
            "old": str(old),
            "new": str(new),
            "rule": (
                f"SAME when |new - old| <= max(noise old, noise new, {MIN_NOISE:.0%}) of old; "
                "noise = IQR / median of a run's samples"
            ),
            "counts": {label: sum(c.label == label for c in comparisons) for label in COLOURS},
            "comparisons": [c.to_dict() for c in comparisons],
            "only_old": [r.key() for r in only_old],
            "only_new": [r.key() for r in only_new],
            "gpus_differ": differ,
        }
        emit(result, as_json, _render(result))
        if fail_on_slow and result["counts"]["SLOW"]:
            raise typer.Exit(1)
