"""The report's charts: the roofline with every kernel on it, the SGEMM ladder against
cuBLAS, and softmax bandwidth against row length. Each takes records and writes a PNG."""

from __future__ import annotations

from pathlib import Path

from kernelab.harness.records import Record


def ladder_rows(records: list[Record]) -> list[dict]:
    """Records of a ladder run as the rows kernels.cuda.sgemm.ladder.plot draws."""
    rows = []
    for r in records:
        if r.achieved_tflops is None or not r.shape.get("m"):
            continue
        step = r.implementation if r.implementation.startswith("sgemm:") else "cuBLAS"
        rows.append({"step": step, "size": r.shape["m"], "gflops": r.achieved_tflops * 1e3})
    return rows


def ladder_chart(records: list[Record], path: Path) -> Path | None:
    from kernelab.ladders.sgemm.ladder import plot

    rows = ladder_rows(records)
    return plot(rows, path) if rows else None


# The shape dimension a sweep varies, per op: what the x axis of a sweep chart shows.
SWEEP_AXIS = {"gemm": "m", "softmax": "cols", "layernorm": "cols", "rmsnorm": "cols",
              "vector_add": "n"}  # fmt: skip


def sweep_chart(records: list[Record], path: Path, *, title: str,
                ceiling: tuple[str, float] | None = None) -> Path | None:  # fmt: skip
    """Rate against size, one line per implementation and dtype, the ceiling dashed.

    GEMMs are drawn in TFLOP/s, everything else in TB/s (bytes the cost model counts: one
    read of each input and one write of each output). `ceiling` is (label, value) in the
    same unit."""
    from matplotlib.figure import Figure

    series: dict[str, list[tuple[int, float]]] = {}
    ops = set()
    for r in records:
        axis = SWEEP_AXIS.get(r.op)
        rate = r.achieved_tflops if r.op == "gemm" else (r.achieved_gbps or 0) / 1000
        if axis and rate and r.shape.get(axis):
            ops.add(r.op)
            series.setdefault(f"{r.implementation} {r.dtype}", []).append((r.shape[axis], rate))
    if not series:
        return None
    fig = Figure(figsize=(7.5, 4.5))
    ax = fig.add_subplot()
    for label, points in sorted(series.items()):
        points.sort()
        style = "-" if label.startswith(("triton", "sgemm", "hgemm")) else ":"
        ax.plot([p[0] for p in points], [p[1] for p in points], style, marker="o", label=label)
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
    ax.set_title(title)
    ax.legend(fontsize=7, loc="lower left")
    ax.grid(True, which="both", alpha=0.3)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120, bbox_inches="tight")
    return path


def softmax_chart(records: list[Record], path: Path, copy_gbps: float | None) -> Path | None:
    """Softmax TB/s against column count, with the measured copy ceiling."""
    softmax = [r for r in records if r.op == "softmax"]
    ceiling = ("measured copy ceiling", copy_gbps / 1000) if copy_gbps else None
    return sweep_chart(softmax, path, title="Softmax bandwidth against row length", ceiling=ceiling)


def roofline_chart(ceilings, placements, path: Path, title: str) -> Path | None:
    from kernelab.roofline.plot import plot_roofline

    if not placements:
        return None
    return plot_roofline(ceilings, placements, path, title=title)
