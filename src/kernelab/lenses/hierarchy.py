"""Where the data lives: the measured latency and bandwidth of each level on this GPU.

`kernelab.probes.hierarchy.measure_hierarchy()` runs the microbenchmarks (pointer chases
for latency, streaming kernels for bandwidth, torch copies for the host link) and returns a
HierarchyRecord; the command saves it under the cache directory, where
`load_measured_latencies(spec)` finds it for the pipeline lens. `hierarchy_rows()` lays a
record beside the catalog (sizes, datasheet rates) and `comparison()` beside the published
Hopper study, both pure functions of the record, so a stored record renders anywhere.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from statistics import median

from kernelab.errors import KernelabError
from kernelab.harness.cache import cache_dir, safe_name
from kernelab.harness.records import MachineRun
from kernelab.output import note

SCHEMA_VERSION = 1
RECORD_ENV = "KERNELAB_HIERARCHY"  # a record file to use instead of the cache

LUO_2024 = {
    "citation": (
        "W. Luo, R. Fan, Z. Li, D. Du, Q. Wang, X. Chu, 'Benchmarking and Dissecting the Nvidia "
        "Hopper GPU Architecture', IPDPS 2024, arXiv:2402.13499: memory latency table, "
        "H800 column"
    ),
    "board": "H800 PCIe: 114 SMs, 80 GB HBM2e at 2,039 GB/s, 350 W",
    "latency_cycles": {"l1": 40.7, "shared": 29.0, "l2": 263.0, "hbm": 478.8},
}

# Why a figure measured here may differ from Luo et al.'s H800, level by level.
DIFFERENCES = {
    "l1": (
        "the same SM (GH100) on both boards, so cycles should agree; our chain holds absolute "
        "addresses, so no index arithmetic sits between two loads"
    ),
    "shared": "the same SM on both boards; the same remark on index arithmetic as for L1",
    "l2": (
        "Hopper's L2 is two partitions and a hit in the far one costs more; a chase over a few "
        "MiB from one SM averages both, and where the lines land depends on the address hash "
        "and on the chip's configuration (114 SMs there, 132 SMs and 60 MiB of L2 here)"
    ),
    "hbm": (
        "different memory (HBM3e here, HBM2e there) behind a different controller clock, and "
        "counted in SM cycles, which the two boards clock differently (DRAM runs on its own "
        "clock); our page-local order keeps TLB misses out (hbm_tlb shows what they add)"
    ),
}

# PCIe Gen5 x16 on the H100 SXM and H200 datasheets: 128 GB/s for both directions together.
HOST_LINK_DATASHEET = {
    gpu: (64.0, "PCIe Gen5 x16: the datasheet's 128 GB/s counts both directions")
    for gpu in ("h100-sxm", "h200")
}


@dataclass
class LatencyMeasurement:
    level: str  # "l1", "shared", "l2", "hbm", "hbm_tlb"
    label: str
    working_set_bytes: int
    stride_bytes: int
    order: str  # "random" or "page-local random"
    steps: int  # timed loads per launch
    cycles_per_load: float  # median over the launches
    ns_per_load: float  # median over the launches, from %globaltimer
    clock_mhz: float  # cycles / ns during the chase: the SM clock it ran at
    samples_cycles: list[float] = field(default_factory=list)  # per launch
    samples_ns: list[float] = field(default_factory=list)


@dataclass
class BandwidthMeasurement:
    name: str  # "smem", "l2", "l2_small", "hbm_read", "hbm_copy", "copy_ceiling", "h2d", "d2h"
    method: str
    working_set_bytes: int
    bytes_per_call: int
    mode: str  # the timing mode
    median_ms: float
    rel_noise: float
    gbps: float  # bytes per call / median time, in 1e9 bytes/s
    datasheet_gbps: float | None
    datasheet_source: str = ""
    throttled: bool = False

    @property
    def pct_of_datasheet(self) -> float | None:
        return 100.0 * self.gbps / self.datasheet_gbps if self.datasheet_gbps else None


@dataclass
class HierarchyRecord(MachineRun):
    latencies: dict[str, LatencyMeasurement]
    bandwidths: dict[str, BandwidthMeasurement]
    versions: dict = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    schema_version: int = SCHEMA_VERSION

    def to_dict(self) -> dict:
        data = dataclasses.asdict(self)
        for name, b in self.bandwidths.items():
            data["bandwidths"][name]["pct_of_datasheet"] = b.pct_of_datasheet
        return data

    @classmethod
    def from_dict(cls, data: dict) -> HierarchyRecord:
        if not isinstance(data, dict):
            raise KernelabError("not a hierarchy record (expected a JSON object)")
        version = data.get("schema_version", SCHEMA_VERSION)
        if version > SCHEMA_VERSION:
            raise KernelabError(f"hierarchy record schema {version} is newer than this kernelab")
        try:
            _check_fields(data)
            latencies = {k: _build(LatencyMeasurement, v, f"latencies.{k}")
                         for k, v in data["latencies"].items()}  # fmt: skip
            bandwidths = {k: _build(BandwidthMeasurement, v, f"bandwidths.{k}")
                          for k, v in data["bandwidths"].items()}  # fmt: skip
            return cls(
                gpu=data["gpu"],
                gpu_id=data.get("gpu_id"),
                driver=data.get("driver"),
                timestamp=data["timestamp"],
                quick=bool(data.get("quick", False)),
                latencies=latencies,
                bandwidths=bandwidths,
                versions=data.get("versions", {}),
                warnings=data.get("warnings", []),
                schema_version=version,
            )
        except KeyError as exc:
            raise KernelabError(f"not a hierarchy record (no '{exc.args[0]}' field)") from None
        except (TypeError, AttributeError, ValueError):
            raise KernelabError(
                "not a hierarchy record (a field of the wrong shape: 'latencies' and "
                "'bandwidths' map a level to its measurement)"
            ) from None


# What each field of a stored record may hold, by its annotation: a record edited by hand or
# cut short is refused in one line naming the field, not met later as a TypeError mid-render.
def _is_number(value) -> bool:
    return (isinstance(value, (int, float)) and not isinstance(value, bool)
            and math.isfinite(value) and value >= 0)  # fmt: skip


_KINDS = {
    "str": ("text", lambda v: isinstance(v, str)),
    "str | None": ("text or null", lambda v: v is None or isinstance(v, str)),
    "int": ("a whole number >= 0", lambda v: _is_number(v) and float(v).is_integer()),
    "float": ("a number >= 0", _is_number),
    "float | None": ("a number >= 0 or null", lambda v: v is None or _is_number(v)),
    "bool": ("true or false", lambda v: isinstance(v, bool)),
    "list[float]": (
        "a list of numbers >= 0",
        lambda v: isinstance(v, list) and all(_is_number(x) for x in v),
    ),
    "list[str]": (
        "a list of text",
        lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v),
    ),
    "dict": ("an object", lambda v: isinstance(v, dict)),
}

# The record's own fields (those of MachineRun and the lists beside the measurements). The
# GPU's name and the time may be null: they render as "unknown".
_RECORD_FIELDS = {"gpu": "str | None", "gpu_id": "str | None", "driver": "str | None",
                  "timestamp": "str | None", "quick": "bool", "warnings": "list[str]",
                  "versions": "dict"}  # fmt: skip


def _check(value, kind: str, where: str) -> None:
    wanted, ok = _KINDS.get(kind, ("", lambda v: True))  # a kind not listed is not checked
    if not ok(value):
        raise KernelabError(f"{where} is {json.dumps(value)[:40]}; it must be {wanted}")


def _check_fields(data: dict) -> None:
    for name, kind in _RECORD_FIELDS.items():
        if name in data:
            _check(data[name], kind, name)
    for part in ("latencies", "bandwidths"):
        if part in data and not isinstance(data[part], dict):
            raise KernelabError(f"'{part}' must map a level to its measurement")


def _build(cls, data: dict, where: str):
    if not isinstance(data, dict):
        raise KernelabError(f"{where} must be a JSON object")
    known = {f.name: f for f in dataclasses.fields(cls)}
    for name, f in known.items():
        if name in data:
            _check(data[name], f.type, f"{where}.{name}")
    return cls(**{k: v for k, v in data.items() if k in known})


# --- storing and finding records ----------------------------------------------------------


def record_path(gpu_key: str, driver: str | None) -> Path:
    """Where the cache keeps the record of one device (catalog id or name) and driver."""
    return (
        cache_dir() / "hierarchy" / f"{safe_name(gpu_key)}-driver-{safe_name(driver or '?')}.json"
    )


def save_record(record: HierarchyRecord, path: str | Path) -> Path:
    from kernelab.harness.records import write_atomically
    from kernelab.output import to_jsonable

    path = Path(path)
    write_atomically(path, json.dumps(to_jsonable(record.to_dict()), indent=1) + "\n")
    return path


def load_record(path: str | Path) -> HierarchyRecord:
    from kernelab.harness.records import read_json

    path = Path(path)
    data = read_json(path, "hierarchy record")
    try:
        return HierarchyRecord.from_dict(data)
    except KernelabError as exc:
        raise KernelabError(f"{path}: {exc}") from None


def latest_record(spec) -> HierarchyRecord | None:
    """The newest record of `spec`'s GPU: $KERNELAB_HIERARCHY if set, else the cache."""
    explicit = os.environ.get(RECORD_ENV)
    if explicit:
        record = load_record(explicit)
        return record if record.gpu_id == spec.id else None
    found = []
    for file in sorted((cache_dir() / "hierarchy").glob(f"{safe_name(spec.id)}-driver-*.json")):
        try:
            found.append(load_record(file))
        except KernelabError as exc:
            note(f"ignoring a damaged hierarchy record: {exc}")
    found = [r for r in found if r.gpu_id == spec.id]
    return max(found, key=lambda r: r.timestamp or "") if found else None


def load_measured_latencies(spec) -> dict[str, float] | None:
    """{"hbm": ns, "l2": ns} measured on this GPU model by `kernelab hierarchy`, or None."""
    record = latest_record(spec)
    if record is None:
        return None
    latencies = {
        level: record.latencies[level].ns_per_load
        for level in ("hbm", "l2")
        if level in record.latencies and record.latencies[level].ns_per_load > 0
    }
    return latencies or None


# --- measuring ----------------------------------------------------------------------------


def latency_of(plan, runs) -> LatencyMeasurement:
    cycles = [r.cycles_per_load for r in runs]
    ns = [r.ns_per_load for r in runs]
    clock = 1e3 * median([r.cycles / r.ns for r in runs if r.ns > 0] or [0.0])
    return LatencyMeasurement(
        level=plan.level,
        label=plan.label,
        working_set_bytes=plan.working_set_bytes,
        stride_bytes=plan.stride_bytes,
        order=plan.order,
        steps=plan.steps,
        cycles_per_load=median(cycles),
        ns_per_load=median(ns),
        clock_mhz=clock,
        samples_cycles=cycles,
        samples_ns=ns,
    )


def bandwidth_of(name, method, working_set, measured, datasheet=None) -> BandwidthMeasurement:
    nbytes, timing = measured
    rate, source = datasheet if datasheet else (None, "")
    return BandwidthMeasurement(
        name=name,
        method=method,
        working_set_bytes=int(working_set),
        bytes_per_call=int(nbytes),
        mode=timing.mode,
        median_ms=timing.median_ms,
        rel_noise=timing.rel_noise,
        gbps=nbytes / (timing.median_ms * 1e-3) / 1e9,
        datasheet_gbps=rate,
        datasheet_source=source,
        throttled=timing.throttled,
    )


# --- the view -----------------------------------------------------------------------------


def _level_sizes(spec) -> dict[str, tuple[int | None, int | None]]:
    """(chip bytes, bytes per SM) of each level from the catalog; empty without a spec."""
    if spec is None:
        return {}
    sms = spec.sm_count
    per_sm = {
        "l1": spec.l1_per_sm_kib * 1024,
        "shared": spec.smem_per_sm_kib * 1024,
        "registers": spec.registers_per_sm * 4,
    }
    sizes = {level: (size * sms, size) for level, size in per_sm.items()}
    sizes["hbm"] = (int(spec.memory_gb * 1e9), None)
    sizes["l2"] = (spec.l2_kib * 1024, None)
    return sizes


# (row name, size key, latency level, bandwidth name), outermost first; indented rows are
# variants of the level above them.
_ROWS = (
    ("HBM", "hbm", "hbm", "hbm_read"),
    ("  copy (read + write)", None, None, "hbm_copy"),
    ("  copy ceiling (torch)", None, None, "copy_ceiling"),
    ("  random order, TLB misses", None, "hbm_tlb", None),
    ("L2", "l2", "l2", "l2"),
    ("  1/8 of the L2", None, None, "l2_small"),
    ("L1", "l1", "l1", None),
    ("shared memory", "shared", "shared", "smem"),
    ("registers", "registers", None, None),
    ("host to device", None, None, "h2d"),
    ("device to host", None, None, "d2h"),
)


def hierarchy_rows(record: HierarchyRecord, spec=None) -> list[dict]:
    """One row per level and variant: catalog size, measured latency and bandwidth, the
    datasheet rate and Luo et al.'s H800 latency where there is one."""
    sizes = _level_sizes(spec)
    rows = []
    for name, size_key, latency_key, bandwidth_key in _ROWS:
        latency = record.latencies.get(latency_key) if latency_key else None
        bandwidth = record.bandwidths.get(bandwidth_key) if bandwidth_key else None
        if size_key not in sizes and latency is None and bandwidth is None:
            continue
        chip, per_sm = sizes.get(size_key, (None, None))
        measured = latency or bandwidth
        rows.append(
            {
                "level": name.strip(),
                "variant": name.startswith(" "),
                "size_bytes": chip,
                "per_sm_bytes": per_sm,
                "latency_cycles": latency.cycles_per_load if latency else None,
                "latency_ns": latency.ns_per_load if latency else None,
                "working_set_bytes": measured.working_set_bytes if measured else None,
                "luo_h800_cycles": LUO_2024["latency_cycles"].get(latency_key),
                "bandwidth_gbps": bandwidth.gbps if bandwidth else None,
                "datasheet_gbps": bandwidth.datasheet_gbps if bandwidth else None,
                "pct_of_datasheet": bandwidth.pct_of_datasheet if bandwidth else None,
            }
        )
    return rows


def comparison(record: HierarchyRecord) -> list[dict]:
    """Ours against Luo et al. (2024), level by level, in SM cycles, with the likely reasons."""
    out = []
    for level, theirs in LUO_2024["latency_cycles"].items():
        ours = record.latencies.get(level)
        if ours is None:
            continue
        out.append(
            {
                "level": level,
                "ours_cycles": ours.cycles_per_load,
                "ours_ns": ours.ns_per_load,
                "luo_h800_cycles": theirs,
                "difference_pct": 100.0 * (ours.cycles_per_load - theirs) / theirs,
                "why": DIFFERENCES[level],
            }
        )
    return out


def document(record: HierarchyRecord, spec=None, path: str | Path | None = None) -> dict:
    """The JSON document `kernelab hierarchy --json` prints."""
    return {
        **record.to_dict(),
        "rows": hierarchy_rows(record, spec),
        "comparison": comparison(record),
        "published": dict(LUO_2024),
        "record_path": str(path) if path else None,
    }
