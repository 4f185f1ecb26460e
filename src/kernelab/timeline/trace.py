"""Read a Chrome/Perfetto trace written by torch.profiler (`export_chrome_trace`).

The trace is a JSON object whose `traceEvents` hold complete events (`"ph": "X"`, times in
microseconds) by category:
  kernel, gpu_memcpy, gpu_memset   work on the GPU; `args` has stream, correlation, grid...
  cuda_runtime, cuda_driver        host API calls; a launch shares its kernel's correlation
  cpu_op                           aten ops; with record_shapes, `Input Dims`/`Input type`
  user_annotation                  record_function ranges, e.g. one per profiled step
Each GPU activity is joined to the host call that launched it (by correlation id) and that
call to the innermost aten op running on the same thread when it was made, which carries
the input shapes a cost model needs. A `.json.gz` file is read as well.
"""

from __future__ import annotations

import bisect
import gzip
import json
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from kernelab.errors import KernelabError
from kernelab.roofline.costs import canonical_dtype

GPU_CATEGORIES = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset"}
HOST_API_CATEGORIES = ("cuda_runtime", "cuda_driver")
# A host API call counts as a launch when a GPU activity carries its correlation id: that
# covers cudaLaunchKernel, cudaLaunchKernelExC (cluster launches), Triton's cuLaunchKernelEx,
# cudaMemcpyAsync and cudaGraphLaunch, whatever suffix a CUPTI version gives their names.
GRAPH_LAUNCHES = ("cudaGraphLaunch", "cuGraphLaunch")
# Ranges that mark one step of the workload: kernelab's own, and torch's `prof.step()`, as
# recorded on the host (the profiler copies each range onto the GPU's timeline too, as a
# gpu_user_annotation, which is not a step).
STEP_PREFIXES = ("kernelab_step#", "ProfilerStep#")
STEP_CATEGORIES = ("user_annotation", "cpu_op", "python_function")


@dataclass
class OpCall:
    """One aten op (or other CPU op) as the profiler recorded it."""

    index: int  # unique within the trace
    name: str
    start_us: float
    duration_us: float
    thread: int | str
    input_dims: list = field(default_factory=list)
    input_types: list = field(default_factory=list)
    concrete_inputs: list = field(default_factory=list)
    self_us: float = 0.0  # duration minus the ops nested directly inside it
    parent: OpCall | None = field(default=None, repr=False)  # the op that called it

    @property
    def end_us(self) -> float:
        return self.start_us + self.duration_us


@dataclass
class Launch:
    """A host API call that put work on the GPU (cudaLaunchKernel, cudaGraphLaunch, ...)."""

    name: str
    start_us: float
    duration_us: float
    thread: int | str
    correlation: int | None


@dataclass
class GpuActivity:
    """A kernel, copy or set that ran on the GPU."""

    name: str
    kind: str  # "kernel", "memcpy", "memset"
    start_us: float
    duration_us: float
    device: int | None = None
    stream: int | None = None
    correlation: int | None = None
    grid: tuple | None = None
    block: tuple | None = None
    registers_per_thread: int | None = None
    shared_memory: int | None = None  # bytes per block
    launch: Launch | None = None
    op: OpCall | None = None  # the innermost CPU op around the launch, when recorded

    @property
    def end_us(self) -> float:
        return self.start_us + self.duration_us

    @property
    def from_graph(self) -> bool:
        return self.launch is not None and self.launch.name.startswith(GRAPH_LAUNCHES)


@dataclass
class Trace:
    source: str
    format: str  # "torch", "nsys-gpu-trace", "nsys-kern-sum"
    activities: list  # [GpuActivity], by start time
    launches: list  # [Launch], by start time
    ops: list  # [OpCall], by start time
    steps: list  # [(name, start_us, end_us)], by start time
    device_properties: list = field(default_factory=list)
    notes: list = field(default_factory=list)
    # Per-kernel totals from a source without individual events (nsys cuda_gpu_kern_sum):
    # dicts with KernelRow's fields.
    kernel_totals: list = field(default_factory=list)

    @property
    def on_gpu(self) -> bool:
        return bool(self.activities)

    def device_name(self) -> str | None:
        for props in self.device_properties:
            if props.get("name"):
                return str(props["name"])
        return None

    def window(self) -> tuple[float, float] | None:
        """The wall-clock span the summary judges: the profiled steps (extended to the last
        GPU activity they queued), else everything the trace recorded."""
        gpu_end = max((a.end_us for a in self.activities), default=None)
        if self.steps:
            start = self.steps[0][1]
            end = max(self.steps[-1][2], gpu_end if gpu_end is not None else float("-inf"))
            return start, end
        spans = [(a.start_us, a.end_us) for a in self.activities]
        spans += [(o.start_us, o.end_us) for o in self.ops]
        if not spans:
            return None
        return min(s for s, _ in spans), max(e for _, e in spans)


def _read_json(path: Path):
    try:
        if path.name.endswith(".gz"):
            with gzip.open(path, "rt", encoding="utf-8") as handle:
                return json.load(handle)
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, EOFError) as exc:
        raise KernelabError(f"cannot read {path}: {exc}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise KernelabError(f"{path} is not a JSON trace ({exc})") from None


def _int(value) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _dims(value) -> tuple | None:
    if isinstance(value, (list, tuple)) and len(value) == 3:
        parts = tuple(_int(v) for v in value)
        return None if None in parts else parts
    return None


def _nest_ops(ops: list[OpCall]) -> None:
    """Fill each op's self time: its duration minus the ops directly inside it."""
    by_thread = defaultdict(list)
    for op in ops:
        by_thread[op.thread].append(op)
    for thread_ops in by_thread.values():
        thread_ops.sort(key=lambda o: (o.start_us, -o.duration_us))
        stack: list[OpCall] = []
        for op in thread_ops:
            op.self_us = op.duration_us
            while stack and stack[-1].end_us <= op.start_us:
                stack.pop()
            if stack:
                stack[-1].self_us -= op.duration_us
                op.parent = stack[-1]
            stack.append(op)
        for op in thread_ops:
            op.self_us = max(op.self_us, 0.0)


def _innermost_ops(ops: list[OpCall], launches: list[Launch]) -> dict[int, OpCall]:
    """For each launch (by id()), the innermost op running on its thread when it was made."""
    found: dict[int, OpCall] = {}
    by_thread = defaultdict(list)
    for op in ops:  # already sorted by start
        by_thread[op.thread].append(op)
    starts = {thread: [o.start_us for o in thread_ops] for thread, thread_ops in by_thread.items()}
    for launch in launches:
        candidates = by_thread.get(launch.thread)
        if not candidates:
            continue
        # Ops on one thread nest, so the innermost op containing the call is the latest
        # starting one that has not ended; walk back from the last op that starts before it.
        i = bisect.bisect_right(starts[launch.thread], launch.start_us) - 1
        while i >= 0:
            op = candidates[i]
            if op.end_us >= launch.start_us:
                found[id(launch)] = op
                break
            i -= 1
    return found


def parse_trace(data, source: str = "<trace>") -> Trace:
    """A Trace from the decoded JSON of a torch.profiler Chrome trace."""
    if isinstance(data, list):
        events, meta = data, {}
    elif isinstance(data, dict) and isinstance(data.get("traceEvents"), list):
        events, meta = data["traceEvents"], data
    else:
        raise KernelabError(f"{source} is not a Chrome trace: no 'traceEvents' list")

    # Timestamps are microseconds since the epoch (~1e15): count from the first event instead,
    # so that differences keep their sub-microsecond digits.
    stamps = [e.get("ts") for e in events if isinstance(e, dict) and e.get("ph") == "X"]
    base = min((float(t) for t in stamps if isinstance(t, (int, float))), default=0.0)

    activities, launches, ops, steps = [], [], [], []
    for event in events:
        if not isinstance(event, dict) or event.get("ph") != "X":
            continue
        category = event.get("cat", "")
        name = str(event.get("name", ""))
        try:
            start, duration = float(event["ts"]) - base, float(event.get("dur", 0.0))
        except (KeyError, TypeError, ValueError):
            continue
        args = event.get("args") or {}
        if category in GPU_CATEGORIES:
            activities.append(
                GpuActivity(
                    name=name,
                    kind=GPU_CATEGORIES[category],
                    start_us=start,
                    duration_us=duration,
                    device=_int(args.get("device")),
                    stream=_int(args.get("stream", event.get("tid"))),
                    correlation=_int(args.get("correlation")),
                    grid=_dims(args.get("grid")),
                    block=_dims(args.get("block")),
                    registers_per_thread=_int(args.get("registers per thread")),
                    shared_memory=_int(args.get("shared memory")),
                )
            )
        elif category in STEP_CATEGORIES and name.startswith(STEP_PREFIXES):
            steps.append((name, start, start + duration))
        elif category in HOST_API_CATEGORIES and args.get("correlation") is not None:
            launches.append(
                Launch(name, start, duration, event.get("tid"), _int(args.get("correlation")))
            )
        elif category == "cpu_op":
            ops.append(
                OpCall(
                    index=len(ops),
                    name=name,
                    start_us=start,
                    duration_us=duration,
                    thread=event.get("tid"),
                    input_dims=list(args.get("Input Dims") or []),
                    input_types=list(args.get("Input type") or []),
                    concrete_inputs=list(args.get("Concrete Inputs") or []),
                )
            )

    ops.sort(key=lambda o: (o.start_us, -o.duration_us))
    launches.sort(key=lambda call: call.start_us)
    activities.sort(key=lambda a: a.start_us)
    steps.sort(key=lambda s: s[1])
    _nest_ops(ops)

    launched = {a.correlation for a in activities if a.correlation is not None}
    launches = [c for c in launches if c.correlation in launched]
    launch_by_correlation = {c.correlation: c for c in launches}
    op_of_launch = _innermost_ops(ops, launches)
    for activity in activities:
        launch = launch_by_correlation.get(activity.correlation)
        if launch is not None:
            activity.launch = launch
            activity.op = op_of_launch.get(id(launch))

    props = meta.get("deviceProperties") if isinstance(meta, dict) else None
    return Trace(
        source=source,
        format="torch",
        activities=activities,
        launches=launches,
        ops=ops,
        steps=steps,
        device_properties=list(props or []),
    )


def load_trace(path) -> Trace:
    """Read a torch.profiler Chrome trace (.json or .json.gz)."""
    path = Path(path)
    if not path.is_file():
        raise KernelabError(f"no trace file at {path}")
    return parse_trace(_read_json(path), source=str(path))


def dtype_of(torch_type: str) -> str | None:
    """kernelab's dtype name for torch's `Input type` spelling ("c10::BFloat16", "float",
    "c10::Float8_e4m3fn"), or None for a scalar, a list or an unknown type."""
    name = str(torch_type).strip().removeprefix("c10::").lower()
    if name.startswith("float8"):
        return "fp8"
    if name == "signed char":
        return "int8"
    try:
        return canonical_dtype(name)
    except KernelabError:
        return None
