"""The roofline chart: valid PNG and SVG files, the right roofs and labels, no pyplot."""

from __future__ import annotations

import subprocess
import sys
import xml.etree.ElementTree as ET

import matplotlib
import matplotlib.image
import pytest

from kernelab.errors import KernelabError
from kernelab.hardware import get_gpu
from kernelab.roofline.costs import elementwise, gemm, gemv, softmax
from kernelab.roofline.model import Ceilings, place
from kernelab.roofline.plot import plot_roofline

H100 = Ceilings.from_spec(get_gpu("h100-sxm"))
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def svg_text(ceilings, placements, path) -> str:
    """The chart as SVG with its text kept as text (not glyph paths), so labels can be read."""
    with matplotlib.rc_context({"svg.fonttype": "none"}):
        plot_roofline(ceilings, placements, path)
    root = ET.parse(path).getroot()
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
    return " ".join(t for t in root.itertext())


def test_png_is_a_readable_image(tmp_path):
    placements = [
        place(gemm(4096, 4096, 4096), H100, time_ms=0.2),
        place(gemv(8192, 8192, dtype="bf16"), H100),
    ]
    path = plot_roofline(H100, placements, tmp_path / "roof.png")
    assert path.read_bytes()[:8] == PNG_MAGIC
    pixels = matplotlib.image.imread(path)
    assert pixels.ndim == 3 and pixels.shape[0] > 100 and pixels.shape[1] > 100
    assert pixels.std() > 0  # something was drawn


def test_uppercase_suffix_and_missing_folders(tmp_path):
    path = plot_roofline(H100, [place(gemm(64, 64, 64), H100)], tmp_path / "a" / "b" / "R.PNG")
    assert path.read_bytes()[:8] == PNG_MAGIC


def test_svg_labels_the_bf16_family_the_ridge_and_the_points(tmp_path):
    placements = [
        place(gemm(4096, 4096, 4096), H100, time_ms=0.2),
        place(softmax(4096, 4096, dtype="bf16"), H100),
    ]
    text = svg_text(H100, placements, tmp_path / "roof.svg")
    assert "bf16/fp16 989.4 TFLOP/s" in text  # equal peaks share one roof
    assert "fp8 1979 TFLOP/s" in text
    assert "tf32" not in text
    assert "memory 3.35 TB/s" in text
    assert "bf16 ridge 295 FLOP/B" in text
    assert "gemm m=4096 n=4096 k=4096 bf16" in text
    assert "687 TFLOP/s (69% of SoL)" in text  # timed: the achieved rate
    assert "softmax rows=4096 cols=4096 bf16" in text
    assert "attainable" in text  # untimed: the attainable rate
    assert "arithmetic intensity (FLOP/byte)" in text and "TFLOP/s" in text


def test_fp32_points_get_simt_and_tf32_roofs(tmp_path):
    text = svg_text(H100, [place(gemm(1024, 1024, 1024, dtype="fp32"), H100)], tmp_path / "f.svg")
    assert "fp32 67 TFLOP/s" in text and "tf32 494.7 TFLOP/s" in text
    assert "fp32 ridge 20 FLOP/B" in text
    assert "bf16" not in text


def test_faster_than_light_point_is_marked(tmp_path):
    cost = gemv(8192, 8192, dtype="bf16")
    impossible = place(cost, H100, time_ms=place(cost, H100).floor_ms / 3)
    assert "FASTER THAN LIGHT" in svg_text(H100, [impossible], tmp_path / "ftl.svg")


def test_a_point_without_flops_is_named_not_drawn(tmp_path):
    copy = place(elementwise(1 << 20, reads=1, writes=1, flops_per_element=0, dtype="fp32"), H100)
    text = svg_text(H100, [copy], tmp_path / "copy.svg")
    assert "not drawn" in text and "elementwise" in text


def test_just_the_roofs(tmp_path):
    assert "bf16 ridge" in svg_text(H100, [], tmp_path / "empty.svg")


def test_measured_source_in_the_default_title(tmp_path):
    measured = Ceilings("h200", {"bf16": 723e12}, 4.28e12, "measured 2026-11-29")
    text = svg_text(measured, [place(gemm(4096, 4096, 4096), measured)], tmp_path / "m.svg")
    assert "Roofline: h200 (measured 2026-11-29 ceilings)" in text


@pytest.mark.parametrize("name", ["roof.txt", "roof.pdf", "roof"])
def test_other_suffixes_are_refused_before_writing(tmp_path, name):
    with pytest.raises(KernelabError, match=r"\.png or \.svg"):
        plot_roofline(H100, [place(gemm(64, 64, 64), H100)], tmp_path / name)
    assert list(tmp_path.iterdir()) == []


def test_plotting_leaves_pyplot_and_the_backend_alone(tmp_path):
    # A fresh interpreter: the chart must not import pyplot nor pick a global backend.
    code = (
        "import sys, matplotlib\n"
        "before = dict.__getitem__(matplotlib.rcParams, 'backend')\n"
        "from kernelab.hardware import get_gpu\n"
        "from kernelab.roofline import Ceilings, place, plot_roofline\n"
        "from kernelab.roofline.costs import gemm\n"
        "c = Ceilings.from_spec(get_gpu('h100-sxm'))\n"
        f"plot_roofline(c, [place(gemm(64, 64, 64), c)], {str(tmp_path / 'p.png')!r})\n"
        "assert 'matplotlib.pyplot' not in sys.modules\n"
        "assert dict.__getitem__(matplotlib.rcParams, 'backend') == before\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def _text_boxes(fig):
    """The window extents of every visible, non-empty text in the figure (tick labels aside)."""
    from matplotlib.text import Text

    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    boxes = []
    for artist in fig.findobj(Text):
        if not artist.get_visible() or not artist.get_text().strip():
            continue
        if any(artist in axis.get_ticklabels(which="both") for ax in fig.axes
               for axis in (ax.xaxis, ax.yaxis)):  # fmt: skip
            continue
        boxes.append((artist.get_text(), artist.get_window_extent(renderer)))
    return boxes


def test_labels_of_kernels_close_on_the_slope_do_not_overlap():
    """Issue 32: the lab's memory-bound kernels sit close together on the slope and their
    labels were drawn on top of one another."""
    from kernelab.roofline.costs import layernorm, rmsnorm
    from kernelab.roofline.plot import draw_roofline

    placements = [
        place(softmax(8192, 8192, dtype="bf16"), H100, time_ms=0.09),
        place(layernorm(16384, 4096, dtype="bf16"), H100, time_ms=0.09),
        place(rmsnorm(16384, 4096, dtype="bf16"), H100, time_ms=0.09),
        place(gemm(8192, 8192, 8192, dtype="fp8"), H100, time_ms=0.9),
        place(gemm(8192, 8192, 8192), H100, time_ms=1.6),
    ]
    boxes = _text_boxes(draw_roofline(H100, placements))
    labels = [text for text, _ in boxes]
    assert sum("softmax rows=8192" in t or "layernorm" in t or "rmsnorm" in t for t in labels) == 3
    overlapping = [
        (a, b)
        for i, (a, box_a) in enumerate(boxes)
        for b, box_b in boxes[i + 1 :]
        if box_a.overlaps(box_b)
    ]
    assert overlapping == []
