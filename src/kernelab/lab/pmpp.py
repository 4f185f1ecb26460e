"""The PMPP primitives in the lab: the reduction, transpose and histogram ladders (and any
ladder added to LADDERS, one entry each): their compile reports anywhere nvcc is, their
checks and timings on a GPU, the ceiling each is measured against, and their targets.

Each ladder's records carry extra["ladder"] = its name (the engines write it). The lab's
stage writes them under DIR/records/pmpp/; the gate and the report read them back from any
results folder. Nothing here measures at import time; the engines are imported in the
functions that run them.

The ceilings. A reduction reads n x itemsize bytes and writes one value: its roof is a pure
read, so it is measured against the read-only probe (probes.bandwidth.hbm_read), timed in the
same run as a record named READ_CEILING. The transpose moves its bytes both ways: its engine
times dst.copy_(src) of the same bytes beside it, the record "copy". The histogram reads its
values and writes a few counts: like the reduction it is judged against the read-only
ceiling, timed in its own run (its engine's copy of the values' bytes is shown beside it).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from kernelab.harness.records import Record
from kernelab.lab.derive import from_samples

Progress = Callable[[str], None]

READ_CEILING = "read ceiling"  # the reduce ladder's ceiling record, timed in the same run
COPY_CEILING = "copy"  # the transpose and histogram engines' ceiling row

# The lab's sizes: within the --quick budget, and each at or above the size its target is
# judged at (64 MiB of fp32 for the reduction, 8192x8192 for the transpose).
REDUCE_SIZES = {True: [1 << 24, 1 << 26], False: [1 << 20, 1 << 24, 1 << 26, 1 << 28]}
READ_CEILING_BYTES = {True: 1 << 30, False: 4 << 30}
TRANSPOSE_SHAPES = [(8192, 8192)]
SCAN_SIZES = {True: [1 << 24, 1 << 26], False: [1 << 20, 1 << 24, 1 << 26, 1 << 28]}
HISTOGRAM_SIZES = {True: [1 << 26], False: [1 << 26, 1 << 28]}
HISTOGRAM_BINS = 256
MAX_TIME_S = {True: 0.5, False: 1.0}


def _records_bytes(record: Record) -> float:
    return float(record.bytes or 0.0)


def _histogram_copy_bytes(record: Record) -> float:
    """The histogram's copy row copies the values: n x itemsize read and written."""
    from kernelab.roofline.costs import dtype_bytes

    return 2.0 * record.shape["n"] * dtype_bytes(record.dtype)


@dataclass(frozen=True)
class Target:
    """One issue target of a ladder, judged on its newest run (lab.gate.pmpp_criteria).

    step: "final" (the last step of the ladder: the one the target names) or "best" (the
    fastest step of each case). ceiling_at and each anchor's `at` say which cases the part
    is judged on; an anchor passes when anchor time / step time >= its ratio."""

    name: str
    step: str
    ceiling_pct: float
    ceiling_at: Callable[[Record], bool]
    anchors: tuple[tuple[str, float, Callable[[Record], bool]], ...] = ()
    stated: Callable[[Record], bool] | None = None  # cases shown beside it, never judged
    judged: Callable[[Record], bool] = lambda r: True  # cases the target is about at all


@dataclass(frozen=True)
class PrimitiveLadder:
    name: str  # extra["ladder"] of its records, and `kernelab ladder NAME`
    title: str
    op: str  # the spec op its records measure
    step_prefix: str  # "reduce:" ... its steps' implementation names
    ceiling: str  # "read" (READ_CEILING record) or "copy" (COPY_CEILING row per case)
    ceiling_words: str
    target: Target
    compile: Callable[[Progress], list[dict]] | None = None  # None: not wired in this lab
    time: Callable[[bool, Progress], tuple[list[Record], list[str]]] | None = None
    copy_bytes: Callable[[Record], float] = _records_bytes
    case_keys: tuple[str, ...] = ()  # extra fields that split cases (the distribution)
    final_step: str | None = None  # the step a "final" target names; None: the last timed
    docs: str = ""


# --- the engines, adapted: compile reports anywhere nvcc is, timings on a GPU ----------------


def _compile_reduce(progress: Progress) -> list[dict]:
    from kernelab.ladders.reduce.ladder import compile_report, parse_steps

    return compile_report(parse_steps(None), "fp32", progress)


def _compile_transpose(progress: Progress) -> list[dict]:
    from kernelab.ladders.transpose.ladder import compile_transpose, parse_steps

    return compile_transpose(parse_steps(None), progress)


def _compile_scan(progress: Progress) -> list[dict]:
    from kernelab.ladders.scan.ladder import compile_scan, parse_steps

    return compile_scan(parse_steps(None), progress)


def _compile_histogram(progress: Progress) -> list[dict]:
    from kernelab.ladders.histogram.ladder import compile_histogram, parse_steps

    return compile_histogram(parse_steps(None), progress)


def correct_steps(steps, checks: list[dict]) -> tuple[list, list[str]]:
    """(the steps every check passed, one note per step that failed one): a wrong step is
    never timed."""
    good = [s for s in steps if all(c["ok"] for c in checks if c["step"] == s.name)]
    wrong = [f"{s.name} failed its check and was not timed" for s in steps if s not in good]
    return good, wrong


def read_ceiling_record(quick: bool, progress: Progress) -> Record:
    """The read-only ceiling, timed now as a Record with its samples: a pass over
    READ_CEILING_BYTES of fp32, recorded as op reduce_sum at that n (the same bytes a
    reduction of n fp32 reads), so the gate recomputes it from its samples like any record."""
    from kernelab.environment import software_versions
    from kernelab.harness.ceilings import this_gpu
    from kernelab.ladders.reduce.ladder import to_record
    from kernelab.probes.bandwidth import hbm_read
    from kernelab.spec.reference import get_op

    progress("measuring the read-only ceiling (probes.bandwidth.hbm_read)")
    nbytes, timing = hbm_read(READ_CEILING_BYTES[quick], max_time_s=MAX_TIME_S[quick])
    n = nbytes // 4
    cost = get_op("reduce_sum").cost({"n": n}, "fp32")
    identity = this_gpu("kernelab lab")
    record = to_record(READ_CEILING, n, "fp32", timing, cost, identity, software_versions())
    record.extra = {**record.extra, "ceiling": "read"}
    return record


def _time_reduce(quick: bool, progress: Progress) -> tuple[list[Record], list[str]]:
    from kernelab.ladders.reduce import ladder

    steps = ladder.parse_steps(None)
    good, notes = correct_steps(steps, ladder.check_steps(steps, [], ["fp32"], progress))
    ceiling = read_ceiling_record(quick, progress)
    _, records, cub_line = ladder.time_ladder(good, REDUCE_SIZES[quick], ["fp32"],
                                              max_time_s=MAX_TIME_S[quick], progress=progress)  # fmt: skip
    return [ceiling, *records], [*notes, cub_line]


def _time_transpose(quick: bool, progress: Progress) -> tuple[list[Record], list[str]]:
    from kernelab.ladders.transpose import ladder

    steps = ladder.parse_steps(None)
    good, notes = correct_steps(steps, ladder.check_steps(steps, ("fp32",), progress))
    _, records = ladder.time_ladder(good, TRANSPOSE_SHAPES, "fp32",
                                    max_time_s=MAX_TIME_S[quick], progress=progress)  # fmt: skip
    return records, [*notes, ladder.NO_CUB]


def _time_scan(quick: bool, progress: Progress) -> tuple[list[Record], list[str]]:
    from kernelab.ladders.scan import ladder

    steps = ladder.parse_steps(None)
    good, notes = correct_steps(steps, ladder.check_steps(steps, ("fp32",), progress))
    _, records, found = ladder.time_ladder(good, SCAN_SIZES[quick], "fp32",
                                           max_time_s=MAX_TIME_S[quick], progress=progress)  # fmt: skip
    return records, [*notes, *found]


def _time_histogram(quick: bool, progress: Progress) -> tuple[list[Record], list[str]]:
    from kernelab.ladders.histogram import ladder

    steps = ladder.parse_steps(None)
    good, notes = correct_steps(steps, ladder.check_steps(steps, ("int32",), progress))
    ceiling = read_ceiling_record(quick, progress)
    ceiling.extra = {**ceiling.extra, "ladder": "histogram"}
    read = (ceiling.bytes / (ceiling.median_ms * 1e-3), "hbm_read, timed in the same run")
    _, records, found = ladder.time_ladder(good, HISTOGRAM_SIZES[quick], HISTOGRAM_BINS, "int32",
                                           max_time_s=MAX_TIME_S[quick], progress=progress,
                                           read=read)  # fmt: skip
    return [ceiling, *records], [*notes, *found]


def _elements(r: Record) -> int:
    return int(r.shape.get("n") or r.shape.get("rows", 0) * r.shape.get("cols", 0))


def _input_bytes(r: Record) -> float:
    from kernelab.roofline.costs import dtype_bytes

    return _elements(r) * dtype_bytes(r.dtype)


def _square_8192(r: Record) -> bool:
    return r.shape.get("rows") == 8192 and r.shape.get("cols") == 8192


def _uniform(r: Record) -> bool:
    return r.extra.get("distribution", "uniform") == "uniform"


# One entry per ladder: a new ladder plugs in here, with its compile and time adapters.
LADDERS: tuple[PrimitiveLadder, ...] = (
    PrimitiveLadder(
        name="reduce", title="Sum reduction", op="reduce_sum", step_prefix="reduce:",
        ceiling="read", ceiling_words="the read-only ceiling (hbm_read, timed in the same run)",
        target=Target(
            name="reduction final step >= 95 % of the read ceiling (>= 64 MiB), >= torch.sum "
                 "and CUB (2^20 to 2^30 elements)",
            step="final", ceiling_pct=95.0,
            ceiling_at=lambda r: _input_bytes(r) >= 64 * 1024**2,
            anchors=(("torch.sum", 1.0, lambda r: 2**20 <= _elements(r) <= 2**30),
                     ("cub", 1.0, lambda r: 2**20 <= _elements(r) <= 2**30)),
        ),
        compile=_compile_reduce, time=_time_reduce, final_step="reduce:10",
        docs="docs/ladders/reduce.md",
    ),
    PrimitiveLadder(
        name="scan", title="Inclusive scan", op="scan", step_prefix="scan:",
        ceiling="copy", ceiling_words="dst.copy_(src) of the same bytes, timed in the same run",
        target=Target(
            name="single-pass scan >= 90 % of the copy ceiling (>= 2^26 elements), "
                 ">= torch.cumsum, within 5 % of CUB",
            step="final", ceiling_pct=90.0,
            ceiling_at=lambda r: _elements(r) >= 2**26,
            anchors=(("torch.cumsum", 1.0, lambda r: _elements(r) >= 2**26),
                     ("cub", 0.95, lambda r: _elements(r) >= 2**26)),
        ),
        compile=_compile_scan, time=_time_scan, final_step="scan:05", docs="docs/ladders/scan.md",
    ),
    PrimitiveLadder(
        name="histogram", title="Histogram", op="histogram", step_prefix="histogram:",
        ceiling="read", ceiling_words="the read-only ceiling (hbm_read, timed in the same run)",
        target=Target(
            name="histogram (uniform) >= 80 % of the read ceiling, >= 5x torch.bincount; "
                 "skewed case stated",
            step="best", ceiling_pct=80.0, ceiling_at=_uniform,
            anchors=(("torch.bincount", 5.0, _uniform),),
            stated=lambda r: not _uniform(r),
        ),
        compile=_compile_histogram, time=_time_histogram, copy_bytes=_histogram_copy_bytes,
        case_keys=("distribution",), docs="docs/ladders/histogram.md",
    ),
    PrimitiveLadder(
        name="transpose", title="Matrix transpose", op="transpose", step_prefix="transpose:",
        ceiling="copy", ceiling_words="dst.copy_(src) of the same bytes, timed in the same run",
        target=Target(
            name="transpose best step >= 90 % of the copy ceiling at 8192x8192, >= torch",
            step="best", ceiling_pct=90.0, ceiling_at=_square_8192,
            anchors=(("torch.transpose", 1.0, _square_8192),), judged=_square_8192,
        ),
        compile=_compile_transpose, time=_time_transpose, docs="docs/ladders/transpose.md",
    ),
)  # fmt: skip


def get_ladder(name: str) -> PrimitiveLadder:
    return next(ladder for ladder in LADDERS if ladder.name == name)


# --- reading the records back ------------------------------------------------------------------


@dataclass
class LadderRun:
    """The newest run (one record file) of a ladder in a results folder, from samples."""

    ladder: PrimitiveLadder
    records: list[Record]  # of that file, each from samples
    source: str  # the record file
    day: str
    older: int = 0  # record files of older runs, not judged
    unjudged: list[str] = field(default_factory=list)  # records without samples in the run

    def cases(self) -> dict[tuple, list[Record]]:
        """Records by case (shape, dtype and the ladder's case keys), ceiling rows included."""
        found: dict[tuple, list[Record]] = {}
        for r in self.records:
            key = (json.dumps(r.shape, sort_keys=True), r.dtype,
                   *(str(r.extra.get(k, "")) for k in self.ladder.case_keys))  # fmt: skip
            found.setdefault(key, []).append(r)
        return found

    def steps(self, case: list[Record]) -> list[Record]:
        return [r for r in case if r.implementation.startswith(self.ladder.step_prefix)]

    def chosen(self, case: list[Record]) -> Record | None:
        """The step a target judges in a case: the ladder's last step or its fastest."""
        steps = self.steps(case)
        if not steps:
            return None
        if self.ladder.target.step == "final":
            if self.ladder.final_step is not None:  # a final step that failed its check or
                # was not timed is missing, not replaced by the one before it
                return next((r for r in steps if r.implementation == self.ladder.final_step),
                            None)  # fmt: skip
            return max(steps, key=lambda r: r.implementation)  # "scan:03" > "scan:02"
        return min(steps, key=lambda r: r.median_ms)

    def ceiling_gbps(self, case: list[Record], ceilings: dict | None) -> tuple[float | None, str]:
        """(the ceiling's GB/s for a case, where it comes from): the ceiling row timed in the
        same run, else (read) the measured ceilings document's read figure."""
        if self.ladder.ceiling == "copy":
            row = next((r for r in case if r.implementation == COPY_CEILING), None)
            if row is None:
                return None, "no copy timed beside it"
            return self.ladder.copy_bytes(row) / (row.median_ms * 1e-3) / 1e9, "copy, same run"
        row = next((r for r in self.records if r.implementation == READ_CEILING), None)
        if row is not None:
            return row.achieved_gbps, "read ceiling, same run"
        try:
            return float(ceilings["ceilings"]["read"]["rate"]) / 1e9, "measured ceilings file"
        except (TypeError, KeyError, ValueError):
            return None, "no read ceiling measured"


def newest_run(records: list[Record], ladder: PrimitiveLadder) -> LadderRun | None:
    """The ladder's newest record file (by its newest timestamp), or None without records."""
    mine = [r for r in records if r.extra.get("ladder") == ladder.name]
    if not mine:
        return None
    by_file: dict[str, list[Record]] = {}
    for r in mine:
        by_file.setdefault(str(r.extra.get("source_file", "")), []).append(r)
    source = max(by_file, key=lambda f: (max(r.timestamp for r in by_file[f]), f))
    chosen = by_file[source]
    return LadderRun(
        ladder=ladder, records=[r for r in chosen if from_samples(r)], source=source,
        day=max(r.timestamp for r in chosen)[:10], older=len(by_file) - 1,
        unjudged=sorted({r.implementation for r in chosen if not from_samples(r)}),
    )  # fmt: skip


def table(run: LadderRun, ceilings: dict | None) -> tuple[list[str], list[list[str]]]:
    """The run's table: per case, the ceiling, the anchors and the steps, with GB/s (minimal
    bytes / median), % of the ceiling and the time against the case's first anchor."""
    anchors = [a for a, _, _ in run.ladder.target.anchors]
    header = ["case", "implementation", "median ms", "GB/s", "% of ceiling",
              f"x {anchors[0]}" if anchors else "x anchor"]  # fmt: skip
    rows = []
    for key, case in sorted(run.cases().items()):
        case = [r for r in case if r.implementation != READ_CEILING]  # one row, "any", below
        if not case:
            continue
        ceiling, _ = run.ceiling_gbps(case, ceilings)
        anchor = next((r for r in case if anchors and r.implementation == anchors[0]), None)
        label = " ".join(str(part) for part in (_shape(case[0]), *key[1:]) if part)
        for r in sorted(case, key=_order):
            gbps = (run.ladder.copy_bytes(r) if r.implementation == COPY_CEILING
                    else r.bytes) / (r.median_ms * 1e-3) / 1e9  # fmt: skip
            rows.append([
                label, r.implementation, f"{r.median_ms:.4f}", f"{gbps:,.0f}",
                f"{100 * gbps / ceiling:.1f}" if ceiling else "-",
                f"{anchor.median_ms / r.median_ms:.2f}" if anchor else "-",
            ])  # fmt: skip
    read = next((r for r in run.records if r.implementation == READ_CEILING), None)
    if read is not None:
        rows.insert(0, ["any", READ_CEILING, f"{read.median_ms:.4f}",
                        f"{read.achieved_gbps:,.0f}", "100.0", "-"])  # fmt: skip
    return header, rows


def _order(r: Record) -> tuple:
    """Ceiling first, then anchors, then the steps in ladder order."""
    ceiling = r.implementation in (COPY_CEILING, READ_CEILING)
    return (not ceiling, ":" in r.implementation, r.implementation)


def _shape(r: Record) -> str:
    """A case's shape in words, element counts that are powers of two as 2^k."""

    def count(value) -> str:
        power = isinstance(value, int) and value > 0 and value & (value - 1) == 0
        return f"2^{value.bit_length() - 1}" if power and value >= 1024 else str(value)

    if "n" in r.shape:
        return " ".join(f"{k}={count(v) if k == 'n' else v}" for k, v in r.shape.items())
    return "x".join(str(v) for v in r.shape.values())


def placement_rows(gpu_id: str) -> list[list[str]]:
    """Each ladder on the gpu's datasheet roofline at a representative shape: FLOPs, minimal
    bytes, intensity, bound and the floor time no kernel can beat (bytes / bandwidth)."""
    from kernelab.hardware.catalog import get_gpu
    from kernelab.roofline.model import Ceilings, place
    from kernelab.spec.reference import OPS

    shapes = {"reduce_sum": ({"n": 1 << 26}, "fp32"), "scan": ({"n": 1 << 26}, "fp32"),
              "histogram": ({"n": 1 << 26, "bins": HISTOGRAM_BINS}, "int32"),
              "transpose": ({"rows": 8192, "cols": 8192}, "fp32")}  # fmt: skip
    spec = get_gpu(gpu_id)
    rows = []
    for ladder in LADDERS:
        if ladder.op not in OPS or ladder.op not in shapes:
            continue  # a ladder whose op the spec does not define yet
        shape, dtype = shapes[ladder.op]
        cost = OPS[ladder.op].cost(shape, dtype)
        ceilings = Ceilings.from_spec(spec)
        point = place(cost, ceilings)
        ridge = "-" if point.ridge is None else f"{point.ridge:.0f}"  # no FLOPs, no int rate
        rows.append([ladder.name, " ".join(f"{k}={v}" for k, v in shape.items()), dtype,
                     f"{cost.flops:.3g}", f"{cost.bytes / 2**20:,.1f} MiB",
                     f"{cost.flops / cost.bytes:.3g}", ridge, point.bound,
                     f"{point.floor_ms:.3f}"])  # fmt: skip
    return rows


# --- the lab's stage ------------------------------------------------------------------------


def compile_all(records_dir: Path, progress: Progress) -> str:
    """Every wired ladder's compile report into records_dir/pmpp/compile.json."""
    from kernelab.runtime.cuda.build import find_nvcc

    reports: dict[str, dict] = {}
    if find_nvcc() is None:
        why = "nvcc not found: the compile reports need the CUDA toolkit"
        reports = {ladder.name: {"skipped": why} for ladder in LADDERS if ladder.compile}
    else:
        for ladder in LADDERS:
            if ladder.compile is not None:
                reports[ladder.name] = {"rows": ladder.compile(progress)}
    _write_json(records_dir / "pmpp" / "compile.json", {"pmpp_compile": reports})
    steps = sum(len(r.get("rows", [])) for r in reports.values())
    return f"{steps} compile rows over {len(reports)} ladders"


def time_all(records_dir: Path, quick: bool, progress: Progress) -> str:
    """On a GPU: each wired ladder checked, then timed beside its anchors and its ceiling;
    its records into records_dir/pmpp/<name>_records.json (kept across a resumed run)."""
    from kernelab.harness.records import save_records

    lines, notes = [], read_notes(records_dir)
    for ladder in LADDERS:
        if ladder.time is None:
            continue
        path = records_dir / "pmpp" / f"{ladder.name}_records.json"
        if path.exists():
            lines.append(f"{ladder.name}: kept")
            continue
        progress(f"{ladder.name} ladder: checking, then timing")
        records, notes[ladder.name] = ladder.time(quick, progress)
        save_records(records, path)
        lines.append(f"{ladder.name}: {len(records)} timings")
    _write_json(records_dir / "pmpp" / "notes.json", {"pmpp_notes": notes})
    return "; ".join(lines)


def _write_json(path: Path, data) -> None:
    from kernelab.harness.records import write_atomically
    from kernelab.output import to_jsonable

    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(path, json.dumps(to_jsonable(data), indent=1) + "\n")


def read_compile(records_dir: Path) -> dict:
    path = records_dir / "pmpp" / "compile.json"
    return json.loads(path.read_text()).get("pmpp_compile", {}) if path.exists() else {}


def read_notes(records_dir: Path) -> dict:
    path = records_dir / "pmpp" / "notes.json"
    return json.loads(path.read_text()).get("pmpp_notes", {}) if path.exists() else {}
