"""Nsight Systems as the timeline's source: `nsys stats` CSV exports, or an .nsys-rep.

    nsys stats --report cuda_gpu_trace --format csv --output run run.nsys-rep
        -> run_cuda_gpu_trace.csv: one row per kernel, copy and set, with start and duration:
           the full timeline (top kernels, busy time, idle gaps), but no aten op shapes, so
           no roofline placement
    nsys stats --report cuda_gpu_kern_sum --format csv --output run run.nsys-rep
        -> run_cuda_gpu_kern_sum.csv: one row per kernel name with totals: the top kernels
           only, no busy time

UNTESTED against a real nsys run: Nsight Systems does not work on the H200 kernelab is
developed on, so this parser is written from the documented report columns and tested on
hand-written files only. Column names are matched loosely (case, spaces and units ignored,
older names accepted) and units are read from the header ("(ns)", "(us)", "(ms)").
"""

from __future__ import annotations

import csv
import io
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from kernelab.errors import KernelabError, MissingToolError
from kernelab.timeline.classify import classify, short_label
from kernelab.timeline.trace import GpuActivity, Trace

UNTESTED = (
    "source: Nsight Systems CSV, read by the column names nsys documents; this reader is "
    "untested on the export of a real nsys run"
)
_UNITS_US = {"ns": 1e-3, "us": 1.0, "ms": 1e3, "s": 1e6}
SHOWN_COLUMNS = 6  # of a CSV that is not an nsys export, in the error that says so

# Normalised header -> field, for each report (newer names first, older ones after).
_TRACE_COLUMNS = {
    "start": ("start", "starttime"),
    "duration": ("duration", "dur"),
    "correlation": ("corrid", "correlationid"),
    "stream": ("strm", "stream", "streamid"),
    "device": ("device", "deviceid"),
    "grid_x": ("grdx",),
    "grid_y": ("grdy",),
    "grid_z": ("grdz",),
    "block_x": ("blkx",),
    "block_y": ("blky",),
    "block_z": ("blkz",),
    "registers": ("regtrd", "registersperthread"),
    "name": ("name", "kernelname"),
}
_SUM_COLUMNS = {
    "total": ("totaltime", "total"),
    "calls": ("instances", "count", "calls"),
    "mean": ("avg", "average", "mean"),
    "min": ("min", "minimum"),
    "max": ("max", "maximum"),
    "name": ("name", "kernelname"),
}


def _key(header: str) -> tuple[str, float]:
    """('totaltime', scale to us) from 'Total Time (ns)'."""
    unit = re.search(r"\((ns|us|ms|s)\)", header)
    scale = _UNITS_US[unit.group(1)] if unit else 1e-3  # nsys reports count ns by default
    name = re.sub(r"\(.*?\)", "", header).lower()
    return re.sub(r"[^a-z0-9]", "", name), scale


def _columns(header: list[str], wanted: dict) -> dict:
    keys = [_key(h) for h in header]
    found = {}
    for field_name, names in wanted.items():
        for name in names:
            hits = [i for i, (k, _) in enumerate(keys) if k == name]
            if hits:
                found[field_name] = (hits[0], keys[hits[0]][1])
                break
    return found


def _rows(text: str) -> tuple[list[str], list[list[str]]]:
    """The CSV table in `text`, skipping the lines nsys prints before it."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if "name" in line.lower() and "," in line:
            table = list(csv.reader(io.StringIO("\n".join(lines[i:]))))
            return table[0], [row for row in table[1:] if row and any(c.strip() for c in row)]
    raise KernelabError("no CSV header with a Name column: not an nsys stats export")


def _number(row: list[str], column) -> float | None:
    if column is None:
        return None
    index, scale = column
    try:
        return float(row[index].replace(",", "")) * scale
    except (IndexError, ValueError):
        return None


def _kind(name: str) -> str:
    lowered = name.lower()
    if "memcpy" in lowered:
        return "memcpy"
    if "memset" in lowered:
        return "memset"
    return "kernel"


def _table(text: str, wanted: dict, required: tuple, report: str, source: str):
    """(columns found, data rows) of one report's CSV; an error naming any missing column."""
    header, rows = _rows(text)
    cols = _columns(header, wanted)
    missing = [c for c in required if c not in cols]
    if missing:
        raise KernelabError(f"{source}: no {', '.join(missing)} column in the {report} CSV")
    return cols, rows


def parse_gpu_trace(text: str, source: str) -> Trace:
    required = ("start", "duration", "name")
    cols, rows = _table(text, _TRACE_COLUMNS, required, "cuda_gpu_trace", source)
    activities = []
    for row in rows:
        start, duration = _number(row, cols["start"]), _number(row, cols["duration"])
        if start is None or duration is None:
            continue
        name = row[cols["name"][0]]

        def integer(field_name, row=row):
            value = _number(row, (cols[field_name][0], 1.0)) if field_name in cols else None
            return int(value) if value is not None else None

        grid = tuple(integer(f"grid_{a}") for a in "xyz")
        block = tuple(integer(f"block_{a}") for a in "xyz")
        activities.append(
            GpuActivity(
                name=name,
                kind=_kind(name),
                start_us=start,
                duration_us=duration,
                device=None,  # nsys names the device ("NVIDIA H200 (0)"): kept as a property
                stream=integer("stream"),
                correlation=integer("correlation"),
                grid=None if None in grid else grid,
                block=None if None in block else block,
                registers_per_thread=integer("registers"),
            )
        )
    if not activities:
        raise KernelabError(f"{source}: the cuda_gpu_trace CSV holds no row")
    device_names = {row[cols["device"][0]] for row in rows if "device" in cols}
    base = min(a.start_us for a in activities)
    for activity in activities:
        activity.start_us -= base
    activities.sort(key=lambda a: a.start_us)
    return Trace(
        source=source,
        format="nsys-gpu-trace",
        activities=activities,
        launches=[],
        ops=[],
        steps=[],
        # "NVIDIA H200 (0)": the name, then the device index
        device_properties=[{"name": re.sub(r"\s*\(\d+\)$", "", n)} for n in sorted(device_names)],
        notes=[UNTESTED, "nsys records no aten op shapes: no roofline placement"],
    )


def parse_kern_sum(text: str, source: str) -> Trace:
    required = ("total", "calls", "name")
    cols, rows = _table(text, _SUM_COLUMNS, required, "cuda_gpu_kern_sum", source)
    totals = []
    for row in rows:
        total = _number(row, cols["total"])
        calls = _number(row, (cols["calls"][0], 1.0))
        if total is None or not calls:
            continue
        name = row[cols["name"][0]]
        mean = _number(row, cols.get("mean")) or total / calls
        totals.append(
            {
                "name": name,
                "label": short_label(name),
                "cls": classify(name),
                "kind": _kind(name),
                "calls": int(calls),
                "total_us": total,
                "mean_us": mean,
                "min_us": _number(row, cols.get("min")) or mean,
                "max_us": _number(row, cols.get("max")) or mean,
                "share_pct": 0.0,  # filled in by the summary
                "ops": {},
            }
        )
    if not totals:
        raise KernelabError(f"{source}: the kern_sum CSV holds no row")
    return Trace(
        source=source,
        format="nsys-kern-sum",
        activities=[],
        launches=[],
        ops=[],
        steps=[],
        notes=[UNTESTED, "a kernel summary has no timestamps: no busy time, gaps or roofline"],
        kernel_totals=totals,
    )


def parse_csv(text: str, source: str = "<csv>") -> Trace:
    """A Trace from either report's CSV, told apart by its columns."""
    header, _ = _rows(text)
    keys = {_key(h)[0] for h in header}
    if keys & {"start", "starttime"}:
        return parse_gpu_trace(text, source)
    if keys & {"totaltime", "total", "instances"}:
        return parse_kern_sum(text, source)
    # A wide CSV of another tool (an ncu page has hundreds of metric columns) is named by its
    # first few columns: enough to recognise it, short enough to stay one line.
    shown = ", ".join(h[:40] for h in header[:SHOWN_COLUMNS])
    more = f" and {len(header) - SHOWN_COLUMNS} more" if len(header) > SHOWN_COLUMNS else ""
    raise KernelabError(
        f"{source}: neither an nsys cuda_gpu_trace CSV (Start, Duration, Name columns) nor a "
        f"cuda_gpu_kern_sum CSV (Total Time, Instances, Name); its columns: {shown}{more}"
    )


def load_nsys(path) -> Trace:
    """Read an `nsys stats` CSV, or export the cuda_gpu_trace report of an .nsys-rep first
    (needs nsys on PATH)."""
    path = Path(path)
    if not path.is_file():
        raise KernelabError(f"no file at {path}")
    if path.suffix == ".nsys-rep":
        return parse_csv(_export_gpu_trace(path), str(path))
    return parse_csv(path.read_text(encoding="utf-8", errors="replace"), str(path))


def _export_gpu_trace(report: Path) -> str:
    nsys = shutil.which("nsys")
    if nsys is None:
        raise MissingToolError(
            "nsys not found: install Nsight Systems, or export the report elsewhere with "
            "`nsys stats --report cuda_gpu_trace --format csv --output NAME FILE.nsys-rep` "
            "and pass the CSV"
        )
    with tempfile.TemporaryDirectory() as folder:
        stem = Path(folder) / "export"
        command = [nsys, "stats", "--report", "cuda_gpu_trace", "--format", "csv"]
        command += ["--force-export=true", "--output", str(stem), str(report)]
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        files = sorted(Path(folder).glob("export*.csv"))
        if done.returncode != 0 or not files:
            lines = [line for line in (done.stderr or done.stdout).splitlines() if line.strip()]
            raise KernelabError(f"nsys stats failed: {lines[-1] if lines else 'no output'}")
        return files[0].read_text(encoding="utf-8", errors="replace")
