"""`kernelab compare OLD NEW`: two record files side by side, FAST / SLOW / SAME within the noise.

Works anywhere: it reads record files, .json or .json.xz (from `kernelab bench --out`, the
cache, or benchmarks/results/<card>/), and touches no GPU. A record whose median or noise is not a usable number
(0, null, a string, NaN) is refused with one line naming the file and the record, before any
arithmetic on it. Exit status: 0, or 1 with --fail-on-slow when a pair is SLOW, for CI.
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


def _render(result: dict):
    from kernelab.output import Table

    def render(console) -> None:
        table = Table(title=f"{result['old']} -> {result['new']}")
        for column in (
            "op",
            "implementation",
            "shape",
            "dtype",
            "mode",
            "old ms",
            "new ms",
            "change",
            "noise",
            "",
        ):
            table.add_column(
                column,
                justify="right" if "ms" in column or column in ("change", "noise") else "left",
            )
        for c in result["comparisons"]:
            colour = COLOURS[c["label"]]
            table.add_row(
                c["op"],
                c["implementation"],
                shape_text(c["shape"]),
                c["dtype"],
                c["mode"],
                f"{c['old_ms']:.4f}",
                f"{c['new_ms']:.4f}",
                f"{c['change_pct']:+.1f} %",
                f"±{c['noise_pct']:.1f} %",
                f"[{colour}]{c['label']}[/{colour}]",
            )
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
        if noise is not None and _number(noise, positive=False) is None:
            raise KernelabError(f"{where}: stats.rel_noise is {noise!r}; it must be a number >= 0")
        if not isinstance(record.shape, dict):
            raise KernelabError(f"{where}: shape is {record.shape!r}; it must be a JSON object")


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
    check_numbers(records, path)
    return records


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

        Exit status: 0; 1 with --fail-on-slow when at least one pair is SLOW; 2 for a missing
        or malformed file (a median of 0, null or a string is malformed).
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
        }
        emit(result, as_json, _render(result))
        if fail_on_slow and result["counts"]["SLOW"]:
            raise typer.Exit(1)
