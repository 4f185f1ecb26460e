"""Read Nsight Compute results into one KernelProfile per profiled kernel launch.

Two sources give the same numbers in the same (base) units:
  .ncu-rep    through NVIDIA's `ncu_report` Python module (PyPI `ncu-report` here; on a
              machine with Nsight Compute, its extras/python directory)
  .csv        ncu's `--page raw --csv` (every metric, a units row, one row per kernel) or
              `--page details --csv` (section rows with display names, plus rule results)
Either may be xz-compressed (`.xz`); it is decompressed to a temporary file first.

ncu_report reports base units (ns, byte, byte/s, hz); ncu's CSV pages scale them for people
(ms, Mbyte, Gbyte/s, Ghz). CSV values are converted back, so a metric reads the same whichever
file it came from.
"""

from __future__ import annotations

import csv
import glob
import importlib
import importlib.util
import json
import lzma
import re
import shutil
import subprocess
import sys
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from kernelab.errors import KernelabError, MissingToolError, one_line_failures
from kernelab.profiling import metrics as m

# Where Nsight Compute installs its Python report reader (newest version first).
NCU_PYTHON_GLOBS = (
    "/opt/nvidia/nsight-compute/*/extras/python",
    "/usr/local/cuda/nsight-compute-*/extras/python",
)

_FIXED_CSV_COLUMNS = (
    "ID",
    "Process ID",
    "Process Name",
    "Host Name",
    "Kernel Name",
    "Context",
    "Stream",
    "Block Size",
    "Grid Size",
    "Device",
    "CC",
)
_MISSING = {"", "n/a", "no data", "N/A"}


@dataclass
class KernelProfile:
    index: int  # the launch's position in the report
    name: str  # the function name ncu shows (no parameter list)
    demangled_name: str
    mangled_name: str | None
    grid: tuple[int, int, int] | None  # blocks
    block: tuple[int, int, int] | None  # threads
    registers_per_thread: int | None
    shared_mem_per_block: float | None  # bytes: static + dynamic + driver-reserved
    duration_ns: float | None
    device: str | None  # "NVIDIA H200"
    metrics: dict = field(default_factory=dict)  # metric name -> value in base units (or str)
    units: dict = field(default_factory=dict)  # metric name -> base unit ("ns", "byte", "%")
    rules: list = field(default_factory=list)  # ncu's own rule findings: {section, rule, ...}
    source: str = ""  # "ncu-rep", "csv-raw" or "csv-details"

    def metric(self, *names: str) -> float | None:
        return m.number(self.metrics, *names)

    def to_dict(self, *, include_metrics: bool = False) -> dict:
        data = {
            "index": self.index,
            "name": self.name,
            "demangled_name": self.demangled_name,
            "mangled_name": self.mangled_name,
            "grid": list(self.grid) if self.grid else None,
            "block": list(self.block) if self.block else None,
            "registers_per_thread": self.registers_per_thread,
            "shared_mem_per_block": self.shared_mem_per_block,
            "duration_ns": self.duration_ns,
            "device": self.device,
            "source": self.source,
            "rules": list(self.rules),
        }
        if include_metrics:
            data["metrics"] = {
                k: {"value": v, "unit": self.units.get(k, "")} for k, v in self.metrics.items()
            }
        return data


# --- the ncu_report module ------------------------------------------------------------------


NO_NCU_REPORT = (
    "cannot read .ncu-rep files: install the ncu-report package (pip install ncu-report) "
    "or Nsight Compute (its extras/python directory holds ncu_report)"
)


def ncu_report_findable() -> bool:
    """Whether ncu_report can be imported, found without importing it: a process that has
    initialised CUDA must not load the module at all (see load_report)."""
    if importlib.util.find_spec("ncu_report") is not None:
        return True
    return any(
        Path(directory, "ncu_report.py").is_file()
        for pattern in NCU_PYTHON_GLOBS
        for directory in glob.glob(pattern)
    )


def import_ncu_report():
    """NVIDIA's ncu_report module: installed, or found beside an Nsight Compute install."""
    try:
        return importlib.import_module("ncu_report")
    except ImportError:
        pass
    for pattern in NCU_PYTHON_GLOBS:
        for directory in sorted(glob.glob(pattern), reverse=True):
            if directory not in sys.path:
                sys.path.append(directory)
            try:
                return importlib.import_module("ncu_report")
            except ImportError:
                continue
    raise MissingToolError(NO_NCU_REPORT)


# --- files ----------------------------------------------------------------------------------


@contextmanager
def _plain_file(path: Path):
    """`path`, or a temporary decompressed copy of it when it ends in .xz."""
    if path.suffix != ".xz":
        yield path
        return
    tmpdir = tempfile.mkdtemp(prefix="kernelab-ncu-")
    target = Path(tmpdir) / path.stem
    try:
        with lzma.open(path) as src, open(target, "wb") as dst:
            shutil.copyfileobj(src, dst)
    except lzma.LZMAError as exc:
        shutil.rmtree(tmpdir, ignore_errors=True)
        raise KernelabError(f"{path}: not a valid .xz file ({exc})") from None
    try:
        yield target
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)


def _check_exists(path) -> Path:
    if not str(path).strip():
        raise KernelabError("no report named: the path is an empty string")
    path = Path(path)
    if path.is_dir():
        raise KernelabError(f"{path} is a folder, not a report: give a .ncu-rep or .csv file")
    if not path.is_file():
        raise KernelabError(f"no such report: {path}")
    return path


def _kind(path: Path) -> str:
    name = path.name[: -len(".xz")] if path.name.endswith(".xz") else path.name
    if name.endswith(".ncu-rep"):
        return "ncu-rep"
    if name.endswith(".csv"):
        return "csv"
    raise KernelabError(f"{path}: expected a .ncu-rep or .csv file (optionally .xz)")


def load(path) -> list[KernelProfile]:
    """Every profiled kernel in a .ncu-rep or ncu CSV file (either may end in .xz)."""
    path = _check_exists(path)
    return load_report(path) if _kind(path) == "ncu-rep" else load_csv(path)


# --- .ncu-rep -------------------------------------------------------------------------------


def _strip_markup(text: str) -> str:
    # ncu's rule messages link sections as "@section:Id:Display Name@".
    return re.sub(r"@\w+:[^:@]*:([^@]*)@", r"\1", text)


def _rules_from_report(action, ncu_report) -> list[dict]:
    kinds = {
        getattr(ncu_report, f"MsgType_{k}", None): v
        for k, v in (("OK", "INF"), ("OPTIMIZATION", "OPT"), ("WARNING", "WRN"), ("ERR", "ERR"))
    }
    rules = []
    for result in action.rule_results_as_dicts():
        message = result.get("rule_message") or {}
        text = _strip_markup(message.get("message", "")).strip()
        if not text:
            continue
        speedup = (result.get("speedup_estimation") or {}).get("speedup")
        rules.append(
            {
                "section": result.get("section_identifier", ""),
                "rule": result.get("rule_identifier", ""),
                "type": kinds.get(message.get("type"), ""),
                "message": text,
                "speedup_pct": speedup,
            }
        )
    return rules


def _int_or_none(value) -> int | None:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _dims(metrics: dict, prefix: str) -> tuple[int, int, int] | None:
    dims = [_int_or_none(metrics.get(f"{prefix}_{axis}")) for axis in "xyz"]
    return tuple(dims) if all(d is not None for d in dims) else None


def _profile(index: int, names: tuple, metrics: dict, units: dict, **extra) -> KernelProfile:
    name, demangled, mangled = names
    registers = _int_or_none(metrics.get(m.REGISTERS_PER_THREAD))
    return KernelProfile(
        index=index,
        name=name,
        demangled_name=demangled,
        mangled_name=mangled,
        grid=extra.pop("grid", None) or _dims(metrics, "launch__grid_dim"),
        block=extra.pop("block", None) or _dims(metrics, "launch__block_dim"),
        registers_per_thread=registers,
        shared_mem_per_block=m.number(metrics, m.SHARED_MEM_PER_BLOCK),
        duration_ns=m.number(metrics, m.DURATION),
        device=metrics.get(m.DEVICE_NAME) if isinstance(metrics.get(m.DEVICE_NAME), str) else None,
        metrics=metrics,
        units=units,
        **extra,
    )


def load_report(path) -> list[KernelProfile]:
    """Every kernel launch in a .ncu-rep file (or .ncu-rep.xz), via ncu_report.

    The report is read in a child process (`python -m kernelab.profiling.report PATH`): on the
    H200 a process that had already initialised CUDA through torch died without a message
    while ncu_report read a report (in the lab and in the timeline drill), while a fresh
    process read the same reports fine."""
    path = _check_exists(path)
    # A missing module is one line here, not a child's traceback. Found, never imported: the
    # timeline example's parent (CUDA initialised) still died on an H200 once the drill
    # reached this point, with the reads already in the child.
    if not ncu_report_findable():
        raise MissingToolError(NO_NCU_REPORT)
    done = subprocess.run(
        [sys.executable, "-m", "kernelab.profiling.report", str(path)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines()
        why = lines[-1] if lines else f"the reader died (exit code {done.returncode})"
        raise KernelabError(f"{path}: {why.removeprefix('kernelab: ')}")
    return [
        _profile(
            index, tuple(a["names"]), a["metrics"], a["units"], rules=a["rules"], source="ncu-rep"
        )
        for index, a in enumerate(json.loads(done.stdout))
    ]


def read_actions(path: Path) -> list[dict]:
    """What ncu_report holds for each launch, as plain data: names, metrics, units, rules."""
    ncu_report = import_ncu_report()
    with _plain_file(path) as plain:
        try:
            context = ncu_report.load_report(str(plain))
        except Exception as exc:  # the module raises its own types for unreadable files
            raise KernelabError(f"{path}: ncu_report cannot read it ({exc})") from None
        actions = []
        for r in range(context.num_ranges()):
            report_range = context.range_by_idx(r)
            for a in range(report_range.num_actions()):
                action = report_range.action_by_idx(a)
                metrics, units = {}, {}
                for name in action.metric_names():
                    metric = action.metric_by_name(name)
                    metrics[name] = metric.value() if metric.has_value() else None
                    units[name] = metric.unit()
                names = (
                    action.name(),
                    action.name(ncu_report.IAction.NameBase_DEMANGLED),
                    action.name(ncu_report.IAction.NameBase_MANGLED),
                )
                rules = _rules_from_report(action, ncu_report)
                actions.append({"names": names, "metrics": metrics, "units": units, "rules": rules})
    return actions


def _plain_value(value):
    """ncu_report's values as JSON: numbers and strings as they are, anything else as text."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


@one_line_failures
def _main(argv: list[str]) -> int:
    actions = read_actions(_check_exists(argv[0]))
    for action in actions:
        action["metrics"] = {k: _plain_value(v) for k, v in action["metrics"].items()}
    json.dump(actions, sys.stdout)
    return 0


# --- CSV: units -----------------------------------------------------------------------------

_PREFIXES = {"": 1.0, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}
_TIMES = {
    "ns": 1e-9,
    "nsecond": 1e-9,
    "us": 1e-6,
    "usecond": 1e-6,
    "ms": 1e-3,
    "msecond": 1e-3,
    "s": 1.0,
    "second": 1.0,
}


def _unit_part(part: str) -> tuple[float, str]:
    """A unit without '/', as (factor to base, base): "Mbyte" -> (1e6, "byte")."""
    if part in _TIMES:
        return _TIMES[part], "s"
    if part.lower().endswith("hz"):
        prefix = part[:-2].upper()
        if prefix in _PREFIXES:
            return _PREFIXES[prefix], "hz"
    if part.endswith("byte"):
        prefix = part[:-4].upper()
        if prefix in _PREFIXES:
            return _PREFIXES[prefix], "byte"
    return 1.0, part


def base_unit(unit: str) -> tuple[float, str]:
    """ncu's display unit as (factor, base unit): value_in_base = value * factor.

    Times become ns, as ncu_report reports durations; rates per time become per second.
    """
    numerator, _, denominator = unit.partition("/")
    factor, base = _unit_part(numerator)
    if base == "s":
        factor, base = factor / 1e-9, "ns"
    if not denominator:
        return factor, base
    d_factor, d_base = _unit_part(denominator)
    return factor / d_factor, f"{base}/{d_base}"


def _csv_value(text: str, unit: str) -> tuple[object, str]:
    text = text.strip()
    factor, base = base_unit(unit)
    if text in _MISSING:
        return None, base
    plain = text.replace(",", "")
    try:
        value = float(plain)
    except ValueError:
        return text, base
    if factor == 1.0 and re.fullmatch(r"-?\d+", plain):
        return int(plain), base
    return value * factor, base


def _dims_text(text: str) -> tuple[int, int, int] | None:
    found = re.findall(r"\d+", text or "")
    return tuple(int(x) for x in found) if len(found) == 3 else None


# --- CSV: the details page's display names --------------------------------------------------

# (section, display name) -> the metric it shows. ncu's details page labels metrics for
# people; these are the ones the diagnosis reads (checked against the raw page of one run).
DETAILS_NAMES = {
    ("GPU Speed Of Light Throughput", "Duration"): m.DURATION,
    ("GPU Speed Of Light Throughput", "Compute (SM) Throughput"): m.SM_THROUGHPUT,
    ("GPU Speed Of Light Throughput", "Memory Throughput"): m.MEMORY_THROUGHPUT,
    ("GPU Speed Of Light Throughput", "DRAM Throughput"): m.DRAM_THROUGHPUT,
    ("GPU Speed Of Light Throughput", "L1/TEX Cache Throughput"): m.L1_THROUGHPUT[1],
    ("GPU Speed Of Light Throughput", "L2 Cache Throughput"): m.L2_THROUGHPUT,
    ("GPU Speed Of Light Throughput", "SM Frequency"): m.SM_CYCLES_PER_SECOND,
    ("Memory Workload Analysis", "Memory Throughput"): m.DRAM_BYTES_PER_SECOND,
    ("Memory Workload Analysis", "L1/TEX Hit Rate"): m.L1_HIT_RATE,
    ("Memory Workload Analysis", "L2 Hit Rate"): m.L2_HIT_RATE,
    ("Scheduler Statistics", "One or More Eligible"): m.ISSUE_ACTIVE,
    ("Warp State Statistics", "Warp Cycles Per Issued Instruction"): (
        "smsp__average_warp_latency_per_inst_issued.ratio"
    ),
    ("Launch Statistics", "Grid Size"): m.GRID_SIZE,
    ("Launch Statistics", "Block Size"): m.BLOCK_SIZE,
    ("Launch Statistics", "Registers Per Thread"): m.REGISTERS_PER_THREAD,
    ("Launch Statistics", "Waves Per SM"): m.WAVES_PER_SM,
    ("Launch Statistics", "# SMs"): m.LAUNCH_SM_COUNT,
    ("Launch Statistics", "Static Shared Memory Per Block"): "launch__shared_mem_per_block_static",
    ("Launch Statistics", "Dynamic Shared Memory Per Block"): (
        "launch__shared_mem_per_block_dynamic"
    ),
    ("Launch Statistics", "Driver Shared Memory Per Block"): "launch__shared_mem_per_block_driver",
    ("Occupancy", "Theoretical Occupancy"): m.THEORETICAL_OCCUPANCY,
    ("Occupancy", "Achieved Occupancy"): m.ACHIEVED_OCCUPANCY,
    ("Occupancy", "Block Limit Registers"): m.OCCUPANCY_LIMITS["registers"],
    ("Occupancy", "Block Limit Shared Mem"): m.OCCUPANCY_LIMITS["shared memory"],
    ("Occupancy", "Block Limit Warps"): m.OCCUPANCY_LIMITS["warps (block size)"],
    ("Occupancy", "Block Limit SM"): m.OCCUPANCY_LIMITS["blocks per SM"],
    ("Occupancy", "Block Limit Barriers"): m.OCCUPANCY_LIMITS["barriers"],
}


# --- CSV: loading ---------------------------------------------------------------------------


def load_csv(path) -> list[KernelProfile]:
    """Every kernel in ncu's `--page raw --csv` or `--page details --csv` output (or .xz)."""
    path = _check_exists(path)
    with _plain_file(path) as plain:
        with open(plain, newline="", encoding="utf-8", errors="replace") as f:
            rows = list(csv.reader(_skip_log_lines(f)))
    if not rows:
        raise KernelabError(f"{path}: empty CSV")
    header = rows[0]
    if "Metric Name" in header and "Metric Value" in header:
        return _load_details(path, header, rows[1:])
    if "Kernel Name" in header:
        return _load_raw(path, header, rows[1:])
    raise KernelabError(f"{path}: not an ncu CSV page (expected --page raw or --page details)")


def _skip_log_lines(lines):
    # ncu prints "==PROF==" / "==WARNING==" lines before the CSV when both go to one stream.
    for line in lines:
        if not line.startswith("=="):
            yield line


def _load_raw(path: Path, header: list[str], rows: list[list[str]]) -> list[KernelProfile]:
    if not rows:
        return []
    # ncu writes a units row (blank ID) under the header unless --print-units was changed.
    has_units = rows[0] and rows[0][0] == ""
    units_row, data = (rows[0], rows[1:]) if has_units else ([""] * len(header), rows)
    if len(units_row) != len(header):
        raise KernelabError(f"{path}: the units row does not match the header")
    profiles = []
    for row in data:
        if len(row) != len(header):
            raise KernelabError(f"{path}: a row has {len(row)} fields, the header {len(header)}")
        fixed = dict(zip(header, row, strict=True))
        metrics, units = {}, {}
        for name, unit, text in zip(header, units_row, row, strict=True):
            if name in _FIXED_CSV_COLUMNS:
                continue
            metrics[name], units[name] = _csv_value(text, unit)
        profiles.append(_csv_profile(len(profiles), fixed, metrics, units, [], "csv-raw"))
    return profiles


def _load_details(path: Path, header: list[str], rows: list[list[str]]) -> list[KernelProfile]:
    by_id: dict[str, dict] = {}
    for row in rows:
        record = dict(zip(header, row, strict=False))  # short rows: missing trailing fields
        entry = by_id.setdefault(
            record["ID"], {"fixed": record, "metrics": {}, "units": {}, "rules": []}
        )
        section, label = record.get("Section Name", ""), record.get("Metric Name", "")
        if record.get("Rule Name"):
            speedup = record.get("Estimated Speedup") or ""
            entry["rules"].append(
                {
                    "section": section,
                    "rule": record["Rule Name"],
                    "type": record.get("Rule Type", ""),
                    "message": _strip_markup(record.get("Rule Description", "")).strip(),
                    "speedup_pct": float(speedup) if re.fullmatch(r"[\d.]+", speedup) else None,
                }
            )
            continue
        if not label:
            continue
        name = (
            label
            if section == "Command line profiler metrics"
            else DETAILS_NAMES.get((section, label))
        )
        if name is None:
            name = f"{section}/{label}"  # kept under its display name, unmapped
        value, unit = _csv_value(record.get("Metric Value", ""), record.get("Metric Unit", ""))
        entry["metrics"][name], entry["units"][name] = value, unit
    profiles = []
    for entry in by_id.values():
        metrics = entry["metrics"]
        parts = [
            metrics.get(f"launch__shared_mem_per_block_{p}")
            for p in ("static", "dynamic", "driver")
        ]
        if m.SHARED_MEM_PER_BLOCK not in metrics and all(
            isinstance(p, (int, float)) for p in parts
        ):
            metrics[m.SHARED_MEM_PER_BLOCK] = float(sum(parts))
            entry["units"][m.SHARED_MEM_PER_BLOCK] = "byte/block"
        profiles.append(
            _csv_profile(
                len(profiles),
                entry["fixed"],
                metrics,
                entry["units"],
                entry["rules"],
                "csv-details",
            )
        )
    return profiles


def _csv_profile(index, fixed, metrics, units, rules, source) -> KernelProfile:
    name = fixed.get("Kernel Name", "")
    return _profile(
        index,
        (name, name, None),
        metrics,
        units,
        grid=_dims_text(fixed.get("Grid Size", "")),
        block=_dims_text(fixed.get("Block Size", "")),
        rules=rules,
        source=source,
    )


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
