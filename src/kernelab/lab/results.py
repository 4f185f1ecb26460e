"""The measured results a report is made of, read from a folder of JSON files.

A results folder (this run's `DIR/records/`, or the committed `benchmarks/results/<gpu>/`)
may hold, by file content rather than by name:
  - measured ceilings (a `kernelab ceilings` document: "ceilings" and "gpu" keys);
  - record lists (kernelab.harness.records.Record as dicts): the SGEMM ladder, benches;
  - a Triton sweep document ({"rows": ..., "records": [...]}, benchmarks/triton_kernels.py);
  - profile documents ({"profiles": [KernelSummary dicts]}, written by the lab);
  - the SGEMM ladder's summary (its correctness checks and tuning runs);
  - a `kernelab hierarchy` record (latencies and bandwidths of each memory level);
  - in subfolders by name: hgemm/summary.json and hgemm/records.json
    (`kernelab ladder hgemm --save`) and timeline/timeline_example.json
    (benchmarks/timeline_example.py);
  - anything else, which is listed as "not understood" rather than dropped silently.
A file that cannot be read (not JSON, or a record in it malformed) is listed as unreadable,
with the reason, and the gate reports it. Every figure is then recomputed from the samples
(kernelab.lab.derive): what a record stored beside its samples is not believed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from kernelab.errors import KernelabError
from kernelab.harness.records import Record, read_json, records_from
from kernelab.lab import derive


def latest_per_case(records: list[Record]) -> list[Record]:
    """Per (op, shape, dtype, implementation), the record with the latest timestamp: a case
    re-measured by a later run replaces the older figure instead of standing beside it."""
    latest: dict[tuple, Record] = {}
    for r in records:
        case = (r.op, json.dumps(r.shape, sort_keys=True), r.dtype, r.implementation)
        if case not in latest or r.timestamp > latest[case].timestamp:
            latest[case] = r
    return list(latest.values())


@dataclass
class ResultSet:
    folder: Path | None
    ceilings: dict | None = None  # the MeasuredCeilings document
    records: list[Record] = field(default_factory=list)
    profiles: list[dict] = field(default_factory=list)
    ladder_summary: dict | None = None
    hierarchy: dict | None = None
    hgemm_summary: dict | None = None  # hgemm/summary.json: the Hopper ladder's run
    hgemm_records: list[Record] = field(default_factory=list)  # hgemm/records.json: samples
    timeline_example: dict | None = None  # timeline/timeline_example.json: the inference example
    # pytorch/pytorch_targets_*.json, the latest: the targets under triton.testing.do_bench and
    # the host cost per call (benchmarks/pytorch_targets.py); kept apart from `records`, whose
    # figures the gate judges with kernelab's own timer
    pytorch_records: list[Record] = field(default_factory=list)
    launch_costs: list[dict] = field(default_factory=list)
    pytorch_file: str | None = None
    files: list[str] = field(default_factory=list)
    not_understood: list[str] = field(default_factory=list)
    unreadable: list[str] = field(default_factory=list)  # "file: why"
    disagreements: list[str] = field(default_factory=list)  # stored figures their samples deny
    derived: bool = False  # whether kernelab.lab.derive has recomputed the figures

    @property
    def empty(self) -> bool:
        """Whether the folder held no measurement at all (of any kind a card's records hold)."""
        return (self.ceilings is None and not self.records and not self.profiles
                and not self.pytorch_records and not self.hgemm_records)  # fmt: skip

    def machine(self) -> str:
        """Which GPU, driver and day these results were measured on, from the files."""
        everything = [*self.records, *self.hgemm_records, *self.pytorch_records]
        gpus = {r.gpu for r in everything if r.gpu}
        drivers = {r.driver for r in everything if r.driver}
        days = sorted({r.timestamp[:10] for r in everything if r.timestamp})
        if self.ceilings:
            gpus.add(self.ceilings.get("gpu", ""))
            drivers.add(self.ceilings.get("driver") or "")
            days.append(str(self.ceilings.get("timestamp", ""))[:10])
        gpus.discard("")
        drivers.discard("")
        days = sorted({d for d in days if d})
        when = (
            days[0]
            if len(days) == 1
            else (f"{days[0]} to {days[-1]}" if days else "an unknown day")
        )
        driver = f", driver {', '.join(sorted(drivers))}" if drivers else ""
        return f"{', '.join(sorted(gpus)) or 'an unknown GPU'}{driver}, measured {when}"

    def ceilings_card(self) -> str | None:
        """The catalog id of the GPU the measured ceilings were measured on, or None (no
        ceilings, or a GPU the catalog does not know)."""
        if not self.ceilings:
            return None
        if self.ceilings.get("gpu_id"):
            return str(self.ceilings["gpu_id"])
        from kernelab.hardware.detect import match_catalog

        spec = match_catalog(str(self.ceilings.get("gpu") or ""))
        return spec.id if spec else None

    def ceilings_on(self, gpu_id: str) -> dict | None:
        """The measured ceilings when they were measured on the catalog GPU `gpu_id`, else
        None: one card's measured ceiling is never shown or used as another's."""
        return self.ceilings if self.ceilings_card() == gpu_id else None

    def ladder(self) -> list[Record]:
        return [
            r for r in self.records
            if r.op == "gemm" and r.dtype == "fp32"
            and (r.implementation.startswith("sgemm:") or r.extra.get("ladder") == "sgemm")
        ]  # fmt: skip

    def by_op(self, op: str) -> list[Record]:
        return [r for r in self.records if r.op == op]


def _records_from(items: list) -> list[Record] | None:
    """The records of a JSON list (Record dicts or benchmark rows), or None when it is no
    list of records at all."""
    if not items or not all(isinstance(i, dict) and "implementation" in i for i in items):
        return None
    return records_from(items)


def _from_file(records: list[Record], name: str) -> list[Record]:
    """Mark each record with the file it came from (relative to the results folder): one
    file is one run, and a comparison must stay inside one run."""
    for record in records:
        record.extra = {**record.extra, "source_file": name}
    return records


def _read(path: Path, name: str, results: ResultSet):
    """The JSON in `path` (.json or .json.xz), or None with the reason added to
    results.unreadable."""
    try:
        return read_json(path, "record file")
    except (OSError, KernelabError) as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        results.unreadable.append(f"{name}: {reason}")
        return None


def _json_files(folder: Path, pattern: str = "*") -> list[Path]:
    """The .json and .json.xz files matching `pattern` in `folder`, by name."""
    return sorted({*folder.glob(f"{pattern}.json"), *folder.glob(f"{pattern}.json.xz")})


def _named(folder: Path, stem: str) -> Path | None:
    """folder/stem.json, else folder/stem.json.xz, else None."""
    for suffix in (".json", ".json.xz"):
        if (folder / f"{stem}{suffix}").is_file():
            return folder / f"{stem}{suffix}"
    return None


def _records_or_report(items: list, name: str, results: ResultSet) -> list[Record] | None:
    """The records in one file, marked with it; a malformed one makes the whole file
    unreadable (reported), since a run with a hole in it is not the run that was measured."""
    try:
        records = _records_from(items)
    except (KernelabError, KeyError, TypeError, ValueError) as exc:
        results.unreadable.append(f"{name}: a malformed record ({exc})")
        return None
    return None if records is None else _from_file(records, name)


def _run_time(data) -> str:
    """When a benchmarks/pytorch_targets.py run was made: the latest record timestamp in it
    (ISO 8601 UTC, so strings order as times); "" when it has none."""
    rows = data.get("records") if isinstance(data, dict) else None
    stamps = [str(r.get("timestamp") or "") for r in rows or [] if isinstance(r, dict)]
    return max(stamps, default="")


def _load_pytorch_view(folder: Path, results: ResultSet) -> None:
    """The newest run of benchmarks/pytorch_targets.py under folder/pytorch/, if any: newest by
    the timestamps its records carry, not by its file name. A run file that cannot be read is
    reported (results.unreadable), since it may be the newest."""
    runs = []
    for path in _json_files(folder / "pytorch", "pytorch_targets*"):
        relative = f"pytorch/{path.name}"
        data = _read(path, relative, results)
        if data is not None:
            runs.append((_run_time(data), path.name, relative, data))
    if not runs:
        return
    _, _, relative, data = max(runs, key=lambda run: run[:2])
    if not isinstance(data, dict) or not isinstance(data.get("records"), list):
        results.not_understood.append(relative)
        return
    records = _records_or_report(data["records"], relative, results)
    if records is None:
        return
    results.pytorch_records = records
    results.launch_costs = [row for row in data.get("launch_costs") or [] if isinstance(row, dict)]
    results.pytorch_file = relative
    results.files.append(relative)


def load_pytorch_run(folder: Path) -> ResultSet:
    """Only the newest benchmarks/pytorch_targets.py run under folder/pytorch/, nothing else of
    the folder."""
    results = ResultSet(folder=folder)
    if folder.exists():
        _load_pytorch_view(folder, results)
    return results


# Subfolders read by name: the hgemm ladder's run, the inference example, the do_bench run.
NAMED_FOLDERS = ("hgemm", "timeline", "pytorch")


def _content_files(folder: Path) -> list[tuple[Path, str]]:
    """(path, name relative to folder) of every JSON file read by its content: those at the
    top and in any subfolder but the named ones (sgemm/, triton/, ... in the committed layout)."""
    found = []
    for path in _json_files(folder):
        found.append((path, path.name))
    for sub in sorted(p for p in folder.iterdir() if p.is_dir() and p.name not in NAMED_FOLDERS):
        for path in sorted({*sub.rglob("*.json"), *sub.rglob("*.json.xz")}):
            found.append((path, path.relative_to(folder).as_posix()))
    return found


def load_results(folder: Path | None) -> ResultSet:
    """Every result in `folder` (a lab run's DIR/records/ or a card's benchmarks/results/<card>/),
    each file read by its content, .json or .json.xz alike; the figures then recomputed from
    their samples."""
    results = ResultSet(folder=folder)
    if folder is None or not folder.is_dir():
        return results
    for attribute, where, stem in (
        ("hgemm_summary", "hgemm", "summary"),
        ("timeline_example", "timeline", "timeline_example"),
    ):
        path = _named(folder / where, stem)
        relative = f"{where}/{path.name}" if path else ""
        if path is not None and (data := _read(path, relative, results)) is not None:
            setattr(results, attribute, data)
            results.files.append(relative)
    path = _named(folder / "hgemm", "records")
    relative = f"hgemm/{path.name}" if path else ""
    if path is not None and (data := _read(path, relative, results)) is not None:
        reported = len(results.unreadable)
        hgemm = _records_or_report(data if isinstance(data, list) else [], relative, results)
        if hgemm is not None:
            results.hgemm_records = hgemm
            results.files.append(relative)
        elif len(results.unreadable) == reported:  # else it was reported as unreadable
            results.not_understood.append(relative)
    _load_pytorch_view(folder, results)
    for path, name in _content_files(folder):
        data = _read(path, name, results)
        if data is None:
            continue
        results.files.append(name)
        if isinstance(data, dict) and "ceilings" in data and "gpu" in data:
            results.ceilings = data
        elif isinstance(data, dict) and "latencies" in data and "bandwidths" in data:
            results.hierarchy = data  # kernelab hierarchy: measured latencies and bandwidths
        elif isinstance(data, dict) and "checks" in data and "timing" in data:
            results.ladder_summary = data  # the SGEMM ladder's checks and tuning
        elif path.name == "stages.json" or (isinstance(data, dict) and "rooflines" in data):
            continue  # the lab's bookkeeping and its analytic rooflines: no measurements
        elif isinstance(data, dict) and isinstance(data.get("profiles"), list):
            results.profiles.extend(data["profiles"])
        elif (
            isinstance(data, dict)
            and isinstance(data.get("records"), list)
            or isinstance(data, list)
        ):
            items = data["records"] if isinstance(data, dict) else data
            reported = len(results.unreadable)
            records = _records_or_report(items, name, results)
            if records is not None:
                results.records.extend(records)
            elif len(results.unreadable) > reported:
                results.files.remove(name)  # reported as unreadable instead
            else:
                results.not_understood.append(name)
        else:
            results.not_understood.append(name)
    derive_all(results)
    return results


def derive_all(results: ResultSet) -> None:
    """Recompute every figure of `results` from its samples, once (load_results does it; the
    gate does it for a ResultSet built by hand)."""
    if results.derived:
        return
    found: list[str] = []
    for record in [*results.records, *results.hgemm_records]:
        derive.rederive_record(record, found)
    derive.rederive_pct_of_cublas(results.ladder(), found)
    derive.rederive_pct_of_cublas(results.hgemm_records, found)
    summary = results.hgemm_summary or {}
    for row in summary.get("paired") or []:
        derive.rederive_paired(row, found)
    derive.rederive_hgemm_timing(summary.get("timing") or [], results.hgemm_records, found)
    derive.rederive_rounds(summary.get("rounds") or [])
    results.disagreements.extend(found)
    results.derived = True
