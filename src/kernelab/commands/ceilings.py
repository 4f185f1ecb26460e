"""`kernelab ceilings`: this GPU's measured copy and read-only bandwidth and GEMM peaks against
its datasheet.

Shows the cached measurement of this device and driver when there is one (--refresh
measures again); measures and caches it otherwise.
"""

from __future__ import annotations

from typing import Annotated

import typer

from kernelab.output import JsonOption, emit, note


def _rate_text(rate: float | None, unit: str) -> str:
    if rate is None:
        return "-"
    return f"{rate / 1e12:,.2f} TB/s" if unit == "bytes/s" else f"{rate / 1e12:,.1f} TFLOP/s"


def _shape_text(shape: dict) -> str:
    if "bytes_per_buffer" in shape:
        return f"{shape['bytes_per_buffer'] / 1024**3:g} GiB copy"
    if "bytes_read" in shape:
        return f"{shape['bytes_read'] / 1024**3:g} GiB read"
    return "x".join(str(shape[k]) for k in ("m", "n", "k"))


_CEILING_LABELS = {"copy": "copy (read + write)", "read": "read only (reductions)"}


def render_measured(measured, cached_at: str | None):
    from kernelab.output import Table

    def render(console) -> None:
        title = f"{measured.gpu} ({measured.gpu_id or 'not in the catalog'}), driver {measured.driver or '?'}"
        table = Table(title=title)
        for column in (
            "ceiling",
            "best shape",
            "median ms",
            "measured",
            "datasheet",
            "% of datasheet",
        ):
            table.add_column(
                column, justify="left" if column in ("ceiling", "best shape") else "right"
            )
        for name, c in measured.ceilings.items():
            table.add_row(
                _CEILING_LABELS.get(name, f"{name} GEMM (cuBLAS)"),
                _shape_text(c.shape),
                f"{c.median_ms:.3f}",
                _rate_text(c.rate, c.unit),
                _rate_text(c.datasheet, c.unit),
                f"{100 * c.ratio:.1f} %" if c.ratio else "-",
            )
        console.print(table)
        where = f"cached {cached_at}" if cached_at else "measured now"
        console.print(f"{where}, {measured.timestamp}{' (quick)' if measured.quick else ''}")
        for warning in measured.warnings:
            console.print(f"[yellow]warning:[/yellow] {warning}")

    return render


def register(app: typer.Typer) -> None:
    @app.command()
    def ceilings(
        quick: Annotated[
            bool, typer.Option("--quick", help="Smaller sizes, shorter runs.")
        ] = False,
        refresh: Annotated[bool, typer.Option("--refresh", help="Measure even if cached.")] = False,
        as_json: JsonOption = False,
    ) -> None:
        """Measure this GPU's real ceilings (copy bandwidth, cuBLAS GEMM peaks); cached."""
        from kernelab.harness.ceilings import (
            add_read_ceiling,
            cache_path,
            cached_for,
            measure_ceilings,
            save_measured,
            this_gpu,
        )

        identity = this_gpu("kernelab ceilings")
        path = cache_path(identity)
        measured = None if refresh else cached_for(identity)
        from_cache = measured is not None
        from kernelab.probes.bandwidth import hbm_read

        if measured is None:
            measured = measure_ceilings(quick=quick, read_probe=hbm_read)
            save_measured(measured, path)
            note(f"saved to {path}")
        elif "read" not in measured.ceilings:  # cached before the read ceiling existed
            add_read_ceiling(measured, hbm_read, quick=quick)
            save_measured(measured, path)
            note(f"read ceiling added to {path}")
        document = {**measured.to_dict(), "cache_path": str(path), "from_cache": from_cache}
        emit(document, as_json, render_measured(measured, str(path) if from_cache else None))
