"""`kernelab compare OLD NEW`: two record files side by side, FAST / SLOW / SAME within the noise.

Works anywhere: it reads JSON records (from `kernelab bench --out`, the cache or
benchmarks/results) and touches no GPU.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from kernelab.output import JsonOption, emit, note

COLOURS = {"FAST": "green", "SLOW": "red", "SAME": "dim"}


def shape_text(shape: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in shape.items())


def _render(result: dict):
    from rich.table import Table

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


def register(app: typer.Typer) -> None:
    @app.command()
    def compare(
        old: Annotated[Path, typer.Argument(help="The earlier record file (JSON).")],
        new: Annotated[Path, typer.Argument(help="The later record file (JSON).")],
        as_json: JsonOption = False,
    ) -> None:
        """Compare two record files: FAST / SLOW / SAME, with the noise taken into account."""
        from kernelab.harness.records import MIN_NOISE, compare_records, load_records, unmatched

        before, after = load_records(old), load_records(new)
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
