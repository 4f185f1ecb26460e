"""How a timeline reads on a terminal: the verdict first, then the tables behind it."""

from __future__ import annotations

from rich.table import Table

from kernelab.roofline.costs import shape_label


def _us(value) -> str:
    if value is None:
        return "-"
    if value >= 1e3:
        return f"{value / 1e3:,.2f} ms"
    return f"{value:,.1f} us"


def _busy_lines(summary, steps: int) -> list[str]:
    busy = summary.busy
    lines = []
    if busy.window_us is not None:
        per_step = f", {_us(busy.window_us / steps)} per step" if steps else ""
        lines.append(
            f"wall time judged: {_us(busy.window_us)} over {steps or 'the'} steps{per_step}"
        )
    if busy.busy_pct is not None:
        lines.append(
            f"busy: {busy.busy_pct:.1f} % ({_us(busy.busy_us)} with a {summary.unit} running); "
            f"idle {_us(busy.idle_us)}, {busy.gap_count} gaps > 2 us totalling "
            f"{_us(busy.gap_total_us)}, largest {_us(busy.gap_largest_us)}"
        )
    if busy.median_us is not None:
        launch = (
            f"; {busy.launches} launch calls, {busy.launch_mean_us:.1f} us of host time each"
            if busy.launch_mean_us
            else ""
        )
        lines.append(f"median {summary.unit} time: {_us(busy.median_us)}{launch}")
    return lines


def _fold(table: Table, figures: tuple[str, ...]) -> Table:
    """On a narrow terminal long kernel names fold onto the next lines rather than end in
    "..." (a mangled name has no spaces to wrap at), while the figures stay whole."""
    for column in table.columns:
        column.overflow = "fold"
        column.no_wrap = column.header in figures
    return table


def _top_table(summary) -> Table:
    what = "kernel" if summary.unit == "kernel" else "aten op (self time)"
    table = Table(title=f"top {len(summary.top)} of {summary.distinct} by total time")
    for column in (what, "class", "calls", "mean", "total", "share", "roofline"):
        table.add_column(
            column, justify="left" if column in (what, "class", "roofline") else "right"
        )
    for row in summary.top:
        roof = "-"
        if row.roofline:
            r = row.roofline
            sol = f"{r['sol_pct']:.0f} % SOL" if r.get("sol_pct") is not None else ""
            roof = f"{r['cost_op']}: {r['bound']}, {sol}"
        graph = f" ({row.graph_calls} in graph)" if row.graph_calls else ""
        table.add_row(
            row.label,
            row.cls,
            f"{row.calls}{graph}",
            _us(row.mean_us),
            _us(row.total_us),
            f"{row.share_pct:.1f} %",
            roof,
        )
    return _fold(table, ("mean", "total", "share"))


def _placement_table(summary) -> Table:
    table = Table(title=f"on the roofline of {summary.gpu_id} (datasheet), GPU time per call")
    for column in ("op", "shape", "dtype", "calls", "time", "bound", "achieved", "SOL"):
        table.add_column(column, justify="right" if column in ("calls", "time", "SOL") else "left")
    for p in summary.placements[:10]:
        placed = p.placement
        rate = (
            f"{placed['achieved_tflops']:.1f} TFLOP/s"
            if placed["bound"] == "compute"
            else f"{placed['achieved_gbps']:,.0f} GB/s"
        )
        flag = " (faster than light!)" if placed["faster_than_light"] else ""
        table.add_row(
            p.op.removeprefix("aten::"),
            f"{p.cost_op} {shape_label(p.shape)}",
            p.dtype,
            str(p.calls),
            _us(p.gpu_us_per_call),
            placed["bound"],
            rate,
            f"{placed['sol_pct']:.0f} %{flag}",
        )
    return _fold(table, ("time", "achieved", "SOL"))


def render(timeline, console) -> None:
    """Print a Timeline (or anything with .summary, .capture, .drill) for a person."""
    summary = timeline.summary
    steps = summary.busy.steps
    source = summary.source
    device = f" on {summary.device}" if summary.device else ""
    console.print(f"[bold]timeline[/bold] of {source}{device} ({summary.format})")
    if summary.unit != "kernel":
        console.print(
            "no GPU activity: these are CPU ops, not kernels (a CPU run), ranked by self time"
        )
    for line in _busy_lines(summary, steps):
        console.print(line)
    verdict = summary.verdict
    console.print(f"[bold]verdict: {verdict.kind}[/bold]: {verdict.reason}")
    for step in verdict.next_steps:
        console.print(f"  - {step}")
    console.print(_top_table(summary))
    classes = ", ".join(
        f"{cls} {v['share_pct']:.0f} %"
        for cls, v in sorted(summary.classes.items(), key=lambda kv: -kv[1]["time_us"])
    )
    console.print(f"by class: {classes}")
    if summary.placements:
        console.print(_placement_table(summary))
    for line in summary.notes:
        console.print(f"note: {line}")
    for result in getattr(timeline, "drill", []):
        console.print(f"[bold]drill[/bold]: {result.kernel[:100]}")
        if result.error:
            console.print(f"  ncu failed: {result.error}")
            continue
        diagnosis = result.summary["diagnosis"]
        unit = f" / {diagnosis['unit']}" if diagnosis.get("unit") else ""
        console.print(f"  diagnosis: {diagnosis['bottleneck']}{unit}: {diagnosis['summary']}")
        for advice in diagnosis.get("advice", [])[:3]:
            console.print(f"  - {advice}")
        console.print(f"  report: {result.report}")
    trace_path = getattr(timeline, "trace_path", None)
    if trace_path:
        console.print(f"trace: {trace_path}{viewer_hint(trace_path, summary.format)}")


def viewer_hint(trace_path, trace_format: str) -> str:
    """Where the trace file can be looked at: a torch.profiler trace (Chrome trace JSON) in
    Perfetto, an .nsys-rep in Nsight Systems; an nsys CSV export is a table, opened by neither."""
    if trace_format == "torch":
        return " (open it in ui.perfetto.dev or chrome://tracing)"
    if str(trace_path).endswith(".nsys-rep"):
        return " (open it in Nsight Systems)"
    return ""
