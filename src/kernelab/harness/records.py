"""The result record: one timed implementation at one shape, stored as JSON; and comparing
two sets of records with the noise taken into account.

A record file is a JSON list of records. Writes are atomic (a temporary file in the same
folder, then a rename), so an interrupted run never leaves half a file behind.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import lzma
import math
import os
import subprocess
import tempfile
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from kernelab.errors import KernelabError
from kernelab.hardware.detect import DEFAULT_GPU

SCHEMA_VERSION = 1

# The smallest relative change compare will call FAST or SLOW, whatever the noise says:
# clocks and co-tenants move a median by about this much between runs on the same card.
MIN_NOISE = 0.01


# Each card with committed records: its catalog id -> its folder under benchmarks/results/.
CARD_FOLDERS = {"h200": "h200", "h100-sxm": "h100"}
DEFAULT_CARD = DEFAULT_GPU  # the card every command describes when none is named or detected


def results_root() -> Path | None:
    """benchmarks/results/ of the source checkout kernelab runs from (an editable install),
    or None for an installed wheel, which carries no records."""
    for parent in Path(__file__).resolve().parents:
        if (parent / "pyproject.toml").is_file() and (parent / "benchmarks").is_dir():
            path = parent / "benchmarks" / "results"
            return path if path.is_dir() else None
    return None


def card_folder(gpu: str) -> str | None:
    """The folder name of a card with committed records, from its folder name or catalog id
    ("h100" or "h100-sxm"); None for a GPU without committed records."""
    gpu = gpu.strip().lower()
    if gpu in CARD_FOLDERS.values():
        return gpu
    return CARD_FOLDERS.get(gpu)


def committed_cards() -> list[str]:
    """The folders of benchmarks/results/ that hold a card's records, default card first."""
    root = results_root()
    if root is None:
        return []
    found = [name for name in CARD_FOLDERS.values() if (root / name).is_dir()]
    return sorted(found, key=lambda name: (name != CARD_FOLDERS[DEFAULT_CARD], name))


def committed_card_dir(gpu: str = DEFAULT_CARD) -> Path | None:
    """benchmarks/results/<card>/ for a card (folder name or catalog id), or None when this
    checkout has no records of it."""
    root, folder = results_root(), card_folder(gpu)
    if root is None or folder is None or not (root / folder).is_dir():
        return None
    return root / folder


def default_results_dir(gpu_id: str | None, *parts: str) -> Path:
    """The folder a benchmark script writes to when no --out is given.

    $OUT when it is set (and not empty); else, in a source checkout (results_root() is not
    None) with a GPU identified, benchmarks/results/<card>/<parts...>, the card's folder being
    card_folder(gpu_id) ("h100" for "h100-sxm"), or gpu_id itself for a GPU without committed
    records; else ./kernelab-results/<gpu_id or "cpu">/<parts...>, relative to the working
    directory (an installed wheel has no benchmarks/results/; a run without a GPU no card).

    gpu_id: a catalog id ("h100-sxm"), or for a GPU the catalog does not know a name safe for
    a file name (kernelab.harness.ceilings.DeviceIdentity.key); None when no GPU was found.
    """
    out = os.environ.get("OUT")
    if out:
        return Path(out)
    root = results_root()
    if root is not None and gpu_id:
        return root.joinpath(card_folder(gpu_id) or gpu_id, *parts)
    return Path("kernelab-results", gpu_id or "cpu", *parts)


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _git(folder: Path, *args: str) -> subprocess.CompletedProcess | None:
    try:
        return subprocess.run(["git", "-C", str(folder), *args], capture_output=True,
                              text=True, timeout=10, check=False)  # fmt: skip
    except (OSError, subprocess.SubprocessError):  # no git here, or it hung
        return None


def source_state(source_file: Path | None = None) -> tuple[str | None, bool | None]:
    """(commit, dirty) of the git checkout that tracks `source_file` (default: this module,
    so: the code that measured). (None, None) when git does not track it (an installed
    wheel, a tarball, a venv inside some other repository) or git is missing. Dirty means
    tracked files differ from the commit, as in `git describe --dirty`; untracked files (new
    result records) do not count."""
    source_file = (source_file or Path(__file__)).resolve()
    folder = source_file.parent
    tracked = _git(folder, "ls-files", "--error-unmatch", "--", source_file.name)
    if tracked is None or tracked.returncode != 0:
        return None, None
    head = _git(folder, "rev-parse", "HEAD")
    if head is None or head.returncode != 0:
        return None, None
    diff = _git(folder, "diff", "--quiet", "HEAD", "--")
    dirty = None if diff is None or diff.returncode not in (0, 1) else diff.returncode == 1
    return head.stdout.strip(), dirty


@functools.lru_cache(maxsize=1)
def _this_source() -> tuple[str | None, bool | None]:
    return source_state()


def current_commit() -> str | None:
    return _this_source()[0]


def current_dirty() -> bool | None:
    return _this_source()[1]


@dataclass
class MachineRun:
    """Who measured and when, the fields every machine-wide record starts with (the ceilings,
    the hierarchy): the GPU as it names itself, its catalog id (None when the catalog does
    not know it), the driver, the UTC time, and whether the quick settings were used."""

    gpu: str
    gpu_id: str | None
    driver: str | None
    timestamp: str
    quick: bool


@dataclass
class Record:
    op: str
    implementation: str
    shape: dict
    dtype: str
    mode: str  # timing mode: "cold", "hot", "graph", "batch"
    samples_ms: list[float]
    stats: dict  # kernelab.harness.stats.Summary as a dict
    math_mode: str | None = None
    gpu: str = ""  # the name the device reports
    gpu_id: str | None = None  # catalog id, None when the GPU is not in the catalog
    driver: str | None = None
    versions: dict = field(default_factory=dict)
    clocks: dict = field(default_factory=dict)
    timestamp: str = field(default_factory=utc_now)  # ISO 8601, UTC
    flops: float = 0.0
    bytes: float = 0.0
    achieved_tflops: float | None = None
    achieved_gbps: float | None = None
    pct_of_datasheet: float | None = None  # % of the attainable rate on the datasheet roofline
    pct_of_measured: float | None = None  # the same against measured ceilings; None without
    check: dict = field(default_factory=dict)  # error, threshold, ok
    warnings: list[str] = field(default_factory=list)
    extra: dict = field(default_factory=dict)
    # The source the measuring code came from, taken when the record is made; None when it is
    # unknown (no git checkout, no git, or a record written before records carried it).
    git_commit: str | None = field(default_factory=current_commit)
    git_dirty: bool | None = field(default_factory=current_dirty)
    schema_version: int = SCHEMA_VERSION

    @property
    def median_ms(self) -> float:
        return float(self.stats["median"])

    @property
    def rel_noise(self) -> float:
        return float(self.stats.get("rel_noise", 0.0))

    def key(self) -> tuple:
        """What makes two records measurements of the same thing."""
        shape = tuple(sorted((str(k), v) for k, v in self.shape.items()))
        return (self.op, self.implementation, shape, self.dtype, self.mode)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> Record:
        if not isinstance(data, dict):
            raise KernelabError(f"a record must be a JSON object, got {type(data).__name__}")
        version = data.get("schema_version", SCHEMA_VERSION)
        if version > SCHEMA_VERSION:
            raise KernelabError(
                f"record schema {version} is newer than this kernelab reads ({SCHEMA_VERSION})"
            )
        names = {f.name for f in dataclasses.fields(cls)}
        required = {
            f.name
            for f in dataclasses.fields(cls)
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        }
        missing = sorted(required - set(data))
        if missing:
            raise KernelabError(f"record lacks {', '.join(missing)}")
        if not isinstance(data["stats"], dict):
            raise KernelabError(
                f"record stats are {json.dumps(data['stats'])}; they must be a JSON object "
                "with a median"
            )
        if "median" not in data["stats"]:
            raise KernelabError("record stats lack a median")
        # an older record has no git fields: unknown, never the commit of whoever reads it
        known = {"git_commit": None, "git_dirty": None}
        known.update({k: v for k, v in data.items() if k in names})
        unknown = {k: v for k, v in data.items() if k not in names}
        record = cls(**known)
        if unknown:  # written by a newer minor version: keep, do not drop, what we cannot read
            record.extra = {**record.extra, "unrecognised": unknown}
        return record


def read_text(path: str | Path) -> str:
    """The text of `path`, decompressed when its name ends in .xz (large record files are
    committed as .json.xz): every reader of records goes through here, so each reads both."""
    path = Path(path)
    if path.suffix == ".xz":
        with lzma.open(path, "rt", encoding="utf-8") as compressed:
            return compressed.read()
    return path.read_text()


def read_json(path: str | Path, what: str):
    """The JSON document at `path` (.json or .json.xz); a one-line KernelabError when it is
    missing or broken."""
    path = Path(path)
    try:
        return json.loads(read_text(path))
    except FileNotFoundError:
        raise KernelabError(f"no {what} at {path}") from None
    except (json.JSONDecodeError, UnicodeDecodeError, lzma.LZMAError, EOFError) as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise KernelabError(f"{path} is not JSON: {reason}") from None


def write_atomically(path: Path, text: str) -> None:
    """Replace `path` with `text` in one step: a temporary file in its folder, then a rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _jsonable(value):
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value


def save_records(records: list[Record], path: str | Path, *, document: dict | None = None) -> Path:
    """Write `records` as a JSON list to `path`, atomically; return the path. With `document`,
    the file is that object with the list under "records" (load_records reads both forms)."""
    path = Path(path)
    items = [_jsonable(r.to_dict()) for r in records]
    data = items if document is None else {**_jsonable(document), "records": items}
    write_atomically(path, json.dumps(data, indent=1) + "\n")
    return path


def record_from_row(row: dict, versions: dict | None = None) -> Record:
    """A row of benchmarks/triton_kernels.py (flat timing fields, TB/s) as a Record, the one
    schema: its samples and median kept, its provenance what the row says (no git commit it
    did not carry). `versions`: the document's, when the row has none of its own."""
    if not isinstance(row, dict):
        raise KernelabError(f"a record must be a JSON object, got {type(row).__name__}")
    if not row.get("samples_ms") and row.get("median_ms") is None:
        raise KernelabError(f"{row.get('implementation')} has neither samples nor a median")
    tbps = row.get("achieved_tbps")
    stats = {"median": row.get("median_ms")}
    if row.get("rel_noise") is not None:
        stats["rel_noise"] = row["rel_noise"]
    extra = {**(row.get("extra") or {}), "timer": row.get("timer")}
    if "throttled" in row:
        extra["throttled"] = row["throttled"]
    return Record(
        op=row["op"],
        implementation=row["implementation"],
        shape=row.get("shape") or {},
        dtype=row.get("dtype", ""),
        mode=row.get("mode", "cold"),
        samples_ms=row.get("samples_ms") or [],
        stats=stats,
        gpu=row.get("gpu", ""),
        versions=row.get("versions") or dict(versions or {}),
        clocks=row.get("clocks") or {},
        timestamp=row.get("timestamp", ""),
        flops=row.get("flops") or 0.0,
        bytes=row.get("bytes") or 0.0,
        achieved_tflops=row.get("achieved_tflops"),
        achieved_gbps=tbps * 1000 if tbps is not None else row.get("achieved_gbps"),
        check=row.get("check") or {},
        extra=extra,
        git_commit=row.get("git_commit"),
        git_dirty=row.get("git_dirty"),
    )


ROW_FIELDS = ("op", "implementation", "shape", "dtype", "mode", "samples_ms", "median_ms",
              "rel_noise", "gpu", "versions", "clocks", "timestamp", "flops", "bytes",
              "achieved_tbps", "achieved_tflops", "achieved_gbps", "check", "extra", "timer",
              "throttled", "git_commit", "git_dirty")  # fmt: skip


def flat_record(measurement: dict, versions: dict | None = None, **extra) -> Record:
    """A benchmark's flat measurement (record_from_row's fields at the top level, beside its
    own: host_us, the check's error, ...) as a Record, its own fields kept in extra with
    `extra`; a boolean check becomes {"ok": check}."""
    own = {k: v for k, v in measurement.items() if k not in ROW_FIELDS}
    check = measurement.get("check")
    row = {**measurement, "extra": {**(measurement.get("extra") or {}), **extra, **own},
           "check": check if isinstance(check, dict) else {"ok": bool(check)}}  # fmt: skip
    return record_from_row(row, versions)


def records_from(items: list, versions: dict | None = None) -> list[Record]:
    """Records from a JSON list: Record dicts (they carry schema_version) and benchmark rows
    alike (record_from_row)."""
    return [Record.from_dict(item) if isinstance(item, dict) and "schema_version" in item
            else record_from_row(item, versions) for item in items]  # fmt: skip


def load_records(path: str | Path) -> list[Record]:
    """The records in a JSON file (.json, or .json.xz) written by save_records, or a document
    that holds them under "records" (`kernelab bench --json`, benchmarks/pytorch_targets.py);
    KernelabError when it is not one."""
    path = Path(path)
    data = read_json(path, "record file")
    versions = None
    if isinstance(data, dict) and "records" in data:  # a document that holds a record list
        versions = data.get("versions") if isinstance(data.get("versions"), dict) else None
        data = data["records"]
    if not isinstance(data, list):
        raise KernelabError(f"{path} holds no list of records")
    try:
        return records_from(data, versions)
    except KernelabError as exc:
        raise KernelabError(f"{path}: {exc}") from None
    except KeyError as exc:  # a benchmark row without its op or implementation
        raise KernelabError(f"{path}: a record lacks {exc.args[0]}") from None


def append_record(record: Record, path: str | Path) -> Path:
    """Add one record to the file at `path` (created when missing), atomically."""
    path = Path(path)
    existing = load_records(path) if path.exists() else []
    return save_records([*existing, record], path)


@dataclass(frozen=True)
class Comparison:
    op: str
    implementation: str
    shape: dict
    dtype: str
    mode: str
    old_ms: float
    new_ms: float
    change_pct: float  # (new - old) / old * 100: negative is faster
    speedup: float  # old / new: above 1 is faster
    noise_pct: float  # the band within which the two are called SAME, in % of old
    label: str  # "FAST", "SLOW" or "SAME"
    old_gpu: str = ""  # the GPU each side was measured on (its catalog id, else its name)
    new_gpu: str = ""

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def label_change(
    old_ms: float, new_ms: float, old_noise: float, new_noise: float
) -> tuple[str, float]:
    """FAST, SLOW or SAME, and the noise band used (a fraction of old_ms).

    The rule: SAME when |new - old| <= max(old_noise, new_noise, MIN_NOISE) * old, where a
    noise is a run's rel_noise (IQR / median). A difference smaller than the spread of single
    calls in either run is not evidence of a change; below 1 % it is not worth a label.
    """
    band = max(old_noise or 0.0, new_noise or 0.0, MIN_NOISE)
    if abs(new_ms - old_ms) <= band * old_ms:
        return "SAME", band
    return ("FAST" if new_ms < old_ms else "SLOW"), band


def _latest_by_key(records: list[Record]) -> dict[tuple, Record]:
    """One record per key; the later one in the list wins (files are appended in time order)."""
    return {r.key(): r for r in records}


def measured_on(record: Record) -> str:
    """The GPU a record was measured on: its catalog id, else the name the device gave, else
    "" (unknown)."""
    return record.gpu_id or record.gpu or ""


def compare_records(old: list[Record], new: list[Record]) -> list[Comparison]:
    """Pair records by (op, implementation, shape, dtype, mode) and label each pair."""
    old_by_key = _latest_by_key(old)
    comparisons = []
    for key, after in _latest_by_key(new).items():
        before = old_by_key.get(key)
        if before is None:
            continue
        label, band = label_change(
            before.median_ms, after.median_ms, before.rel_noise, after.rel_noise
        )
        comparisons.append(
            Comparison(
                op=after.op,
                implementation=after.implementation,
                shape=dict(after.shape),
                dtype=after.dtype,
                mode=after.mode,
                old_ms=before.median_ms,
                new_ms=after.median_ms,
                change_pct=(after.median_ms - before.median_ms) / before.median_ms * 100,
                speedup=before.median_ms / after.median_ms,
                noise_pct=band * 100,
                label=label,
                old_gpu=measured_on(before),
                new_gpu=measured_on(after),
            )
        )
    return comparisons


def unmatched(old: list[Record], new: list[Record]) -> tuple[list[Record], list[Record]]:
    """Records only in old, and only in new (no partner with the same key)."""
    old_by_key, new_by_key = _latest_by_key(old), _latest_by_key(new)
    return (
        [r for k, r in old_by_key.items() if k not in new_by_key],
        [r for k, r in new_by_key.items() if k not in old_by_key],
    )
