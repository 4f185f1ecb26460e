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
    from kernelab.kernels.cuda.sgemm.ladder import plot

    rows = ladder_rows(records)
    return plot(rows, path) if rows else None


def softmax_chart(records: list[Record], path: Path, copy_gbps: float | None) -> Path | None:
    """GB/s against column count (log scale), one line per implementation and dtype."""
    from matplotlib.figure import Figure

    series: dict[str, list[tuple[int, float]]] = {}
    for r in records:
        if r.op == "softmax" and r.achieved_gbps and r.shape.get("cols"):
            series.setdefault(f"{r.implementation} {r.dtype}", []).append(
                (r.shape["cols"], r.achieved_gbps / 1000)
            )
    if not series:
        return None
    fig = Figure(figsize=(7.5, 4.5))
    ax = fig.add_subplot()
    for label, points in sorted(series.items()):
        points.sort()
        style = "-" if label.startswith("triton") else ":"
        ax.plot([p[0] for p in points], [p[1] for p in points], style, marker="o", label=label)
    if copy_gbps:
        ax.axhline(copy_gbps / 1000, color="black", linestyle="--", label="measured copy ceiling")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("columns per row")
    ax.set_ylabel("TB/s (one read + one write)")
    ax.set_title("Softmax bandwidth against row length")
    ax.legend(fontsize=7, loc="lower left")
    ax.grid(True, which="both", alpha=0.3)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120, bbox_inches="tight")
    return path


def roofline_chart(ceilings, placements, path: Path, title: str) -> Path | None:
    from kernelab.roofline.plot import plot_roofline

    if not placements:
        return None
    return plot_roofline(ceilings, placements, path, title=title)
