"""What the ladder commands share: whether a GPU is here, number cells, the verdict colours
and a table that fits the terminal (kernelab.commands.ladder and ladder_primitives)."""

from __future__ import annotations

from pathlib import Path

from kernelab.output import note


def has_gpu() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def gpu_at(result: dict, size) -> str | None:
    """The GPU a size was timed on: the one its spread task ran on, else the run's GPU."""
    for placed in result.get("placed") or ():
        if placed["size"] == size and (placed.get("ran_on") or {}).get("name"):
            return placed["ran_on"]["name"]
    return result.get("gpu")


def fmt(value, spec: str) -> str:
    return "-" if value is None else format(value, spec)


_SI = ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))


def num(value) -> str:
    """A counter or ratio in 3 significant digits, from 1,000 up with an SI suffix (1.23 G)."""
    if value is None:
        return "-"
    if abs(value) >= 999.5:
        scale, suffix = next((sc, sx) for sc, sx in _SI if abs(value) >= 0.9995 * sc)
        return f"{value / scale:.3g} {suffix}"
    return f"{value:.3g}"


VERDICT_STYLE = {
    "PASS": "green",
    "FAIL": "red",
    "MISSING": "yellow",
    "NO-PREV": "yellow",
    "INCOMPLETE": "yellow",
}


def print_fitted(console, title: str, columns, rows, *, left=(), drop=("technique",)) -> None:
    """One table of `columns` and `rows` (lists of cells). On a terminal too narrow for the
    whole table the `drop` columns go, and a dim line says where they are; through a pipe or
    into a file the table is printed whole."""
    from kernelab.output import Table

    def build(keep: list[str]) -> Table:
        table = Table(title=title)
        for column in keep:
            table.add_column(column, justify="left" if column in left else "right")
        for row in rows:
            table.add_row(*(row[columns.index(column)] for column in keep))
        return table

    table = build(list(columns))
    dropped = [c for c in columns if c in drop]
    if dropped and console.is_terminal and table.widths(console).minimum > console.width:
        table = build([c for c in columns if c not in drop])
        console.print(table)
        console.print(
            f"{', '.join(dropped)}: on a wider terminal, through a pipe, or with --json",
            style="dim",
        )
        return
    console.print(table)


def nothing_to_write(out: Path | None, plot: Path | None) -> None:
    given = [option for option, path in (("--out", out), ("--plot", plot)) if path is not None]
    if given:
        note(f"{' and '.join(given)}: nothing written (no timings without a GPU)")
