"""What a timeline says: the top kernels, how busy the GPU was, and what to try next.

  top kernels     grouped by name: calls, mean and total time, share of all GPU time, class
  classes         GPU time by class (gemm, attention, normalization, ...)
  busy            the union of GPU activity over the wall-clock window of the profiled steps;
                  idle gaps are the holes in that union (a queued kernel starts within about
                  a microsecond of the one before, so a longer hole means the GPU waited)
  verdict         gpu-bound, launch-bound (many short kernels with holes between them) or
                  host-bound (long kernels, long holes), with the next step to try
  roofline        each op whose shapes were recorded and that a cost model covers, placed on
                  the roofline of the trace's GPU with its GPU time per call

A trace with no GPU activity (a CPU run) is summarised the same way with aten ops in place
of kernels, ranked by self time (time not spent in ops nested inside), and says so.
"""

from __future__ import annotations

import itertools
import json
import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass, field

from kernelab.errors import KernelabError
from kernelab.timeline.classify import CLASSES, classify, short_label
from kernelab.timeline.opcosts import costed_op
from kernelab.timeline.trace import Trace

# A hole between GPU activities longer than this is idle time the host caused.
IDLE_GAP_US = 2.0
# Busy above this share of the window: the kernels themselves are the time.
GPU_BOUND_BUSY_PCT = 85.0
# Kernels shorter than this (median) cost about as much to launch (~2-5 us of host time per
# launch through torch) as to run, so the host cannot keep the GPU fed.
SHORT_KERNEL_US = 20.0

GPU_BOUND, LAUNCH_BOUND, HOST_BOUND, CPU_ONLY, UNKNOWN = (
    "gpu-bound",
    "launch-bound",
    "host-bound",
    "cpu-only",
    "unknown",
)

LAUNCH_BOUND_STEPS = (
    "capture the step in a CUDA graph (torch.cuda.CUDAGraph, or "
    "torch.compile(mode='reduce-overhead')): one launch replays every kernel",
    "fuse the small kernels (torch.compile, or a fused norm/activation kernel): fewer launches",
    "raise the batch: each kernel does more work for the same launch cost",
)
HOST_BOUND_STEPS = (
    "look at the largest gaps in the trace (a torch.profiler trace opens in Perfetto, "
    "ui.perfetto.dev; an .nsys-rep in Nsight Systems): host "
    "synchronisations (.item(), .cpu(), printing a tensor), data loading, Python between steps",
    "overlap host work with the GPU: pinned memory and non_blocking copies, a prefetching loader",
)
GPU_BOUND_STEPS = (
    "the time is in the kernels: drill into the top ones (--drill N) for Nsight Compute's view",
)


@dataclass
class KernelRow:
    name: str
    label: str  # the name shortened for a table
    cls: str
    kind: str  # kernel, memcpy, memset, cpu op
    calls: int
    total_us: float
    mean_us: float
    min_us: float
    max_us: float
    share_pct: float  # of all GPU (or CPU op) time
    ops: dict  # aten op name -> calls that launched it
    graph_calls: int = 0  # calls replayed from a CUDA graph
    roofline: dict | None = None  # the placement of the op this kernel does most work for

    def to_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass
class OpPlacement:
    op: str  # the aten op
    cost_op: str  # the cost model used: gemm, attention, ...
    shape: dict
    dtype: str
    calls: int
    gpu_us_per_call: float  # every kernel the op launched, per call
    kernels: list  # kernel labels, most time first
    placement: dict  # kernelab.roofline.model.Placement.to_dict()

    def to_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass
class Busy:
    window_us: float | None  # wall-clock span judged (the profiled steps)
    steps: int
    activity_us: float  # sum of every kernel's (op's) time; overlaps counted twice
    busy_us: float | None  # the union: time at least one kernel ran
    busy_pct: float | None
    idle_us: float | None
    gap_count: int | None  # holes longer than IDLE_GAP_US
    gap_total_us: float | None
    gap_largest_us: float | None
    median_us: float | None  # median kernel duration
    launches: int  # host launch calls
    launch_mean_us: float | None  # host time per launch call

    def to_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass
class Verdict:
    kind: str
    reason: str
    next_steps: list

    def to_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass
class TimelineSummary:
    source: str
    format: str
    unit: str  # "kernel" or "cpu op"
    device: str | None
    gpu_id: str | None  # catalog GPU whose roofline placements use
    top: list  # [KernelRow]
    distinct: int  # distinct kernel (op) names
    classes: dict  # class -> {"time_us", "share_pct", "calls"}
    busy: Busy
    verdict: Verdict
    placements: list  # [OpPlacement], most GPU time first
    notes: list = field(default_factory=list)

    def to_dict(self) -> dict:
        return {
            "source": self.source,
            "format": self.format,
            "unit": self.unit,
            "device": self.device,
            "gpu_id": self.gpu_id,
            "top": [row.to_dict() for row in self.top],
            "distinct": self.distinct,
            "classes": self.classes,
            "busy": self.busy.to_dict(),
            "verdict": self.verdict.to_dict(),
            "placements": [p.to_dict() for p in self.placements],
            "notes": list(self.notes),
        }


# --- busy time and gaps -----------------------------------------------------------------------


def merge_intervals(spans) -> list[tuple[float, float]]:
    """The union of (start, end) spans as disjoint spans, in order."""
    merged: list[list[float]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [(s, e) for s, e in merged]


def busy_time(spans, window: tuple[float, float] | None) -> dict:
    """Busy and idle time of `spans` inside `window`, and the holes between them."""
    clipped = []
    for start, end in spans:
        if window is not None:
            start, end = max(start, window[0]), min(end, window[1])
        if end > start:
            clipped.append((start, end))
    merged = merge_intervals(clipped)
    busy = sum(e - s for s, e in merged)
    holes = [b[0] - a[1] for a, b in itertools.pairwise(merged)]
    gaps = [h for h in holes if h > IDLE_GAP_US]
    span = (window[1] - window[0]) if window else None
    return {
        "busy_us": busy,
        "busy_pct": 100.0 * busy / span if span else None,
        "idle_us": span - busy if span is not None else None,
        "gap_count": len(gaps),
        "gap_total_us": sum(gaps),
        "gap_largest_us": max(gaps, default=0.0),
    }


# --- grouping -------------------------------------------------------------------------------


def _rows(items, total: float, top: int) -> list[KernelRow]:
    """items: (name, kind, duration_us, op name or None, from_graph) -> rows by total time."""
    groups: dict[str, list] = defaultdict(list)
    for item in items:
        groups[item[0]].append(item)
    rows = []
    for name, calls in groups.items():
        durations = [c[2] for c in calls]
        rows.append(
            KernelRow(
                name=name,
                label=short_label(name),
                cls=classify(name),
                kind=calls[0][1],
                calls=len(calls),
                total_us=sum(durations),
                mean_us=sum(durations) / len(durations),
                min_us=min(durations),
                max_us=max(durations),
                share_pct=100.0 * sum(durations) / total if total else 0.0,
                ops=dict(Counter(c[3] for c in calls if c[3]).most_common()),
                graph_calls=sum(1 for c in calls if c[4]),
            )
        )
    rows.sort(key=lambda r: r.total_us, reverse=True)
    return rows if top <= 0 else rows[:top]


def _classes(entries, total: float) -> dict:
    """entries: (name, duration_us, calls) -> time, share and calls by class."""
    by_class = {cls: {"time_us": 0.0, "share_pct": 0.0, "calls": 0} for cls in CLASSES}
    for name, duration, calls in entries:
        entry = by_class[classify(name)]
        entry["time_us"] += duration
        entry["calls"] += calls
    for entry in by_class.values():
        entry["share_pct"] = 100.0 * entry["time_us"] / total if total else 0.0
    return {cls: v for cls, v in by_class.items() if v["calls"]}


# --- the roofline ---------------------------------------------------------------------------


def _spec_for(trace: Trace, gpu):
    """The catalog GPUSpec for placements: `gpu` (an id or a spec) or the trace's device."""
    if gpu is not None:
        if isinstance(gpu, str):
            from kernelab.hardware import get_gpu

            return get_gpu(gpu)
        return gpu
    from kernelab.hardware.detect import match_catalog

    for props in trace.device_properties:
        if props.get("name"):
            sms = props.get("numSms")
            spec = match_catalog(str(props["name"]), int(sms) if sms else None)
            if spec is not None:
                return spec
    return None


def _placements(trace: Trace, spec, notes: list) -> tuple[list[OpPlacement], dict]:
    """Op placements, and for each kernel name the placement of the op it worked most for."""
    from kernelab.roofline.model import Ceilings, place

    per_call: dict[int, dict] = {}  # op index -> {"op", "cost", "us", "kernels": Counter}
    for activity in trace.activities:
        op, cost = costed_op(activity.op)
        if op is None:
            continue
        entry = per_call.setdefault(
            op.index, {"op": op, "cost": cost, "us": 0.0, "kernels": Counter()}
        )
        entry["us"] += activity.duration_us
        entry["kernels"][activity.name] += activity.duration_us

    groups: dict[tuple, list[dict]] = defaultdict(list)
    for entry in per_call.values():
        cost = entry["cost"]
        key = (entry["op"].name, cost.op, json.dumps(cost.shape, sort_keys=True), cost.dtype)
        groups[key].append(entry)

    ceilings = Ceilings.from_spec(spec)
    placements, best_for_kernel = [], {}
    for (op_name, _, _, _), entries in groups.items():
        cost = entries[0]["cost"]
        us = sum(e["us"] for e in entries) / len(entries)
        kernels = Counter()
        for e in entries:
            kernels.update(e["kernels"])
        try:
            placed = place(cost, ceilings, time_ms=us / 1e3).to_dict() if us > 0 else None
        except KernelabError as exc:
            notes.append(f"{op_name}: not placed on the roofline ({exc})")
            continue
        if placed is None:
            continue
        placement = OpPlacement(
            op=op_name,
            cost_op=cost.op,
            shape=dict(cost.shape),
            dtype=cost.dtype,
            calls=len(entries),
            gpu_us_per_call=us,
            kernels=[short_label(k) for k, _ in kernels.most_common()],
            placement=placed,
        )
        placements.append(placement)
        for kernel, kernel_us in kernels.items():
            if kernel not in best_for_kernel or kernel_us > best_for_kernel[kernel][0]:
                best_for_kernel[kernel] = (kernel_us, placement)
    placements.sort(key=lambda p: p.gpu_us_per_call * p.calls, reverse=True)
    return placements, {k: v[1] for k, v in best_for_kernel.items()}


def _roofline_brief(placement: OpPlacement) -> dict:
    p = placement.placement
    return {
        "op": placement.op,
        "cost_op": placement.cost_op,
        "shape": placement.shape,
        "dtype": placement.dtype,
        "bound": p["bound"],
        "intensity": p["intensity"],
        "ridge": p["ridge"],
        "sol_pct": p["sol_pct"],
        "achieved_tflops": p["achieved_tflops"],
        "achieved_gbps": p["achieved_gbps"],
        "faster_than_light": p["faster_than_light"],
    }


# --- the verdict ----------------------------------------------------------------------------


def verdict_for(busy: Busy, unit: str) -> Verdict:
    """gpu-bound, launch-bound or host-bound, from the busy share and the kernel lengths."""
    if unit != "kernel":
        return Verdict(
            CPU_ONLY,
            "no GPU activity in this trace: a CPU run, so the table ranks aten ops by self "
            "time and 'busy' is the time inside ops (the rest is Python and the host between "
            "ops)",
            ["run the workload on a CUDA GPU for the kernel timeline"],
        )
    if busy.busy_pct is None:
        return Verdict(
            UNKNOWN,
            "the source has no timestamps (a kernel summary), so busy time and gaps are unknown",
            ["export the cuda_gpu_trace report instead for the timeline"],
        )
    idle_pct = 100.0 - busy.busy_pct
    if busy.busy_pct >= GPU_BOUND_BUSY_PCT:
        return Verdict(
            GPU_BOUND,
            f"the GPU was busy {busy.busy_pct:.0f} % of the time",
            list(GPU_BOUND_STEPS),
        )
    gaps = f"{busy.gap_count} idle gaps (largest {busy.gap_largest_us:.0f} us)"
    if busy.median_us is not None and busy.median_us < SHORT_KERNEL_US:
        launch = (
            f"; the host spent {busy.launch_mean_us:.1f} us per launch call"
            if busy.launch_mean_us
            else ""
        )
        return Verdict(
            LAUNCH_BOUND,
            f"the GPU idled {idle_pct:.0f} % of the time in {gaps} between short kernels "
            f"(median {busy.median_us:.1f} us){launch}: the host cannot launch them as fast as "
            "the GPU runs them",
            list(LAUNCH_BOUND_STEPS),
        )
    return Verdict(
        HOST_BOUND,
        f"the GPU idled {idle_pct:.0f} % of the time in {gaps}, though its kernels are long "
        f"(median {busy.median_us or 0:.0f} us): the host holds it up between them",
        list(HOST_BOUND_STEPS),
    )


# --- the summary ----------------------------------------------------------------------------


def _kernel_items(trace: Trace):
    return [
        (a.name, a.kind, a.duration_us, a.op.name if a.op else None, a.from_graph)
        for a in trace.activities
    ]


def _cpu_items(trace: Trace):
    return [(o.name, "cpu op", o.self_us, None, False) for o in trace.ops if o.self_us > 0]


def summarize_trace(trace: Trace, *, top: int = 10, gpu=None) -> TimelineSummary:
    """Summarise a parsed trace. `top`: rows in the kernel table (0: all); `gpu`: a catalog
    id or GPUSpec for the roofline (default: the device the trace names)."""
    if top < 0:
        raise KernelabError(f"--top must be 0 (all) or more, got {top}")
    notes = list(trace.notes)
    window = trace.window()
    steps = len(trace.steps)
    totals = trace.kernel_totals

    if trace.on_gpu:
        unit, items = "kernel", _kernel_items(trace)
        spans = [(a.start_us, a.end_us) for a in trace.activities]
    elif totals:
        unit, items, spans = "kernel", [], []
    else:
        unit, items = "cpu op", _cpu_items(trace)
        # Top-level ops only: a nested op's time is inside its caller's span already.
        spans = [(o.start_us, o.end_us) for o in trace.ops if o.parent is None]
        if not trace.ops:
            raise KernelabError(f"{trace.source}: no GPU activity and no CPU op in the trace")

    if totals:
        rows = [KernelRow(**row) for row in totals]
        activity = sum(r.total_us for r in rows)
        for row in rows:
            row.share_pct = 100.0 * row.total_us / activity if activity else 0.0
        rows.sort(key=lambda r: r.total_us, reverse=True)
        distinct = len(rows)
        classes = _classes([(r.name, r.total_us, r.calls) for r in rows], activity)
        rows = rows if top == 0 else rows[:top]
        timing = dict.fromkeys(
            ("busy_us", "busy_pct", "idle_us", "gap_count", "gap_total_us", "gap_largest_us")
        )
        median = None
    else:
        activity = sum(i[2] for i in items)
        rows = _rows(items, activity, top)
        distinct = len({i[0] for i in items})
        classes = _classes([(i[0], i[2], 1) for i in items], activity)
        timing = busy_time(spans, window)
        median = statistics.median(i[2] for i in items) if items else None

    busy = Busy(
        window_us=(window[1] - window[0]) if window else None,
        steps=steps,
        activity_us=activity,
        median_us=median,
        launches=len(trace.launches),
        launch_mean_us=(
            sum(c.duration_us for c in trace.launches) / len(trace.launches)
            if trace.launches
            else None
        ),
        **timing,
    )

    spec, placements = None, []
    if any(a.op for a in trace.activities):
        try:
            spec = _spec_for(trace, gpu)
        except KernelabError as exc:
            notes.append(str(exc))
        if spec is None:
            notes.append(
                f"no catalog GPU matches the trace's device ({trace.device_name() or 'unnamed'})"
                "; pass --gpu NAME to place ops on a roofline"
            )
        else:
            placements, best = _placements(trace, spec, notes)
            for row in rows:
                if row.name in best:
                    row.roofline = _roofline_brief(best[row.name])
    elif trace.on_gpu and trace.format == "torch":
        notes.append(
            "no kernel is linked to an aten op with recorded shapes (CUDA graph replays carry "
            "none), so nothing is placed on the roofline"
        )

    return TimelineSummary(
        source=trace.source,
        format=trace.format,
        unit=unit,
        device=trace.device_name(),
        gpu_id=spec.id if spec is not None else None,
        top=rows,
        distinct=distinct,
        classes=classes,
        busy=busy,
        verdict=verdict_for(busy, unit),
        placements=placements,
        notes=notes,
    )
