"""The PMPP ladders' proving counters in the lab: each step's proof metric under Nsight Compute
and its verdict against the step before (ladders/engine.py's profile_steps and verdict), the
same rows `kernelab ladder NAME --profile` prints.

Where ncu and a GPU are present, the lab's pmpp-counters stage profiles the ladders whose
steps name a proof metric and a direction (transpose, histogram, scan) at their profile sizes
and writes DIR/records/pmpp/counters.json:

    {"pmpp_counters": {"transpose": {"gpu": ..., "timestamp": ..., "size": ..., "dtype": ...,
                                      "rows": [profile row, ...]}, ...},
     "skipped": "why nothing was profiled" (only then)}

A committed card folder holds the same file under pmpp/. The gate judges the rows: every
profiled step's verdict PASS, each verdict recomputed from the values (the step's counter,
the step before's from that step's own metrics, its per-load share, its direction) by
ladders.engine.verdict, so a stored verdict its numbers deny is not believed. The reduce ladder's counters carry no direction
(ladders/reduce/steps.py names a metric per step, not how it must move), so it is not
profiled here.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

Progress = Callable[[str], None]

COUNTERS_FILE = Path("pmpp") / "counters.json"
# (ladder, size, dtype): the sizes `kernelab ladder NAME --profile` uses by default
PROFILED = (("transpose", (8192, 8192), "fp32"), ("histogram", 1 << 26, "int32"),
            ("scan", 1 << 26, "fp32"))  # fmt: skip
HISTOGRAM_BINS = 256
NOT_MEASURED = "not measured (needs ncu and a GPU: the lab's pmpp-counters stage profiles "\
               "each ladder's steps under Nsight Compute where both are present)"


def ncu_present() -> bool:
    return shutil.which("ncu") is not None or bool(os.environ.get("KERNELAB_NCU"))


def _profile_one(name: str, size, dtype: str, progress: Progress) -> list[dict]:
    """One ladder's profile rows, as `kernelab ladder NAME --profile` makes them."""
    if name == "scan":
        from kernelab.ladders.scan import ladder as scan_ladder

        return scan_ladder.profile_steps(scan_ladder.parse_steps(None), size, dtype, progress)
    from kernelab.ladders.engine import profile_steps

    if name == "transpose":
        from kernelab.ladders.transpose.ladder import parse_steps

        rows, cols = size
        args = ["--rows", str(rows), "--cols", str(cols)]
    else:
        from kernelab.ladders.histogram.ladder import parse_steps

        args = ["--n", str(size), "--bins", str(HISTOGRAM_BINS)]
    steps = parse_steps(None)
    args += ["--dtype", dtype, "--steps", ",".join(str(s.number) for s in steps)]
    return profile_steps(name, steps, args, lambda step: step.kernel_for(dtype),
                         progress=progress)  # fmt: skip


def profile_all(records_dir: Path, progress: Progress, *, profile=_profile_one,
                gpu: str | None = None) -> str:  # fmt: skip
    """Each ladder of PROFILED under ncu into records_dir/pmpp/counters.json, written after
    each ladder; a ladder whose profile fails is its error in the file, the others still run.
    Without ncu the file says why and nothing is profiled. `profile(name, size, dtype,
    progress)` stands in for ncu in a test."""
    from kernelab.harness.records import utc_now

    path = records_dir / COUNTERS_FILE
    if profile is _profile_one and not ncu_present():
        _write(path, {"pmpp_counters": {}, "skipped": "ncu not found"})
        return "skipped: ncu not found"
    found: dict[str, dict] = {}
    if gpu is None:
        import torch

        gpu = torch.cuda.get_device_name()
    lines = []
    for name, size, dtype in PROFILED:
        progress(f"{name} ladder: each step's proof metric under ncu")
        try:
            rows = profile(name, size, dtype, progress)
        except Exception as exc:  # noqa: BLE001 - one ladder's failed profile is its line
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
            found[name] = {"error": first, "gpu": gpu, "timestamp": utc_now()}
            lines.append(f"{name}: FAILED ({first})")
            _write(path, {"pmpp_counters": found})
            continue
        shown = "x".join(map(str, size)) if isinstance(size, tuple) else str(size)
        found[name] = {"gpu": gpu, "timestamp": utc_now(), "size": shown, "dtype": dtype,
                       "rows": [{k: v for k, v in r.items() if k != "report"} for r in rows]}  # fmt: skip
        _write(path, {"pmpp_counters": found})
        passed = sum(_verdict(r, before) == "PASS" for r, before in _with_before(rows))
        lines.append(f"{name}: {passed} of {len(rows)} steps PASS")
    return "; ".join(lines)


def _write(path: Path, data) -> None:
    from kernelab.harness.records import write_atomically
    from kernelab.output import to_jsonable

    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(path, json.dumps(to_jsonable(data), indent=1) + "\n")


def read_counters(folder: Path | None) -> dict:
    """The counters document of a results folder ({} when it has none or it is unreadable)."""
    if folder is None:
        return {}
    path = folder / COUNTERS_FILE
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _previous(row: dict, before: dict | None):
    """The step before's value of this row's proof metric: from that step's own metrics
    (profile rows carry every metric of the run), else what the row stored."""
    metrics = (before or {}).get("metrics")
    if isinstance(metrics, dict) and row.get("proof") in metrics:
        return metrics[row["proof"]]
    return row.get("previous") if before is not None else None


def _verdict(row: dict, before: dict | None = None) -> str:
    """The row's verdict from the values (ladders.engine.verdict): its own counter, the step
    before's, its per-load share and the direction it must move."""
    from kernelab.ladders.engine import verdict

    return verdict(str(row.get("direction")), _previous(row, before), row.get("value"),
                   per_load=row.get("per_load"))  # fmt: skip


def _with_before(rows: list[dict]):
    """(row, the row before or None) down a ladder's rows."""
    return zip(rows, [None, *rows[:-1]], strict=True)


def _number(value) -> str:
    if not isinstance(value, (int, float)):
        return "none"
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"


def judge(folder: Path | None) -> tuple[bool, str]:
    """(every profiled step's verdict PASS, the evidence). Without rows: not measured."""
    document = read_counters(folder)
    ladders = document.get("pmpp_counters") or {}
    profiled = {name: entry for name, entry in ladders.items()
                if isinstance(entry, dict) and entry.get("rows")}  # fmt: skip
    if not profiled:
        why = document.get("skipped")
        failed = [f"{name}: {entry['error']}" for name, entry in ladders.items()
                  if isinstance(entry, dict) and entry.get("error")]  # fmt: skip
        said = (f" ({why})" if why else "") + (f"; failed: {'; '.join(failed)}" if failed else "")
        return False, NOT_MEASURED + said
    bad, shown, disagree, steps = [], [], [], 0
    for name, entry in sorted(profiled.items()):
        for row, before in _with_before(entry["rows"]):
            steps += 1
            got = _verdict(row, before)
            if row.get("verdict") is not None and row.get("verdict") != got:
                disagree.append(f"{row.get('step')} stored {row.get('verdict')}, its values "
                                f"give {got}")  # fmt: skip
            if got != "PASS":
                bad.append(f"{row.get('step')} {got} ({row.get('proof')} {_number(row.get('value'))}"
                           f", the step before {_number(_previous(row, before))}, must go "
                           f"{row.get('direction')})")  # fmt: skip
        shown.append(f"{name} at {entry.get('size')} {entry.get('dtype')} on {entry.get('gpu')} "
                     f"({str(entry.get('timestamp', ''))[:10]}): {len(entry['rows'])} steps")  # fmt: skip
    missing = []
    for name, _, _ in PROFILED:
        if name not in profiled:
            entry = ladders.get(name)
            error = entry.get("error") if isinstance(entry, dict) else None
            missing.append(f"{name} ({'its profile failed: ' + error if error else 'no rows'})")
    where = "; ".join(shown) + "; the reduce ladder's counters carry no direction, so it is not judged"
    if disagree:
        where += "; " + "; ".join(disagree[:3])
    unmeasured = f"; not measured: {', '.join(missing)}" if missing else ""
    if bad:
        return False, (f"{len(bad)} of {steps} profiled steps not PASS: " + "; ".join(bad[:4])
                       + (f" and {len(bad) - 4} more" if len(bad) > 4 else "") + unmeasured
                       + f" ({where})")  # fmt: skip
    return not missing, f"every one of {steps} profiled steps PASS{unmeasured} ({where})"


def rows_for_report(folder: Path | None) -> list[list]:
    """The counters as a table: ladder, step, proof metric, the step before, value, per load,
    direction, verdict (recomputed)."""
    ladders = read_counters(folder).get("pmpp_counters") or {}
    rows = []
    for name, entry in sorted(ladders.items()):
        ladder_rows = (entry.get("rows") or []) if isinstance(entry, dict) else []
        for row, before in _with_before(ladder_rows):
            per_load = row.get("per_load")
            rows.append([name, row.get("step"), row.get("proof"),
                         _number(_previous(row, before)), _number(row.get("value")),
                         "-" if per_load is None else f"{per_load:.2f}", row.get("direction"),
                         _verdict(row, before)])  # fmt: skip
    return rows


def section(report, results, on_gpu: bool) -> None:
    """Each profiled PMPP ladder step's proof counter under Nsight Compute, against the step
    before, with its verdict (lab.counters); or one line saying why there are none."""
    from kernelab.lab.report import Heading, Paragraph, Table

    report.add(Heading("PMPP ladders: the counter that proves each step", 3))
    rows = rows_for_report(results.folder)
    if not rows:
        why = read_counters(results.folder).get("skipped")
        where = "this run" if on_gpu else "the committed records"
        report.add(Paragraph(f"{NOT_MEASURED[0].upper()}{NOT_MEASURED[1:]}; "
                             f"none in {where}" + (f" ({why})." if why else ".")))  # fmt: skip
        return
    report.add(
        Paragraph("One ncu run per ladder launches each step once and reads its proof metric; "
                  "the verdict says whether it moved as the step claims against the step "
                  "before (down, or to zero per shared load), recomputed from the values."),
        Table(["ladder", "step", "proof metric", "step before", "value", "per load", "must go",
               "verdict"], rows),
    )  # fmt: skip
