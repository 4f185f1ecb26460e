"""Parts of the lab report checked on their own: stage failures in words, the GPU the report
is about, what it suggests running next, verdict cells, citations and charts."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelab.errors import KernelabError
from kernelab.harness.records import Record
from kernelab.lab import charts
from kernelab.lab.compose import next_on_gpu_section, shown_folder
from kernelab.lab.opinion import citations
from kernelab.lab.report import Bullets, Paragraph, Report, Table, to_html
from kernelab.lab.run import failure_text, report_gpu


def test_a_failed_stage_reads_as_words_not_a_repr():
    assert failure_text(KernelabError("m2-max has no bf16 peak")) == "m2-max has no bf16 peak"
    assert failure_text(ValueError("bad\nsecond line")) == "ValueError: bad"
    assert failure_text(RuntimeError()) == "RuntimeError"
    assert "(" not in failure_text(KernelabError("x"))


def test_the_report_gpu_is_named_detected_or_the_stated_default():
    assert report_gpu("h100-sxm") == ("h100-sxm", "named with --gpu")
    gpu_id, why = report_gpu(None, None)
    assert gpu_id == "h200" and why.startswith("the default")

    class Detected:
        spec = type("Spec", (), {"id": "h100-sxm"})()

    assert report_gpu(None, Detected()) == ("h100-sxm", "this machine's GPU")
    with pytest.raises(KernelabError):
        report_gpu("no-such-gpu")


def test_what_to_run_next_suggests_commands_that_work_here():
    report = Report("t")
    next_on_gpu_section(report, Path("lab-report"))
    text = " ".join(b.text for b in report.blocks if isinstance(b, Paragraph))
    text += " ".join(t for b in report.blocks if isinstance(b, Bullets) for _, t in b.items)
    assert "kernelab exit-check --results benchmarks/results/h100" in text
    assert "--results lab-report/records" not in text  # judged nothing measured on a CPU run


def test_committed_folders_are_shown_without_the_checkout_path():
    assert shown_folder(Path("/home/x/kernelab/benchmarks/results/h200")) == "benchmarks/results/h200"
    assert shown_folder(Path("out/records")) == "out/records"


def test_verdict_cells_are_styled_alike():
    page = to_html(Report("t", [Table(["a", "b"], [["NO", "yes"], ["FAIL", "PASS"]])]))
    assert '<td class="fail">NO</td>' in page and '<td class="pass">yes</td>' in page
    assert '<td class="fail">FAIL</td>' in page and '<td class="pass">PASS</td>' in page


def test_a_citation_is_a_file_name_not_a_word():
    rates = {"hgemm/records": [1.5], "triton/triton_kernels_sweep_20261130-134619": [4.06]}
    text = ("The records say 1.5 TFLOP/s. The sweep (`triton_kernels_sweep_20261130-134619`) "
            "read 4.06 TB/s.")
    verified, unverified = citations(text, rates)
    assert verified == ["triton_kernels_sweep_20261130-134619"] and unverified == []
    assert citations("In hgemm/records, 1.5 TFLOP/s.", rates)[0] == ["records"]


def _softmax(impl: str, cols: int, tbps: float, gpu: str = "NVIDIA H200") -> Record:
    nbytes = 4 * 64 * cols
    return Record(op="softmax", implementation=impl, shape={"rows": 64, "cols": cols},
                  dtype="bf16", mode="cold", samples_ms=[1.0], stats={"median": 1.0},
                  gpu=gpu, bytes=nbytes, achieved_gbps=tbps * 1000,
                  extra={"source_file": "triton/sweep.json"})  # fmt: skip


def test_charts_name_the_gpu_the_baselines_and_the_source(tmp_path):
    records = [_softmax("triton.softmax", c, 4.1) for c in (1024, 4096)]
    records += [_softmax("eager.softmax", 1024, 2.0), _softmax("torch.softmax", 4096, 2.1)]
    assert charts.gpu_of(records) == "NVIDIA H200"
    assert charts.sources_of(records) == "triton/sweep.json"
    assert charts.legend_name("eager.softmax", "bf16") == "torch eager, bf16"
    assert charts.legend_name("torch.softmax", "bf16") == "torch eager, bf16"
    assert charts.legend_name("triton.softmax", "fp32") == "kernelab Triton, fp32"
    path = charts.softmax_chart(records, tmp_path / "softmax.png", 4250.0)
    assert path.stat().st_size > 0
    many = [_softmax("triton.softmax", 512, 4.0) for _ in range(3)]
    for i, r in enumerate(many):
        r.extra = {"source_file": f"triton/s{i}.json" if i else "top.json"}
    assert charts.sources_of(many) == ("3 record files (the top level and triton/ of the "
                                       "results folder)")


def test_a_roof_label_never_covers_a_kernels_marker():
    from kernelab.hardware.catalog import get_gpu
    from kernelab.roofline.model import Ceilings, place
    from kernelab.roofline.plot import draw_roofline
    from kernelab.spec.reference import get_op

    ceilings = Ceilings.from_spec(get_gpu("h200"))
    shape = {"m": 8192, "n": 8192, "k": 8192}
    points = [place(get_op("gemm").cost(shape, dtype), ceilings, time_ms=ms)
              for dtype, ms in (("bf16", 1.52), ("fp8", 0.73))]  # fmt: skip
    fig = draw_roofline(ceilings, points, title="t")
    charts.clear_labels_of_markers(fig)
    renderer = fig.canvas.get_renderer()
    ax = fig.axes[0]
    markers = [ax.transData.transform(o) for c in ax.collections for o in c.get_offsets()]
    for text in ax.texts:
        if "TFLOP/s" in text.get_text():
            box = text.get_window_extent(renderer)
            assert not any(box.x0 <= x <= box.x1 and box.y0 <= y <= box.y1 for x, y in markers)
