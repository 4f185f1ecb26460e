"""`kernelab hierarchy`: where the data lives on this GPU, measured.

Measures the latency (pointer chasing, in SM cycles and ns) and the bandwidth of HBM, L2,
L1 / shared memory and the host link, prints them beside the catalog's sizes and datasheet
rates and beside Luo et al.'s Hopper study, and saves the record in the cache, where the
pipeline lens picks up the latencies. `--import FILE` renders a stored record, GPU or not.
"""

from __future__ import annotations

from typing import Annotated

import typer

from kernelab.commands.options import out_file_option
from kernelab.errors import KernelabError, input_file, output_file
from kernelab.output import JsonOption, emit, note


def _size(n: int | None) -> str:
    if n is None:
        return "-"
    for unit, scale in (("GB", 1e9), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale * (10 if unit == "GB" else 1):
            return f"{n / scale:,.0f} {unit}" if unit == "GB" else f"{n / scale:,.1f} {unit}"
    return f"{n} B"


def _rate(gbps: float | None) -> str:
    if gbps is None:
        return "-"
    return f"{gbps / 1e3:,.2f} TB/s" if gbps >= 1e3 else f"{gbps:,.1f} GB/s"


def _number(value: float | None, digits: int = 1) -> str:
    if value is None:
        return "-"
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:,.{digits}f}"


# The table's columns after "level", by what they show; on a terminal too narrow for one table
# the two groups print as two.
CELLS = {
    "size": lambda row: _size(row["size_bytes"]),
    "per SM": lambda row: _size(row["per_sm_bytes"]),
    "cycles": lambda row: _number(row["latency_cycles"]),
    "ns": lambda row: _number(row["latency_ns"]),
    "H800 cycles": lambda row: _number(row["luo_h800_cycles"]),
    "bandwidth": lambda row: _rate(row["bandwidth_gbps"]),
    "datasheet": lambda row: _rate(row["datasheet_gbps"]),
    "%": lambda row: _number(row["pct_of_datasheet"], 0),
}
LATENCY_COLUMNS = ("size", "per SM", "cycles", "ns", "H800 cycles")
BANDWIDTH_COLUMNS = ("bandwidth", "datasheet", "%")


def render_record(record, spec, path: str | None):
    from rich import box

    from kernelab.lenses.hierarchy import LUO_2024, comparison, hierarchy_rows
    from kernelab.output import Table

    rows = hierarchy_rows(record, spec)
    # a record may name no GPU or no time (null in the file): said as unknown, never "None"
    gpu = record.gpu or "unknown GPU"
    title = f"{gpu} ({record.gpu_id or 'not in the catalog'}): where the data lives"

    def cells(row, columns) -> list[str]:
        return [("  " if row["variant"] else "") + row["level"]] + [
            CELLS[column](row) for column in columns
        ]

    def table_of(columns, title, keep=lambda row: True):
        table = Table(title=title, box=box.SIMPLE_HEAD)
        for column in ("level", *columns):
            left = column == "level"
            table.add_column(column, justify="left" if left else "right", no_wrap=left)
        for row in rows:
            if keep(row):
                table.add_row(*cells(row, columns))
        return table

    def render(console) -> None:
        whole = table_of(LATENCY_COLUMNS + BANDWIDTH_COLUMNS, title)
        if not console.is_terminal or whole.widths(console).minimum <= console.width:
            console.print(whole)
        else:  # a narrow terminal: latency and bandwidth as two tables, each row where it has data
            console.print(table_of(LATENCY_COLUMNS, title, lambda r: r["latency_cycles"] is not None
                                   or r["size_bytes"] is not None))  # fmt: skip
            console.print(table_of(BANDWIDTH_COLUMNS, "bandwidth",
                                   lambda r: r["bandwidth_gbps"] is not None))  # fmt: skip
        console.print(
            "cycles, ns: one dependent load (pointer chase); L1 and shared memory are one "
            "array per SM; host link: pinned memory"
        )
        clocks = {m.level: m.clock_mhz for m in record.latencies.values()}
        if clocks:
            console.print(
                "SM clock during the chases (cycles / ns): "
                + ", ".join(f"{level} {mhz:,.0f} MHz" for level, mhz in clocks.items())
            )
        console.print(f"\nagainst {LUO_2024['citation']} ({LUO_2024['board']}):")
        for item in comparison(record):
            console.print(
                f"  {item['level']}: {item['ours_cycles']:,.1f} cycles here, "
                f"{item['luo_h800_cycles']:,.1f} there ({item['difference_pct']:+.0f} %): "
                f"{item['why']}",
                highlight=False,
            )
        where = f"record: {path}" if path else ""
        when = record.timestamp or "at an unknown time"
        console.print(f"\nmeasured {when}{' (quick)' if record.quick else ''}. {where}")
        for warning in record.warnings:
            console.print(f"[yellow]warning:[/yellow] {warning}")

    return render


def register(app: typer.Typer) -> None:
    @app.command()
    def hierarchy(
        quick: Annotated[
            bool, typer.Option("--quick", help="Shorter timings, 1 GiB copy buffers.")
        ] = False,
        import_file: Annotated[
            str | None,
            typer.Option(
                "--import",
                metavar="FILE",
                help="Render a stored hierarchy record instead of measuring.",
            ),
        ] = None,
        out: out_file_option("Also write the record to this file.") = None,
        as_json: JsonOption = False,
    ) -> None:
        """Measure latency and bandwidth of HBM, L2, L1/shared memory and the host link."""
        from kernelab.hardware.catalog import CATALOG
        from kernelab.lenses.hierarchy import (
            document,
            load_record,
            record_path,
            save_record,
        )

        import_path = input_file(import_file, "--import")
        if import_path is not None and out is not None:
            raise KernelabError("--out saves a new measurement; with --import there is none")
        if import_path is not None and quick:
            raise KernelabError("--quick shortens a new measurement; with --import there is none")
        out_path = output_file(out, "--out")
        if import_path is not None:
            record = load_record(import_path)
            path = import_path
        else:
            from kernelab.probes.hierarchy import measure_hierarchy

            record = measure_hierarchy(quick=quick)
            path = save_record(record, record_path(record.gpu_id or record.gpu, record.driver))
            note(f"saved to {path}")
            if out_path is not None:
                save_record(record, out_path)
                note(f"and to {out_path}")
        spec = CATALOG.get(record.gpu_id) if record.gpu_id else None
        emit(document(record, spec, path), as_json, render_record(record, spec, str(path)))
