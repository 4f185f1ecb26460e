"""The lab report reads well to a newcomer (issue 32): lists as lists, shapes without dicts,
units on every figure, headings that match their tables, where each number comes from, what
to run on a GPU, and a kernel at its roof named for it."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from kernelab.harness.records import Record, save_records
from kernelab.lab import compose as c
from kernelab.lab.gate import Criterion
from kernelab.lab.report import Bullets, Report, Table, to_html, to_markdown
from kernelab.lab.results import load_results


def _record(impl, op, shape, dtype, gbps, when="2026-11-29T16:00:00+00:00") -> Record:
    """A record whose samples move the op's minimal bytes at `gbps` (the report derives its
    rates from the samples, never from the stored figure)."""
    from kernelab.spec.reference import OPS

    median_ms = OPS[op].cost(shape, dtype).bytes / (gbps * 1e9) * 1e3
    return Record(op=op, implementation=impl, shape=shape, dtype=dtype, mode="cold",
                  samples_ms=[median_ms] * 3, stats={"median": median_ms}, gpu="NVIDIA H200",
                  gpu_id="h200", driver="580.0", timestamp=when, achieved_gbps=gbps)  # fmt: skip


def _tables(report: Report) -> list[Table]:
    return [b for b in report.blocks if isinstance(b, Table)]


def test_shapes_are_written_without_dicts():
    assert c.shape_text({"m": 1, "n": 2048}) == "m=1 n=2048"
    assert c.shape_text('{"cols": 512, "rows": 8}') == "cols=512 rows=8"
    text = "aten::mm gemm {'m': 1, 'n': 11264, 'out_dtype': 'bf16'}: 13.2 us"
    assert c.plain_dicts(text) == "aten::mm gemm m=1 n=11264 out_dtype=bf16: 13.2 us"
    assert c.plain_dicts("a {not a dict} b") == "a {not a dict} b"


def test_bullets_nest_in_markdown_and_html(tmp_path):
    report = Report("t", [Bullets([(0, "decode"), (1, "a gemm"), (0, "prefill")])])
    md = to_markdown(report, tmp_path)
    assert "- decode\n  - a gemm\n- prefill" in md
    page = to_html(report)
    assert "<ul><li>decode<ul><li>a gemm</li></ul></li><li>prefill</li></ul>" in page


def test_triton_table_heading_names_only_the_baselines_timed_and_units_show(tmp_path):
    case = {"rows": 4096, "cols": 4096}
    save_records([_record("triton.softmax", "softmax", case, "bf16", 4000.0),
                  _record("eager.softmax", "softmax", case, "bf16", 2500.0)], tmp_path / "a.json")  # fmt: skip
    report = Report("t")
    c.kernels_section(report, load_results(tmp_path), tmp_path)
    heading = next(b.text for b in report.blocks if type(b).__name__ == "Heading")
    assert "torch eager" in heading and "torch.compile" not in heading
    (row,) = _tables(report)[0].rows
    assert row[1] == "rows=4096 cols=4096"  # the op's own key order, not the alphabet's
    assert row[5] == "eager.softmax: 2.50 TB/s"


def test_triton_table_keeps_each_ops_key_order_and_names_its_files_and_days(tmp_path):
    gemm = {"m": 1024, "n": 1024, "k": 1024}
    save_records([_record("triton.matmul", "gemm", gemm, "bf16", 100.0),
                  _record("torch.mm", "gemm", gemm, "bf16", 100.0)], tmp_path / "a.json")  # fmt: skip
    report = Report("t")
    c.kernels_section(report, load_results(tmp_path), tmp_path)
    (row,) = _tables(report)[0].rows
    assert row[1] == "m=1024 n=1024 k=1024"
    words = " ".join(b.text for b in report.blocks if type(b).__name__ == "Paragraph")
    assert "kernelab's cold timer: from a.json, 2026-11-29." in words
    assert "do_bench" not in words  # no later do_bench run here to defer to


def test_triton_table_says_the_criteria_judge_a_later_do_bench_run(tmp_path):
    case = {"rows": 4096, "cols": 4096}
    save_records([_record("triton.softmax", "softmax", case, "bf16", 4100.0)],
                 tmp_path / "sweep.json")  # fmt: skip
    results = load_results(tmp_path)
    results.pytorch_file = "pytorch/pytorch_targets_20261202.json.xz"
    results.pytorch_records = [_record("triton.softmax", "softmax", {"rows": 1024, "cols": 131072},
                                       "bf16", 3910.0, when="2026-12-02T10:00:00+00:00")]  # fmt: skip
    report = Report("t")
    c.kernels_section(report, results, tmp_path)
    words = " ".join(b.text for b in report.blocks if type(b).__name__ == "Paragraph")
    assert "from sweep.json, 2026-11-29" in words
    assert ("judge each target by its newest run: for the targets timed again in "
            "pytorch/pytorch_targets_20261202.json.xz (2026-12-02") in words  # fmt: skip


def test_the_scan_compile_table_names_the_kernel_of_each_row(tmp_path):
    import json

    state = _state(tmp_path, on_gpu=False)
    row = {"step": "scan:01", "dtype": "fp32", "technique": "Hillis-Steele", "registers": 16,
           "static_smem_bytes": 2048, "spill_store_bytes": 0, "spill_load_bytes": 0}  # fmt: skip
    rows = [{**row, "kernel": "scan_hillis_steele"},
            {**row, "kernel": "scan_hillis_steele_offsets", "registers": 28}]  # fmt: skip
    (state.records_dir / "pmpp").mkdir()
    (state.records_dir / "pmpp" / "compile.json").write_text(
        json.dumps({"pmpp_compile": {"scan": {"rows": rows}}})
    )
    report = Report("t")
    c.pmpp_section(report, state, load_results(tmp_path / "none"), tmp_path / "figures")
    scan = next(t for t in _tables(report) if t.rows and t.rows[0][0] == "scan:01")
    assert scan.header[:3] == ["step", "kernel", "dtype"]
    assert [r[1] for r in scan.rows] == ["scan_hillis_steele", "scan_hillis_steele_offsets"]


def test_triton_table_shows_the_host_cost_per_call_beside_the_rates(tmp_path):
    case = {"rows": 64, "cols": 4096}
    ours = _record("triton.softmax", "softmax", case, "bf16", 400.0)
    ours.extra["host_cost"] = {"host_us": 21.5, "wall_us": 22.0, "launch_bound": True}
    theirs = _record("eager.softmax", "softmax", case, "bf16", 300.0)
    theirs.extra["host_cost"] = {"host_us": 9.25, "wall_us": 10.0, "launch_bound": True}
    old = _record("triton.softmax", "softmax", {"rows": 8, "cols": 8}, "bf16", 4.0)
    save_records([ours, theirs, old], tmp_path / "a.json")
    report = Report("t")
    c.kernels_section(report, load_results(tmp_path), tmp_path)
    table = _tables(report)[0]
    assert table.header[-1].startswith("host us/call")
    cells = {row[1]: row[-1] for row in table.rows}
    assert cells["rows=64 cols=4096"] == "21.5 / 9.2 (launch-bound)"
    assert cells["rows=8 cols=8"] == "-"  # a record made before records carried it


def test_triton_table_heading_names_torch_compile_when_it_was_timed(tmp_path):
    case = {"rows": 4096, "cols": 4096}
    save_records([_record("triton.softmax", "softmax", case, "bf16", 4000.0),
                  _record("compile.softmax", "softmax", case, "bf16", 3000.0)], tmp_path / "a.json")  # fmt: skip
    report = Report("t")
    c.kernels_section(report, load_results(tmp_path), tmp_path)
    heading = next(b.text for b in report.blocks if type(b).__name__ == "Heading")
    assert "torch.compile" in heading


def _profile(gbps_under_ncu: float) -> dict:
    return {"implementation": "triton.softmax", "shape": {"rows": 8192, "cols": 8192},
            "dtype": "bf16", "bottleneck": "memory", "unit": "L2", "sm_pct": 59.0,
            "dram_gbps": gbps_under_ncu, "tensor_pct": 0.0, "stalls": [],
            "advice": ["L2 bandwidth, not DRAM, is the ceiling: reuse tiles from L2."]}  # fmt: skip


def _results_with(profile: dict, timed_gbps: float | None, copy_gbps: float):
    records = []
    if timed_gbps is not None:
        records.append(_record("triton.softmax", "softmax", profile["shape"], "bf16", timed_gbps))
    ceilings = {"ceilings": {"copy": {"rate": copy_gbps * 1e9}}}
    return SimpleNamespace(profiles=[profile], records=records, ceilings=ceilings)


def test_a_profiled_kernel_at_its_timed_roof_is_named_for_the_dram_roof():
    results = _results_with(_profile(3753.0), timed_gbps=4060.0, copy_gbps=4249.0)
    report = Report("t")
    c.profiles_section(report, results)
    (row,) = _tables(report)[0].rows
    assert row[1] == "memory / DRAM (at the roof)"
    assert f"{100 * 4060 / 4249:.0f} % of the measured copy ceiling" in row[6]
    assert "nothing left at this level" in row[6] and "L2" not in row[6]


def test_a_row_wise_kernel_profiled_at_an_untimed_row_count_uses_its_row_length():
    results = _results_with(_profile(3753.0), timed_gbps=None, copy_gbps=4249.0)
    results.records = [
        _record("triton.softmax", "softmax", {"rows": 65536, "cols": 8192}, "bf16", 4100.0),
        _record("triton.softmax", "softmax", {"rows": 65536, "cols": 4096}, "bf16", 1000.0),
    ]
    report = Report("t")
    c.profiles_section(report, results)
    (row,) = _tables(report)[0].rows
    assert row[1] == "memory / DRAM (at the roof)" and "4.10 TB/s" in row[6]


def test_a_profiled_kernel_below_the_roof_keeps_its_diagnosis():
    results = _results_with(_profile(2000.0), timed_gbps=2100.0, copy_gbps=4249.0)
    report = Report("t")
    c.profiles_section(report, results)
    (row,) = _tables(report)[0].rows
    assert row[1] == "memory / L2" and row[6].startswith("L2 bandwidth")


def test_a_profile_that_failed_is_a_row_with_its_reason():
    failed = {"implementation": "torch.mm", "shape": {"m": 64}, "dtype": "bf16",
              "error": "kernelab: ncu could not read the counters"}  # fmt: skip
    results = _results_with(_profile(2000.0), timed_gbps=2100.0, copy_gbps=4249.0)
    results.profiles = [failed, *results.profiles]
    report = Report("t")
    c.profiles_section(report, results)
    first, second = _tables(report)[0].rows
    assert first[0] == "torch.mm" and first[1] == "-"
    assert first[6] == "not profiled: kernelab: ncu could not read the counters"
    assert second[1] == "memory / L2"


def test_the_profile_stage_makes_the_folder_its_reports_go_to(tmp_path, monkeypatch):
    from kernelab.lab import run

    state = _state(tmp_path, on_gpu=True)
    state.done["ladder"] = "sgemm:13 fastest"
    folders = []

    def profile_in_child(name, shape, dtype, report):
        folders.append(report.parent.is_dir())
        return {"implementation": name, "shape": shape, "dtype": dtype, "error": "stand-in"}

    monkeypatch.setenv("KERNELAB_NCU", "ncu")
    monkeypatch.setattr(run, "_profile_in_child", profile_in_child)
    monkeypatch.setattr(run, "_best_ladder_step", lambda state: "sgemm:13")
    line = run.stage_profiles(state, lambda _: None)
    assert folders == [True, True, True]
    assert line.count("FAILED (stand-in)") == 3


def _state(tmp_path, on_gpu: bool):
    (tmp_path / "out" / "records").mkdir(parents=True)
    return SimpleNamespace(out=tmp_path / "out", records_dir=tmp_path / "out" / "records",
                           done={"rooflines": "6 kernels placed"}, on_gpu=on_gpu,
                           gpu_id="h200", gpu_from="the default")  # fmt: skip


@pytest.mark.parametrize("on_gpu", [False, True])
def test_report_says_where_each_number_comes_from(tmp_path, on_gpu):
    committed = tmp_path / "committed"
    committed.mkdir()
    save_records([_record("triton.softmax", "softmax", {"rows": 8, "cols": 8}, "bf16", 4000.0)],
                 committed / "a.json")  # fmt: skip
    results = load_results(committed)
    gate = [Criterion("softmax fast", True, "slowest: {'rows': 8, 'cols': 8}", "kernelab")]
    md = to_markdown(c.compose(_state(tmp_path, on_gpu), results, "source", gate), tmp_path)
    gate_table = md.split("## Exit criteria", 1)[1]
    assert "| judged on |" in gate_table and "rows=8 cols=8" in gate_table
    if on_gpu:
        assert "| this run |" in gate_table
        assert "What to run next on a GPU" not in md
    else:
        assert "No criterion below was measured on this machine" in gate_table
        assert "| committed records |" in gate_table and results.machine() in gate_table
        assert str(committed) in md.split("## Exit criteria")[0]
        assert "The GPU this report is about: h200, the default" in md
        nxt = md.split("## What to run next on a GPU", 1)[1]
        for command in ("kernelab lab --out", "kernelab exit-check --results DIR/records",
                        "kernelab exit-check --results benchmarks/results/h100",
                        "kernelab ceilings", "python3 -m pytest -q -m gpu",
                        "kernelab ladder scan"):  # fmt: skip
            assert command in nxt
        # a path inside the checkout is said to be one: it fails from any other folder
        assert "from its root, `kernelab exit-check --results benchmarks/results/h100`" in nxt
        assert "`kernelab exit-check` judges the h200's from any folder" in nxt
