"""The measured results a report is made of, read from a folder of JSON files.

A results folder (this run's `DIR/records/`, or the committed `benchmarks/results/<gpu>/`)
may hold, by file content rather than by name:
  - measured ceilings (a `kernelab ceilings` document: "ceilings" and "gpu" keys);
  - record lists (kernelab.harness.records.Record as dicts): the SGEMM ladder, benches;
  - a Triton sweep document ({"rows": ..., "records": [...]}, benchmarks/triton_kernels.py);
  - profile documents ({"profiles": [KernelSummary dicts]}, written by the lab);
  - the SGEMM ladder's summary (its correctness checks and tuning runs);
  - a `kernelab hierarchy` record (latencies and bandwidths of each memory level);
  - in subfolders by name: hgemm/summary.json (benchmarks/hgemm_ladder.py) and
    timeline/timeline_example.json (benchmarks/timeline_example.py);
  - anything else, which is listed as "not understood" rather than dropped silently.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from kernelab.harness.records import Record


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
    timeline_example: dict | None = None  # timeline/timeline_example.json: the inference example
    files: list[str] = field(default_factory=list)
    not_understood: list[str] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return self.ceilings is None and not self.records and not self.profiles

    def machine(self) -> str:
        """Which GPU, driver and day these results were measured on, from the files."""
        gpus = {r.gpu for r in self.records if r.gpu}
        drivers = {r.driver for r in self.records if r.driver}
        days = sorted({r.timestamp[:10] for r in self.records if r.timestamp})
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

    def ladder(self) -> list[Record]:
        return [
            r for r in self.records
            if r.op == "gemm" and r.dtype == "fp32"
            and (r.implementation.startswith("sgemm:") or r.extra.get("ladder") == "sgemm")
        ]  # fmt: skip

    def by_op(self, op: str) -> list[Record]:
        return [r for r in self.records if r.op == op]


def _record_from_sweep_row(row: dict) -> Record:
    """A benchmarks/triton_kernels.py record (TB/s, flat timing fields) as a Record."""
    tbps = row.get("achieved_tbps")
    return Record(
        op=row["op"],
        implementation=row["implementation"],
        shape=row.get("shape", {}),
        dtype=row.get("dtype", ""),
        mode=row.get("mode", "cold"),
        samples_ms=row.get("samples_ms", []),
        stats={"median": row.get("median_ms")},
        gpu=row.get("gpu", ""),
        clocks=row.get("clocks", {}),
        timestamp=row.get("timestamp", ""),
        flops=row.get("flops", 0.0),
        bytes=row.get("bytes", 0.0),
        achieved_tflops=row.get("achieved_tflops"),
        achieved_gbps=tbps * 1000 if tbps is not None else row.get("achieved_gbps"),
        check=row.get("check", {}),
        extra={**row.get("extra", {}), "timer": row.get("timer")},
    )


def _records_from(items: list) -> list[Record] | None:
    if not items or not all(isinstance(i, dict) and "implementation" in i for i in items):
        return None
    out = []
    for item in items:
        if "schema_version" in item:
            out.append(Record.from_dict(item))
        else:
            out.append(_record_from_sweep_row(item))
    return out


def _from_file(records: list[Record], path: Path) -> list[Record]:
    """Mark each record with the file it came from: one file is one run, and a comparison
    must stay inside one run."""
    for record in records:
        record.extra = {**record.extra, "source_file": path.name}
    return records


def load_results(folder: Path | None) -> ResultSet:
    results = ResultSet(folder=folder)
    if folder is None or not folder.exists():
        return results
    for attribute, relative in (
        ("hgemm_summary", "hgemm/summary.json"),
        ("timeline_example", "timeline/timeline_example.json"),
    ):
        path = folder / relative
        try:
            setattr(results, attribute, json.loads(path.read_text()) if path.is_file() else None)
            if path.is_file():
                results.files.append(relative)
        except (OSError, json.JSONDecodeError):
            results.not_understood.append(relative)
    for path in sorted(folder.glob("*.json")):
        try:
            data = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            results.not_understood.append(path.name)
            continue
        results.files.append(path.name)
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
        elif isinstance(data, dict) and isinstance(data.get("records"), list):
            results.records.extend(_from_file(_records_from(data["records"]) or [], path))
        elif isinstance(data, list) and (records := _records_from(data)) is not None:
            results.records.extend(_from_file(records, path))
        else:
            results.not_understood.append(path.name)
    return results
