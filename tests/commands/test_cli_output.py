"""How commands print for a person: whole tables and lines when piped, no "..." at 80 columns."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kernelab.output import Table, _Console

REPO = Path(__file__).resolve().parents[2]
HIERARCHY_RECORD = REPO / "benchmarks" / "results" / "h200" / "hierarchy.json"


def _piped(*argv: str) -> str:
    """The command's stdout through a pipe, with no COLUMNS to hint at a width."""
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    done = subprocess.run(
        [sys.executable, "-m", "kernelab.cli", *argv], capture_output=True, text=True, env=env
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def _terminal(width: int) -> tuple[_Console, io.StringIO]:
    buffer = io.StringIO()
    return _Console(file=buffer, force_terminal=True, width=width, color_system=None), buffer


def test_gpus_piped_has_every_column_and_name_whole():
    from kernelab.hardware.catalog import CATALOG

    text = _piped("gpus")
    assert "…" not in text
    assert "TDP W" in text and "bf16 ridge" in text
    for spec in CATALOG.values():
        assert spec.id in text


@pytest.mark.skipif(not HIERARCHY_RECORD.exists(), reason="needs the committed H200 record")
def test_hierarchy_import_piped_is_whole():
    text = _piped("hierarchy", "--import", str(HIERARCHY_RECORD))
    assert "…" not in text
    assert "H800 cycles" in text and "random order, TLB misses" in text


def test_gpus_on_an_80_column_terminal_keeps_whole_figures():
    from kernelab.commands.gpus import NARROW_COLUMNS, _render_catalog
    from kernelab.hardware.catalog import CATALOG

    console, buffer = _terminal(80)
    _render_catalog(console, list(CATALOG.values()))
    text = buffer.getvalue()
    assert "…" not in text
    assert all(len(line) <= 80 for line in text.splitlines())
    assert all(column in text for column in NARROW_COLUMNS)
    h200 = next(line for line in text.splitlines() if line.strip().startswith("h200 "))
    assert "4,800" in h200  # the bandwidth whole, not "4,8…"
    assert "more columns" in text


def test_a_table_wider_than_the_terminal_is_printed_whole():
    console, buffer = _terminal(40)
    table = Table()
    for header in ("implementation", "median ms", "bandwidth"):
        table.add_column(header, no_wrap=True)
    table.add_row("triton.softmax_flat", "0.012345", "4.06 TB/s")
    console.print(table)
    text = buffer.getvalue()
    assert "…" not in text
    assert "triton.softmax_flat" in text and "0.012345" in text and "4.06 TB/s" in text


def test_a_table_that_can_wrap_fits_the_terminal():
    console, buffer = _terminal(40)
    table = Table()
    table.add_column("what")
    table.add_column("ms", no_wrap=True)
    table.add_row("a long description that can wrap at its spaces", "1.25")
    console.print(table)
    lines = buffer.getvalue().splitlines()
    assert all(len(line) <= 40 for line in lines)
    assert "1.25" in buffer.getvalue() and "description" in buffer.getvalue()


def test_piped_lines_are_not_wrapped_at_80():
    console = _Console(file=io.StringIO())
    line = " ".join(["word"] * 40)
    console.print(line)
    assert console.file.getvalue() == line + "\n"


@pytest.mark.skipif(not HIERARCHY_RECORD.exists(), reason="needs the committed H200 record")
def test_hierarchy_on_an_80_column_terminal_splits_latency_from_bandwidth():
    from kernelab.commands.hierarchy import render_record
    from kernelab.hardware.catalog import get_gpu
    from kernelab.lenses.hierarchy import load_record

    record = load_record(HIERARCHY_RECORD)
    console, buffer = _terminal(80)
    render_record(record, get_gpu("h200"), str(HIERARCHY_RECORD))(console)
    text = buffer.getvalue()
    assert all(len(line) <= 80 for line in text.splitlines())
    assert "…" not in text
    tables = text.split("bandwidth    datasheet")
    assert len(tables) == 2  # the bandwidth table's header, once
    assert "H800" in tables[0] and "4.57 TB/s" in tables[1] and "683" in tables[0]
    wide, wide_buffer = _terminal(140)
    render_record(record, get_gpu("h200"), None)(wide)
    assert "H800 cycles    bandwidth" in wide_buffer.getvalue()  # room for one table


# --- brackets in data are text, not markup ---------------------------------------------------


def test_brackets_in_data_print_as_written_and_style_tags_still_style():
    console, buffer = _terminal(200)
    console.print("[red]FAIL[/] x[i] sdata[t] and sdata[t + s] f<[lambda() (instance 2)]> [/x]")
    table = Table(title="[0] k<[lambda() (instance 2)]>")
    table.add_column("cell")
    table.add_row("[green]ok[/] tile[t][c], a cell as wide as the title")
    console.print(table)
    text = buffer.getvalue()
    assert "FAIL x[i] sdata[t] and sdata[t + s] f<[lambda() (instance 2)]> [/x]" in text
    assert "[0] k<[lambda() (instance 2)]>" in text
    assert "ok tile[t][c]" in text
    assert "[red]" not in text and "[green]" not in text and "[/]" not in text


def test_profile_import_keeps_the_bracketed_part_of_a_kernel_name():
    report = REPO / "tests" / "fixtures" / "ncu" / "copy_bf16_fabric_raw.csv.xz"
    text = _piped("profile", "--import", str(report))
    assert "neg_kernel_cuda(TensorIteratorBase &)::[lambda() (instance 2)]::operator" in text


def test_drill_prose_keeps_its_indices():
    text = _piped("drill", "--seed", "2", "--answers", ";;;;;;")
    assert "lane t reads tile[t][c]" in text
