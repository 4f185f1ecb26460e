"""The roofline chart: a GPU's roofs and where ops sit under them, as PNG or SVG.

The figure is drawn on its own Agg-backed Figure, never through pyplot, so it neither
needs a display nor changes the backend or state of anything else in the process. Each
point has its own colour and marker and is named in a key below the axes, not by text next
to it: memory-bound kernels sit close together on the slope, and their labels overlapped.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from kernelab.errors import KernelabError
from kernelab.roofline.costs import plain_number, shape_label
from kernelab.roofline.model import Ceilings, Placement

FORMATS = (".png", ".svg")
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")

# The roofs drawn for points of a math dtype: its own and its neighbours in precision, so
# the chart shows what a change of dtype or math mode would buy.
_FAMILIES = {
    "fp64": ("fp64", "fp32"),
    "fp32": ("fp32", "tf32"),
    "tf32": ("fp32", "tf32"),
    "bf16": ("bf16", "fp16", "fp8"),
    "fp16": ("bf16", "fp16", "fp8"),
    "fp8": ("bf16", "fp8", "int8"),
    "int8": ("fp8", "int8"),
    "fp4": ("fp8", "fp4"),
}


def _main_dtype(ceilings: Ceilings, placements: Sequence[Placement]) -> str:
    for p in placements:
        if ceilings.peak_flops.get(p.math_dtype):
            return p.math_dtype
    if ceilings.peak_flops.get("bf16"):
        return "bf16"
    return max(ceilings.peak_flops, key=lambda d: ceilings.peak_flops[d] or 0)


def _roofs(ceilings: Ceilings, placements: Sequence[Placement], main: str) -> dict[str, float]:
    """Compute roofs to draw, labelled by dtype ("bf16/fp16" when peaks coincide), FLOP/s."""
    wanted: list[str] = []
    for dtype in [main, *(p.math_dtype for p in placements)]:
        for member in _FAMILIES.get(dtype, (dtype,)):
            if member not in wanted and ceilings.peak_flops.get(member):
                wanted.append(member)
    by_peak: dict[float, list[str]] = {}
    for dtype in wanted:
        by_peak.setdefault(ceilings.peak_flops[dtype], []).append(dtype)
    return {"/".join(names): peak for peak, names in by_peak.items()}


def _point_label(p: Placement) -> str:
    head = f"{p.op} {shape_label(p.shape)} {p.dtype}".strip()
    if p.faster_than_light:
        return f"{head}: {plain_number(p.achieved_tflops)} TFLOP/s: FASTER THAN LIGHT, check it"
    if p.achieved_tflops is not None:
        return f"{head}: {plain_number(p.achieved_tflops)} TFLOP/s ({p.sol_pct:.0f}% of SoL)"
    return f"{head}: {plain_number(p.attainable_tflops)} TFLOP/s attainable"


def plot_roofline(
    ceilings: Ceilings,
    placements: Sequence[Placement],
    path,
    *,
    title: str | None = None,
) -> Path:
    """Draw the roofline of `ceilings` with `placements` on it; write PNG or SVG by suffix."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in FORMATS:
        raise KernelabError(
            f"cannot write a plot to '{path}': use a .png or .svg file name, not '{suffix or path.name}'"
        )
    fig = draw_roofline(ceilings, placements, title=title)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format=suffix[1:])
    return path


def draw_roofline(ceilings: Ceilings, placements: Sequence[Placement], *, title=None):
    """The roofline chart as a matplotlib Figure (Agg canvas), not yet written anywhere."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    main = _main_dtype(ceilings, placements)
    roofs = _roofs(ceilings, placements, main)
    bandwidth = ceilings.bandwidth
    main_ridge = ceilings.ridge(main)
    drawable = [p for p in placements if p.intensity > 0]
    left_out = [p for p in placements if p.intensity <= 0]

    ridges = [peak / bandwidth for peak in roofs.values()]
    xs = [p.intensity for p in drawable] + ridges
    x_lo, x_hi = min(xs) / 10, max(xs) * 10
    top = max(roofs.values())

    fig = Figure(figsize=(9, 6), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    ax.set_xscale("log")
    ax.set_yscale("log")

    # Memory roof: attainable = intensity * bandwidth, up to the highest compute roof.
    ridge_top = top / bandwidth
    ax.plot([x_lo, ridge_top], [x_lo * bandwidth / 1e12, top / 1e12], color="black", lw=2)
    # Halfway along the slope (in log space), up-left of it, so the text never sits on a roof.
    label_x = (x_lo * ridge_top) ** 0.5
    ax.annotate(
        f"memory {bandwidth / 1e12:.3g} TB/s",
        xy=(label_x, label_x * bandwidth / 1e12),
        xytext=(-4, 8),
        textcoords="offset points",
        ha="right",
        fontsize=9,
    )

    for label, peak in roofs.items():
        is_main = main in label.split("/")
        ax.plot(
            [peak / bandwidth, x_hi],
            [peak / 1e12, peak / 1e12],
            color="black" if is_main else "grey",
            lw=2 if is_main else 1.2,
        )
        ax.annotate(
            f"{label} {peak / 1e12:.4g} TFLOP/s",
            xy=(x_hi, peak / 1e12),
            xytext=(-4, 4),
            textcoords="offset points",
            ha="right",
            fontsize=9,
        )

    ax.axvline(main_ridge, color="tab:blue", ls="--", lw=1)
    ax.annotate(
        f"{main} ridge {plain_number(main_ridge)} FLOP/B",
        xy=(main_ridge, 0.02),
        xycoords=ax.get_xaxis_transform(),  # x in data, y as a fraction of the axes
        xytext=(4, 0),
        textcoords="offset points",
        color="tab:blue",
        fontsize=9,
    )

    palette = [f"C{i}" for i in range(10) if i != 3]  # C3 is red, kept for faster-than-light
    for i, p in enumerate(drawable):
        rate = p.achieved_tflops if p.achieved_tflops is not None else p.attainable_tflops
        color = "red" if p.faster_than_light else palette[i % len(palette)]
        ax.scatter([p.intensity], [rate], s=40, color=color, zorder=3,
                   marker=MARKERS[i % len(MARKERS)], label=_point_label(p))  # fmt: skip
    if drawable:
        key = fig.legend(loc="outside lower center", fontsize=8, frameon=False)
        for text, p in zip(key.get_texts(), drawable, strict=True):
            if p.faster_than_light:
                text.set_color("red")

    rates = [p.achieved_tflops or p.attainable_tflops for p in drawable]
    y_lo = min([x_lo * bandwidth / 1e12, *(r for r in rates if r > 0)]) / 2
    ax.set_xlim(x_lo, x_hi)
    ax.set_ylim(y_lo, top / 1e12 * 2)
    ax.set_xlabel("arithmetic intensity (FLOP/byte)")
    ax.set_ylabel("performance (TFLOP/s)")
    ax.set_title(title or f"Roofline: {ceilings.gpu_id} ({ceilings.source} ceilings)")
    ax.grid(True, which="both", alpha=0.25)
    if left_out:
        names = ", ".join(f"{p.op} {shape_label(p.shape)}" for p in left_out)
        ax.set_xlabel(
            f"arithmetic intensity (FLOP/byte)\nnot drawn (no FLOPs, no place on a log axis): {names}"
        )
    return fig
