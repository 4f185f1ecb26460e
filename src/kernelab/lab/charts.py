"""The report's charts: the roofline with every kernel on it, the SGEMM ladder against
cuBLAS, softmax bandwidth against row length, each PMPP ladder against its ceiling, the decode
GEMV's batch walk and the decode step's waterfall. Each takes records and writes a PNG."""

from __future__ import annotations

from pathlib import Path

from kernelab.harness.records import Record


def ladder_rows(records: list[Record]) -> list[dict]:
    """Records of a ladder run as rows: step, size, GFLOP/s (cuBLAS named so)."""
    rows = []
    for r in records:
        if r.achieved_tflops is None or not r.shape.get("m"):
            continue
        step = r.implementation if r.implementation.startswith("sgemm:") else "cuBLAS"
        rows.append({"step": step, "size": r.shape["m"], "gflops": r.achieved_tflops * 1e3})
    return rows


def gpu_of(records: list[Record]) -> str:
    """The GPU the records were measured on, as it named itself, or "an unknown GPU"."""
    names = sorted({r.gpu for r in records if r.gpu})
    return ", ".join(names) or "an unknown GPU"


def sources_of(records: list[Record]) -> str:
    """The record files behind a chart, for its footnote: one named, else how many and where."""
    files = sorted({str(r.extra.get("source_file", "")) for r in records} - {""})
    if len(files) <= 2:
        return ", ".join(files) or "records of unknown origin"
    folders = sorted({f.rsplit("/", 1)[0] + "/" if "/" in f else "the top level" for f in files})
    return f"{len(files)} record files ({' and '.join(folders)} of the results folder)"


def _footnote(fig, text: str) -> None:
    fig.text(0.01, -0.02, text, fontsize=7, color="#555555", ha="left", va="top")


def ladder_chart(records: list[Record], path: Path) -> Path | None:
    """One panel per size: GFLOP/s per step as bars, cuBLAS fp32 dashed; the GPU in the title,
    the record files in the footnote. GFLOP/s, as the ladder's table."""
    from matplotlib.figure import Figure

    rows = ladder_rows(records)
    if not rows:
        return None
    sizes = sorted({r["size"] for r in rows})
    fig = Figure(figsize=(4.5 * len(sizes), 4.4), layout="constrained")
    axes = fig.subplots(1, len(sizes), squeeze=False)[0]
    for ax, size in zip(axes, sizes, strict=True):
        steps = sorted((r for r in rows if r["size"] == size and r["step"] != "cuBLAS"),
                       key=lambda r: r["step"])  # fmt: skip
        cublas = next((r for r in rows if r["size"] == size and r["step"] == "cuBLAS"), None)
        ax.bar([r["step"].removeprefix("sgemm:") for r in steps], [r["gflops"] for r in steps],
               color="#4c72b0")  # fmt: skip
        if cublas is not None:
            ax.axhline(cublas["gflops"], color="#c44e52", linestyle="--",
                       label=f"cuBLAS fp32 ({cublas['gflops']:,.0f})")  # fmt: skip
            ax.legend(loc="upper left", fontsize=8)
        ax.set_title(f"{size}^3")
        ax.set_xlabel("ladder step")
    axes[0].set_ylabel("GFLOP/s (fp32, cold L2, median)")
    fig.suptitle(f"SGEMM ladder against cuBLAS fp32 on {gpu_of(records)}")
    _footnote(fig, f"Source: {sources_of(records)}")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120, bbox_inches="tight")
    return path


# The shape dimension a sweep varies, per op: what the x axis of a sweep chart shows.
SWEEP_AXIS = {"gemm": "m", "softmax": "cols", "layernorm": "cols", "rmsnorm": "cols",
              "vector_add": "n"}  # fmt: skip
# What each implementation in a sweep is, in the legend: the benchmark scripts name torch's
# eager op "eager.<op>" and the lab "torch.<op>"; both are the same call, torch eager.
BASELINE_WORDS = {"eager": "torch eager", "torch": "torch eager", "torch.compile": "torch.compile",
                  "compile": "torch.compile", "triton": "kernelab Triton"}  # fmt: skip


def legend_name(implementation: str, dtype: str) -> str:
    """`triton.softmax bf16` as `kernelab Triton, bf16`; eager.softmax and torch.softmax both
    as `torch eager, bf16`."""
    family = implementation.rsplit(".", 1)[0] if "." in implementation else implementation
    return f"{BASELINE_WORDS.get(family, implementation)}, {dtype}"


def sweep_chart(records: list[Record], path: Path, *, title: str,
                ceiling: tuple[str, float] | None = None) -> Path | None:  # fmt: skip
    """Rate against size, one marker series per implementation and dtype (markers only: the
    sizes are sparse, and a line between them would claim rates nobody measured), the ceiling
    dashed; the GPU in the title, the record files in the footnote.

    GEMMs are drawn in TFLOP/s, everything else in TB/s (bytes the cost model counts: one
    read of each input and one write of each output). `ceiling` is (label, value) in the
    same unit."""
    from matplotlib.figure import Figure

    series: dict[str, list[tuple[int, float]]] = {}
    ops, used = set(), []
    for r in records:
        axis = SWEEP_AXIS.get(r.op)
        rate = r.achieved_tflops if r.op == "gemm" else (r.achieved_gbps or 0) / 1000
        if axis and rate and r.shape.get(axis):
            ops.add(r.op)
            used.append(r)
            series.setdefault(legend_name(r.implementation, r.dtype), []).append(
                (r.shape[axis], rate)
            )
    if not series:
        return None
    fig = Figure(figsize=(7.5, 4.5))
    ax = fig.add_subplot()
    markers = "os^vD<>"
    for index, (label, points) in enumerate(sorted(series.items())):
        points.sort()
        ours = label.startswith("kernelab")
        ax.plot([p[0] for p in points], [p[1] for p in points], linestyle="none",
                marker=markers[index % len(markers)], markersize=6 if ours else 4,
                alpha=1.0 if ours else 0.7, label=label)  # fmt: skip
    if ceiling is not None:
        ax.axhline(ceiling[1], color="black", linestyle="--", label=ceiling[0])
    op = next(iter(ops)) if len(ops) == 1 else None
    ax.set_xscale("log", base=2)
    ax.set_xlabel(
        {"gemm": "M (= N = K for square sweeps)", "vector_add": "elements"}.get(
            op, "columns per row"
        )
    )
    ax.set_ylabel("TFLOP/s" if op == "gemm" else "TB/s (inputs read once, outputs written once)")
    ax.set_title(f"{title} on {gpu_of(used)}")
    ax.legend(fontsize=7, loc="lower left")
    ax.grid(True, which="both", alpha=0.3)
    _footnote(fig, f"Cold L2, median of each timing's samples; the latest run of each shape. "
                   f"Source: {sources_of(used)}")  # fmt: skip
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120, bbox_inches="tight")
    return path


def softmax_chart(records: list[Record], path: Path, copy_gbps: float | None) -> Path | None:
    """Softmax TB/s against column count, with the measured copy ceiling."""
    softmax = [r for r in records if r.op == "softmax"]
    ceiling = (f"measured copy ceiling ({copy_gbps / 1000:.2f} TB/s)", copy_gbps / 1000) \
        if copy_gbps else None
    return sweep_chart(softmax, path, title="Softmax bandwidth against row length", ceiling=ceiling)


def primitive_chart(title: str, panels: list[tuple[str, list[tuple[str, float]], float | None]],
                    path: Path, *, records: list[Record], ceiling_words: str) -> Path | None:
    """A PMPP ladder's run: one panel per case, GB/s of each implementation as bars (steps
    blue, anchors grey), its ceiling dashed; the GPU in the title, the record files and what
    the ceiling is in the footnote."""
    from matplotlib.figure import Figure

    panels = [p for p in panels if p[1]]
    if not panels:
        return None
    fig = Figure(figsize=(max(4.5, 0.9 * max(len(b) for _, b, _ in panels)) * len(panels), 4.4),
                 layout="constrained")  # fmt: skip
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    for ax, (label, bars, ceiling) in zip(axes, panels, strict=True):
        names = [name for name, _ in bars]
        colors = ["#4c72b0" if ":" in name else "#8c8c8c" for name in names]
        ax.bar(names, [gbps for _, gbps in bars], color=colors)
        if ceiling:
            ax.axhline(ceiling, color="#c44e52", linestyle="--",
                       label=f"ceiling ({ceiling:,.0f} GB/s)")  # fmt: skip
            ax.legend(loc="upper left", fontsize=8)
        ax.set_title(label)
        ax.tick_params(axis="x", labelrotation=45, labelsize=7)
    axes[0].set_ylabel("GB/s (minimal bytes / median, cold L2)")
    fig.suptitle(f"{title} ladder against its ceiling on {gpu_of(records)}")
    _footnote(fig, f"Source: {sources_of(records)}; ceiling: {ceiling_words}")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    return path


def roofline_chart(ceilings, placements, path: Path, title: str,
                   footnote: str = "") -> Path | None:  # fmt: skip
    """The roofline (kernelab.roofline.plot) with `placements`, each roof's label moved off any
    kernel's marker, and `footnote` (the source records) under it."""
    from kernelab.roofline.plot import draw_roofline

    if not placements:
        return None
    fig = draw_roofline(ceilings, placements, title=title)
    clear_labels_of_markers(fig)
    if footnote:  # under the title, where the legend below the axes cannot meet it
        ax = fig.axes[0]
        ax.set_title(title, pad=16)
        ax.text(0.5, 1.01, footnote, transform=ax.transAxes, ha="center", va="bottom",
                fontsize=7, color="#555555")  # fmt: skip
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    return path


MARKER_RADIUS_PX = 8  # a scatter marker of size 40 pt^2 is about 6 px across at 100 dpi


def clear_labels_of_markers(fig) -> None:
    """Each roof label ("bf16/fp16 989.4 TFLOP/s") that covers a kernel's marker moves below its
    roof, else to the roof's left end, whichever covers none; a marker is never hidden."""
    renderer = fig.canvas.get_renderer()
    for ax in fig.axes:
        points = [ax.transData.transform(offset)
                  for collection in ax.collections
                  for offset in collection.get_offsets()]  # fmt: skip

        def covers(text, points=points) -> bool:
            box = text.get_window_extent(renderer).expanded(1.0, 1.0)
            return any(box.x0 - MARKER_RADIUS_PX <= x <= box.x1 + MARKER_RADIUS_PX
                       and box.y0 - MARKER_RADIUS_PX <= y <= box.y1 + MARKER_RADIUS_PX
                       for x, y in points)  # fmt: skip

        for text in ax.texts:
            if "TFLOP/s" not in text.get_text() or not covers(text):
                continue
            x_end, y = text.xy
            ridge = next((line.get_xdata()[0] for line in ax.lines
                          if len(line.get_ydata()) == 2 and line.get_ydata()[0] == y
                          and line.get_ydata()[1] == y), None)  # fmt: skip
            tries = [((-4, -4), "right", "top", x_end)]
            if ridge is not None:
                tries += [((4, 4), "left", "bottom", ridge), ((4, -4), "left", "top", ridge)]
            for offset, ha, va, x in tries:
                text.xy, text.xyann = (x, y), offset
                text.set_ha(ha)
                text.set_va(va)
                if not covers(text):
                    break


def decode_walk_chart(walks: list[dict], measured: list[tuple[str, int, float]], path: Path,
                      gpu: str) -> Path | None:  # fmt: skip
    """The decode GEMV's roofline walk: attainable TFLOP/s against the batch m for each weight
    (lines, catalog arithmetic), the ridge's m* marked, and measured points (label, m, TFLOP/s)
    where the run has them."""
    from matplotlib.figure import Figure

    if not walks:
        return None
    fig = Figure(figsize=(7.5, 4.6), layout="constrained")
    ax = fig.subplots()
    for walk in walks:
        points = walk["points"]
        line = ax.plot([p.m for p in points], [p.attainable_tflops for p in points],
                       marker=".", label=f"{walk['label']} attainable")[0]  # fmt: skip
        ours = [(m, tflops) for label, m, tflops in measured if label == walk["label"]]
        if ours:
            ax.scatter(*zip(*ours, strict=True), color=line.get_color(), marker="x", s=40,
                       label=f"{walk['label']} triton.gemv measured")  # fmt: skip
        if walk["crossover_m"] is not None:
            ax.axvline(walk["crossover_m"], color=line.get_color(), linestyle=":", linewidth=1)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("batch m (rows of x)")
    ax.set_ylabel("TFLOP/s (bf16)")
    ax.set_title(f"Decode GEMV: memory- to compute-bound as the batch grows ({gpu})")
    ax.legend(fontsize=7)
    _footnote(fig, "lines: min(peak, intensity x bandwidth) on the catalog GPU (the weights' lines "
                   "nearly coincide: W's bytes dominate each); dotted: m* where the intensity "
                   "reaches the ridge")  # fmt: skip
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    return path


def decode_step_waterfall(cases: list[dict], path: Path, *, words: dict[str, str],
                          floors: dict[tuple, float | None], gpu: str,
                          source: str) -> Path | None:  # fmt: skip
    """The decode step's waterfall: one panel per (batch, KV length), a bar per path in the
    order the per-token time falls (device time, median of the samples), the change from the
    bar before written above each, the wall time per token of a loop of calls as a dot (where
    the host, not the GPU, sets the pace it sits above its bar) and the floor of the step's
    bytes over the measured copy dashed."""
    from matplotlib.figure import Figure

    cases = [c for c in cases if c["paths"]]
    if not cases:
        return None
    fig = Figure(figsize=(4.8 * len(cases), 4.6), layout="constrained")
    axes = fig.subplots(1, len(cases), squeeze=False)[0]
    for ax, case in zip(axes, cases, strict=True):
        names = list(case["paths"])
        device = [case["paths"][n].median_ms * 1e3 for n in names]
        xs = range(len(names))
        ax.bar(xs, device, color=["#8c8c8c" if n in ("eager", "compiled", "graphed-eager")
                                  else "#4c72b0" for n in names])  # fmt: skip
        walls = [(x, case["paths"][n].extra.get("wall_us")) for x, n in zip(xs, names, strict=True)]
        walls = [(x, w) for x, w in walls if isinstance(w, (int, float))]
        if walls:
            ax.scatter(*zip(*walls, strict=True), color="#dd8452", zorder=3, s=18,
                       label="wall per token (a loop of calls)")  # fmt: skip
        wall_at = dict(walls)
        for x, value in zip(xs, device, strict=True):
            delta = 0.0 if x == 0 else value - device[x - 1]
            change = "" if x == 0 else "\n±0" if abs(delta) < 0.5 else f"\n{delta:+,.0f}"
            top = max(value, wall_at.get(x, 0.0))  # above the wall's dot, never on it
            ax.annotate(f"{value:,.0f}{change}", (x, top), ha="center", va="bottom",
                        fontsize=7, xytext=(0, 5), textcoords="offset points")  # fmt: skip
        floor = floors.get((case["batch"], case["length"]))
        if floor:
            ax.axhline(floor, color="#c44e52", linestyle="--",
                       label=f"floor: bytes / copy ({floor:,.0f} us)")  # fmt: skip
        ax.set_xticks(list(xs), [words.get(n, n) for n in names], rotation=30, ha="right",
                      fontsize=7)  # fmt: skip
        ax.set_ylabel("us per token (device)")
        ax.set_title(f"batch {case['batch']}, KV {case['length']}", fontsize=9)
        ax.set_ylim(0, max([*device, *(w for _, w in walls), floor or 0]) * 1.25)
        if walls or floor:
            ax.legend(fontsize=7, loc="upper right")
    fig.suptitle(f"One decode step of a Llama-3-8B block, per token, by path ({gpu})")
    _footnote(fig, f"from {source}; kernelab's cold timer (L2 flushed before each call), "
                   "the median of the samples")  # fmt: skip
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    return path
