"""`kernelab gpus` (the catalog) and `kernelab gpu NAME` (one chip, its ridges and hierarchy)."""

from __future__ import annotations

import dataclasses
import math
from typing import Annotated

import typer
from rich import box
from rich.console import Console

from kernelab.output import JsonOption, Table, emit

TABLE_DTYPES = ("fp32", "tf32", "bf16", "fp8")


def spec_to_dict(spec) -> dict:
    """Every field of a GPUSpec as plain data, plus its ridge point per dtype (FLOP/byte)."""
    from kernelab.output import to_jsonable

    data = {f.name: to_jsonable(getattr(spec, f.name)) for f in dataclasses.fields(spec)}
    data["ridges"] = spec.ridges()
    return data


def _number(value: float | None, digits: int = 0) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    return f"{value:,.{digits}f}"


def _size(num_bytes: int) -> str:
    if num_bytes >= 10**9:
        return f"{num_bytes / 1e9:,.0f} GB"
    if num_bytes >= 2**20:
        return f"{num_bytes / 2**20:,.1f} MiB"
    return f"{num_bytes / 2**10:,.0f} KiB"


# The catalog's columns; on a terminal too narrow for all of them, only the first few
# the roofline needs (the rest stay in --json and `kernelab gpu NAME`).
NARROW_COLUMNS = ("id", "arch", "GB/s", "bf16", "bf16 ridge")


def _catalog_rows(specs) -> tuple[list[str], list[list[str]]]:
    columns = ["id", "name", "arch", "SMs", "boost MHz", "mem GB", "GB/s", "L2 MiB",
               *TABLE_DTYPES, "bf16 ridge", "TDP W"]  # fmt: skip
    rows = []
    for spec in specs:
        ridges = spec.ridges()
        rows.append(
            [
                spec.id,
                spec.name,
                spec.architecture,
                str(spec.sm_count),
                _number(spec.boost_clock_mhz),
                _number(spec.memory_gb),
                _number(spec.memory_bandwidth_gbps),
                _number(spec.l2_kib / 1024),
                *(_number(spec.peak_tflops.get(d), 1) for d in TABLE_DTYPES),
                _number(ridges.get("bf16"), 0),
                _number(spec.tdp_w),
            ]
        )
    return columns, rows


def _catalog_table(columns: list[str], rows: list[list[str]]) -> Table:
    table = Table(
        title="GPU catalog: dense peak TFLOP/s; ridge in FLOP/byte (kernelab gpu NAME for sources)",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
    )
    for column in columns:
        left = column in ("id", "name", "arch")
        table.add_column(column, justify="left" if left else "right", no_wrap=column != "name")
    for row in rows:
        table.add_row(*row)
    return table


def _render_catalog(console: Console, specs) -> None:
    columns, rows = _catalog_rows(specs)
    table = _catalog_table(columns, rows)
    if console.is_terminal and table.widths(console).minimum > console.width:
        keep = [columns.index(c) for c in NARROW_COLUMNS]
        table = _catalog_table([columns[i] for i in keep], [[r[i] for i in keep] for r in rows])
        console.print(table)
        console.print(
            f"{len(columns) - len(keep)} more columns on a wider terminal, "
            "through a pipe, or with --json",
            style="dim",
        )
        return
    console.print(table)


def _render_one(console: Console, spec, hierarchy, detected) -> None:
    from kernelab.hardware.catalog import source_document

    if detected is not None:
        console.print(
            f"detected: [bold]{detected.name}[/] (GPU {detected.index}, via {detected.source})"
        )
    console.print(
        f"[bold]{spec.id}[/]  {spec.name}  ({spec.vendor}, {spec.architecture}, "
        f"{spec.compute_capability})"
    )
    if spec.notes:
        console.print(spec.notes, style="dim")

    figures = Table(title="figures")
    figures.add_column("figure")
    figures.add_column("value", justify="right")
    figures.add_column("source", overflow="fold")
    rows = [
        ("sm_count", spec.sm_count, ""),
        ("boost_clock_mhz", spec.boost_clock_mhz, "MHz"),
        ("memory_gb", spec.memory_gb, "GB"),
        ("memory_bandwidth_gbps", spec.memory_bandwidth_gbps, "GB/s"),
        ("l2_kib", spec.l2_kib, "KiB"),
        ("smem_per_sm_kib", spec.smem_per_sm_kib, "KiB"),
        ("smem_per_block_kib", spec.smem_per_block_kib, "KiB"),
        ("l1_per_sm_kib", spec.l1_per_sm_kib, "KiB"),
        ("registers_per_sm", spec.registers_per_sm, ""),
        ("max_threads_per_sm", spec.max_threads_per_sm, ""),
        ("max_blocks_per_sm", spec.max_blocks_per_sm, ""),
        ("warp_size", spec.warp_size, ""),
        ("tdp_w", spec.tdp_w, "W"),
    ]
    for dtype, rate in spec.peak_tflops.items():
        rows.append(
            (f"peak_tflops.{dtype}", rate, "TOPS" if dtype.startswith("int") else "TFLOP/s")
        )
    # The clock a peak is quoted at, where it is not the boost clock (Hopper's tensor rates).
    for dtype, mhz in spec.peak_clock_mhz.items():
        rows.append((f"peak_clock_mhz.{dtype}", mhz, "MHz"))
    for key, value, unit in rows:
        shown = _number(value, 1 if isinstance(value, float) and value % 1 else 0)
        figures.add_row(key, f"{shown} {unit}".strip(), source_document(spec.source_of(key)))
    console.print(figures)

    ridges = spec.ridges()
    if ridges:
        console.print(
            "ridge (FLOP/byte): "
            + ", ".join(f"{dtype} {value:,.1f}" for dtype, value in ridges.items())
        )

    console.print("\n[bold]memory hierarchy[/] (outermost first)")
    for position, level in enumerate(hierarchy):
        size = _size(level.size_bytes)
        if level.per_unit_bytes is not None:
            size = f"{_size(level.per_unit_bytes)} each, {size} in all"
        rate = f"{level.bandwidth_gbps:,.0f} GB/s" if level.bandwidth_gbps else "rate: no source"
        console.print(f"  [bold]{level.name}[/]  {size}  {rate}")
        console.print(f"      [dim]{level.source}[/]")
        if position < len(hierarchy) - 1:
            console.print("      │")


def register(app: typer.Typer) -> None:
    @app.command("gpus")
    def gpus(as_json: JsonOption = False) -> None:
        """The GPU catalog: SMs, clocks, memory, dense peak rates and bf16 ridge per chip."""
        from kernelab.hardware.catalog import CATALOG

        specs = list(CATALOG.values())
        emit(
            [spec_to_dict(spec) for spec in specs],
            as_json,
            lambda console: _render_catalog(console, specs),
        )

    @app.command("gpu")
    def gpu(
        name: Annotated[str, typer.Argument(help="A catalog id (kernelab gpus), or 'auto'.")],
        as_json: JsonOption = False,
    ) -> None:
        """One GPU: its numbers with sources, ridge per dtype and memory hierarchy."""
        from kernelab.hardware.catalog import SOURCES, get_gpu
        from kernelab.hardware.hierarchy import memory_hierarchy

        detected = None
        if name.strip().lower() == "auto":
            from kernelab.errors import NoGPUError
            from kernelab.hardware.detect import require_gpu

            try:
                detected = require_gpu()
            except NoGPUError:
                raise NoGPUError(
                    "no CUDA GPU found on this machine; name one: kernelab gpu NAME "
                    "(kernelab gpus lists them)"
                ) from None
            spec = detected.spec
        else:
            spec = get_gpu(name)
        hierarchy = memory_hierarchy(spec)
        data = spec_to_dict(spec)
        data["hierarchy"] = [level.to_dict() for level in hierarchy]
        used = {source.partition(" (")[0] for source in spec.sources.values()}
        data["documents"] = {key: SOURCES[key] for key in sorted(used) if key in SOURCES}
        if detected is not None:
            data["detected"] = detected.to_dict()
        emit(data, as_json, lambda console: _render_one(console, spec, hierarchy, detected))
