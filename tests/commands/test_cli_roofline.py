"""`kernelab roofline`: the JSON contract, the human verdict, and one-line errors for bad input."""

from __future__ import annotations

import json
import subprocess
import sys
import types
import xml.etree.ElementTree as ET

import pytest

from kernelab.cli import main
from kernelab.roofline.costs import attention, elementwise, layernorm
from kernelab.roofline.model import FASTER_THAN_LIGHT, Ceilings

# The figures these tests check are the H100 SXM's datasheet (989.4 bf16 TFLOP/s, 3.35 TB/s).
GEMM_4096 = ["roofline", "gemm", "--m", "4096", "--n", "4096", "--k", "4096", "--gpu", "h100-sxm"]


def run_json(capsys, argv):
    code = main([*argv, "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return json.loads(captured.out), captured.err


def test_done_when_gemm_4096_bf16_on_h100_is_compute_bound_at_ridge_295():
    # The real console script path, in a fresh interpreter.
    argv = [*GEMM_4096, "--dtype", "bf16", "--gpu", "h100-sxm", "--json"]
    done = subprocess.run(
        [sys.executable, "-m", "kernelab.cli", *argv], capture_output=True, text=True, check=True
    )
    data = json.loads(done.stdout)
    assert data["ridge"] == pytest.approx(295, rel=0.01)
    assert data["bound"] == "compute"
    assert data["op"] == "gemm" and data["gpu"] == "h100-sxm" and data["dtype"] == "bf16"
    assert data["flops"] == 2 * 4096**3
    assert data["bytes"] == 3 * 4096**2 * 2
    assert data["intensity"] == pytest.approx(4096 / 3)
    assert data["floor_ms"] == pytest.approx(2 * 4096**3 / 989.4e12 * 1e3)
    assert data["ceilings_source"] == "datasheet"
    assert data["shape"]["k"] == 4096 and data["explanation"]
    assert data["sol_pct"] is None


def test_time_ms_adds_achieved_rates(capsys):
    data, _ = run_json(capsys, [*GEMM_4096, "--time-ms", "0.2"])
    assert data["achieved_tflops"] == pytest.approx(2 * 4096**3 / 0.2e-3 / 1e12)
    assert data["achieved_gbps"] == pytest.approx(3 * 4096**2 * 2 / 0.2e-3 / 1e9)
    assert data["sol_pct"] == pytest.approx(100 * data["floor_ms"] / 0.2)
    assert data["faster_than_light"] is False and data["warning"] is None


def test_faster_than_light_is_a_warning_in_json_and_on_stderr(capsys):
    data, err = run_json(capsys, [*GEMM_4096, "--time-ms", "0.01"])
    assert data["faster_than_light"] is True
    assert data["warning"] == FASTER_THAN_LIGHT
    assert "faster than speed of light" in err


def test_faster_than_light_is_prominent_for_people(capsys):
    assert main([*GEMM_4096, "--time-ms", "0.01"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert f"WARNING: {FASTER_THAN_LIGHT}" in out
    assert "it reaches" not in out  # never reported as a result


def test_human_output_has_table_explanation_and_verdict(capsys):
    assert main(GEMM_4096) == 0
    out = " ".join(capsys.readouterr().out.split())  # undo the console's line wrapping
    assert (
        "compute-bound: intensity 1365 FLOP/B is 4.6x the bf16 ridge of 295 FLOP/B on "
        "h100-sxm; the floor is 0.139 ms"
    ) in out
    assert "2*M*N*K FLOPs" in out
    assert "intensity" in out and "attainable" in out


def test_memory_bound_verdict(capsys):
    assert main(["roofline", "gemv", "--m", "8192", "--n", "8192", "--gpu", "h100-sxm"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "memory-bound: intensity 1 FLOP/B is 295x below the bf16 ridge" in out


def test_math_tf32_moves_the_fp32_ridge(capsys):
    base = [*GEMM_4096, "--dtype", "fp32"]
    simt, _ = run_json(capsys, base)
    tensor, _ = run_json(capsys, [*base, "--math", "tf32"])
    assert simt["ridge"] == pytest.approx(67.0 / 3.35)
    assert tensor["ridge"] == pytest.approx(494.7 / 3.35)
    assert tensor["math_dtype"] == "tf32" and tensor["dtype"] == "fp32"


@pytest.mark.parametrize(
    "argv, expected",
    [
        (
            ["roofline", "elementwise", "--n", "1000", "--dtype", "fp32"],
            elementwise(1000, dtype="fp32"),
        ),
        (
            [
                "roofline",
                "elementwise",
                "--n",
                "1000",
                "--reads",
                "1",
                "--writes",
                "1",
                "--flops-per-element",
                "0",
            ],
            elementwise(1000, reads=1, writes=1, flops_per_element=0, dtype="bf16"),
        ),
        (
            ["roofline", "layernorm", "--rows", "64", "--cols", "4096", "--no-bias"],
            layernorm(64, 4096, dtype="bf16", bias=False),
        ),
        (
            [
                "roofline",
                "attention",
                "--heads",
                "16",
                "--seq-q",
                "2048",
                "--head-dim",
                "128",
                "--causal",
            ],
            attention(1, 16, 2048, 2048, 128, causal=True, dtype="bf16"),
        ),
    ],
)
def test_options_reach_the_cost_model(capsys, argv, expected):
    data, _ = run_json(capsys, argv)
    assert data["flops"] == expected.flops
    assert data["bytes"] == expected.bytes
    assert data["shape"] == expected.shape


@pytest.mark.parametrize(
    "argv",
    [
        ["roofline", "gemv", "--m", "64", "--n", "64"],
        ["roofline", "softmax", "--rows", "64", "--cols", "64", "--dtype", "fp32"],
        ["roofline", "rmsnorm", "--rows", "64", "--cols", "64"],
        ["roofline", "reduction", "--rows", "64", "--cols", "64"],
        ["roofline", "gemm", "--m", "64", "--n", "64", "--k", "64", "--batch", "4"],
        ["roofline", "attention", "--batch", "2", "--heads", "4", "--seq-q", "1"]
        + ["--seq-k", "4096", "--head-dim", "64", "--dtype", "fp16"],
        ["roofline", "reduce_sum", "--n", "1048576", "--dtype", "fp32"],
        ["roofline", "scan", "--n", "1048576", "--dtype", "fp32"],
        ["roofline", "softmax_backward", "--rows", "64", "--cols", "64"],
        ["roofline", "rmsnorm_backward", "--rows", "64", "--cols", "64"],
    ],
)
def test_every_op_runs(capsys, argv):
    data, _ = run_json(capsys, argv)
    assert data["op"] == argv[1]
    assert data["bound"] in ("memory", "compute")


def test_every_cost_model_is_an_op_the_command_takes():
    from kernelab.commands.roofline import _REQUIRED
    from kernelab.roofline.costs import COST_MODELS

    assert set(COST_MODELS) == set(_REQUIRED)


def _spec_op_names() -> list[str]:
    from kernelab.roofline.costs import COST_MODELS
    from kernelab.spec.reference import OPS

    return sorted(name for name in OPS if name not in COST_MODELS)


# A small value for each shape key the spec ops take (group divides k; bins <= n is not needed).
SPEC_SHAPE_VALUES = {"m": 3, "n": 96, "k": 256, "rows": 5, "cols": 96, "batch": 2, "heads": 8,
                     "kv_heads": 2, "tokens": 33, "head_dim": 64, "bins": 17, "group": 64,
                     "vocab": 1000}  # fmt: skip


@pytest.mark.parametrize("name", _spec_op_names())
def test_every_op_of_the_specification_is_placed_with_its_own_cost(capsys, name):
    from kernelab.spec.reference import OPS

    spec = OPS[name]
    shape = {key: SPEC_SHAPE_VALUES[key] for key in spec.shape_keys}
    argv = ["roofline", name, "--gpu", "h100-sxm"]
    for key, value in shape.items():
        argv += ["--" + key.replace("_", "-"), str(value)]
    data, _ = run_json(capsys, argv)
    dtype = "bf16" if "bf16" in spec.dtypes else [d for d in spec.dtypes if d != "fp64"][0]
    expected = spec.cost(shape, dtype)
    assert data["dtype"] == dtype
    assert (data["flops"], data["bytes"]) == (expected.flops, expected.bytes)
    assert data["floor_ms"] >= expected.bytes / 3.35e12 * 1e3 * (1 - 1e-9)
    assert data["bound"] in ("memory", "compute")


def test_a_zero_flop_integer_op_is_memory_bound_with_no_ridge(capsys):
    data, _ = run_json(capsys, ["roofline", "histogram", "--n", "1048576", "--bins", "256",
                                "--gpu", "h100-sxm"])  # fmt: skip
    assert data["dtype"] == "int32" and data["flops"] == 0
    assert data["ridge"] is None and data["peak_tflops"] is None
    assert data["bound"] == "memory"
    assert data["floor_ms"] == pytest.approx(data["bytes"] / 3.35e12 * 1e3)
    main(["roofline", "histogram", "--n", "1048576", "--bins", "256", "--gpu", "h100-sxm"])
    human = capsys.readouterr().out
    assert "no FLOPs" in human and "memory-bound" in human


def test_an_int32_scan_counts_no_flops_and_an_fp32_scan_its_adds(capsys):
    integer, _ = run_json(capsys, ["roofline", "scan", "--n", "1000", "--dtype", "int32"])
    floating, _ = run_json(capsys, ["roofline", "scan", "--n", "1000", "--dtype", "fp32"])
    assert integer["flops"] == 0 and integer["ridge"] is None
    assert floating["flops"] == 999 and floating["ridge"] > 0
    assert integer["bytes"] == floating["bytes"] == 2 * 1000 * 4


@pytest.mark.parametrize(
    "argv, says",
    [
        (["roofline", "transpose", "--rows", "8"], "roofline transpose needs --cols"),
        (["roofline", "transpose", "--rows", "8", "--cols", "8", "--k", "8"], "does not take --k"),
        (["roofline", "histogram", "--n", "8", "--bins", "4", "--dtype", "bf16"],
         "unknown dtype for histogram"),
        (["roofline", "decode_attention", "--batch", "1", "--heads", "8", "--kv-heads", "3",
          "--tokens", "16", "--head-dim", "64"], "kv_heads"),
        (["roofline", "quant_gemv_int4", "--m", "1", "--n", "8", "--k", "96", "--group", "64"],
         "group size dividing K"),
        (["roofline", "rope", "--tokens", "8", "--heads", "4", "--head-dim", "127"],
         "needs an even head_dim"),
        (["roofline", "histogram", "--n", "8", "--bins", "0"], "--bins"),
    ],
)  # fmt: skip
def test_bad_input_to_a_specification_op_is_one_line(capsys, argv, says):
    for as_json in (False, True):
        line = one_line_failure(capsys, argv + (["--json"] if as_json else []))
        assert says in line


def one_line_failure(capsys, argv):
    code = main(argv)
    captured = capsys.readouterr()
    assert code == 2
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("kernelab: "), captured.err
    return lines[0]


@pytest.mark.parametrize(
    "argv, says",
    [
        (["roofline", "gemm", "--m", "0", "--n", "8", "--k", "8"], "--m"),
        (["roofline", "gemm", "--m", "-4", "--n", "8", "--k", "8"], "--m"),
        (["roofline", "softmax", "--rows", "8", "--cols", "0"], "--cols"),
        (["roofline", "attention", "--heads", "-1", "--seq-q", "8", "--head-dim", "8"], "--heads"),
        (["roofline", "gemx", "--m", "8"], "unknown op 'gemx'"),
        (
            ["roofline", "gemm", "--m", "8", "--n", "8", "--k", "8", "--dtype", "fp9"],
            "unknown dtype",
        ),
        (["roofline", "gemm", "--m", "8", "--n", "8", "--k", "8", "--gpu", "h999"], "unknown GPU"),
        (["roofline", "gemm", "--m", "8", "--n", "8"], "roofline gemm needs --k"),
        (["roofline", "attention", "--heads", "8"], "needs --seq-q, --head-dim"),
        (GEMM_4096 + ["--dtype", "fp4"], "no fp4 peak"),
        (["roofline", "softmax", "--rows", "8", "--cols", "8", "--k", "8"], "does not take --k"),
        (["roofline", "gemm", "--m", "8", "--n", "8", "--k", "8", "--causal"], "--causal"),
        (["roofline", "gemm", "--m", "8", "--n", "8", "--k", "8", "--time-ms", "0"], "--time-ms"),
        (["roofline", "gemm", "--m", "8", "--n", "8", "--k", "8", "--math", "tf32"], "tf32"),
        (
            ["roofline", "gemm", "--m", "8", "--n", "8", "--k", "8", "--ceilings", "guess"],
            "ceilings",
        ),
        (
            ["roofline", "gemm", "--m", "8", "--n", "8", "--k", "8", "--plot", "x.txt"],
            ".png or .svg",
        ),
        (["roofline"], "OP"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(capsys, argv, says):
    for as_json in (False, True):
        line = one_line_failure(capsys, argv + (["--json"] if as_json else []))
        assert says in line


def fake_measured(monkeypatch, result):
    module = types.ModuleType("kernelab.harness.ceilings")
    module.measured_or_committed = lambda spec: None if result is None else (result, "a test")
    monkeypatch.setitem(sys.modules, "kernelab.harness.ceilings", module)


def test_measured_ceilings_missing_is_one_line(capsys, monkeypatch):
    fake_measured(monkeypatch, None)
    line = one_line_failure(capsys, [*GEMM_4096, "--ceilings", "measured", "--json"])
    assert "no measured ceilings for h100-sxm" in line and "run kernelab ceilings" in line


def test_measured_ceilings_are_used_when_present(capsys, monkeypatch):
    fake_measured(monkeypatch, Ceilings("h100-sxm", {"bf16": 700e12}, 3.0e12, "measured today"))
    data, _ = run_json(capsys, [*GEMM_4096, "--ceilings", "measured"])
    assert data["ceilings_source"] == "measured today"
    assert data["ridge"] == pytest.approx(700 / 3.0)


def test_measured_ceilings_of_a_card_come_from_its_committed_records(capsys, monkeypatch, tmp_path):
    # An empty cache: the committed benchmarks/results/h200/ceilings.json is what remains.
    monkeypatch.setenv("KERNELAB_CACHE", str(tmp_path))
    monkeypatch.delenv("KERNELAB_CEILINGS", raising=False)
    gemm = ["roofline", "gemm", "--m", "4096", "--n", "4096", "--k", "4096", "--dtype", "bf16"]
    data, err = run_json(capsys, [*gemm, "--gpu", "h200", "--ceilings", "measured"])
    assert "committed records" in err
    datasheet, _ = run_json(capsys, [*gemm, "--gpu", "h200"])
    # Measured roofs sit below the datasheet's: the ridge moves, the op stays compute-bound.
    assert data["ridge"] != pytest.approx(datasheet["ridge"])
    assert data["bound"] == "compute"


def test_plot_png_and_svg(capsys, tmp_path):
    import matplotlib.image

    png, svg = tmp_path / "roof.png", tmp_path / "roof.svg"  # the folder must exist (issue 32)
    data, err = run_json(capsys, [*GEMM_4096, "--time-ms", "0.2", "--plot", str(png)])
    assert data["plot"] == str(png) and str(png) in err
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert matplotlib.image.imread(png).ndim == 3
    assert main(["roofline", "softmax", "--rows", "64", "--cols", "64", "--plot", str(svg)]) == 0
    assert ET.parse(svg).getroot().tag.endswith("svg")


def test_plot_with_another_suffix_writes_nothing(capsys, tmp_path):
    target = tmp_path / "roof.txt"
    one_line_failure(capsys, [*GEMM_4096, "--plot", str(target)])
    assert not target.exists()


def _has_cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


@pytest.mark.skipif(_has_cuda(), reason="this machine has a GPU")
def test_gpu_auto_without_a_gpu_is_one_line(capsys):
    one_line_failure(capsys, [*GEMM_4096, "--gpu", "auto"])


@pytest.mark.gpu
def test_gpu_auto_places_on_the_detected_gpu(capsys):
    from kernelab.hardware import resolve_gpu

    spec = resolve_gpu("auto")
    data, _ = run_json(capsys, [*GEMM_4096, "--gpu", "auto"])
    assert data["gpu"] == spec.id
    assert data["ridge"] == pytest.approx(spec.ridge("bf16"))


@pytest.mark.parametrize(
    "argv, says",
    [
        (["roofline", "elementwise", "--n", str(10**400)], "elementwise: n must be at most 2**53"),
        (["roofline", "gemm", "--m", str(2**63), "--n", "8", "--k", "8"], "gemm: m must be at"),
        (["roofline", "softmax", "--rows", "8", "--cols", str(2**53 + 1)], "cols must be at"),
        (["roofline", "elementwise", "--n", "8", "--flops-per-element", str(2**64)],
         "flops_per_element must be at most 2**53"),
        # the ops of the specification go through the same cost models
        (["roofline", "transpose", "--rows", str(2**53 + 1), "--cols", "8"], "rows must be at"),
        (["roofline", "quant_gemv_int8", "--m", "1", "--n", "8", "--k", str(10**400)],
         "k must be at most 2**53"),
    ],
)  # fmt: skip
def test_a_count_past_2_to_the_53_is_one_line(capsys, argv, says):
    for as_json in (False, True):
        line = one_line_failure(capsys, argv + (["--json"] if as_json else []))
        assert says in line and len(line) < 200


def test_gemv_takes_the_classic_form_and_with_k_the_specifications_batched_form(capsys):
    from kernelab.roofline.costs import gemv, gemv_batched

    classic, _ = run_json(capsys, ["roofline", "gemv", "--m", "4096", "--n", "4096"])
    batched, _ = run_json(capsys, ["roofline", "gemv", "--m", "1", "--n", "4096", "--k", "4096"])
    assert classic["shape"] == {"m": 4096, "n": 4096}
    assert classic["bytes"] == gemv(4096, 4096, dtype="bf16").bytes
    assert batched["op"] == "gemv" and batched["shape"] == {"m": 1, "n": 4096, "k": 4096}
    expected = gemv_batched(1, 4096, 4096, dtype="bf16")
    assert (batched["flops"], batched["bytes"]) == (expected.flops, expected.bytes)
    assert "roofline gemv needs --m" in one_line_failure(
        capsys, ["roofline", "gemv", "--n", "8", "--k", "8"]
    )
    assert main(["roofline", "--help"]) == 0
    help_text = " ".join(capsys.readouterr().out.split())
    assert "y = A x" in help_text and "x[M,K] W[N,K]^T" in help_text


def test_an_int32_reduce_sum_is_placed_like_an_int32_scan(capsys):
    summed, _ = run_json(capsys, ["roofline", "reduce_sum", "--n", "1000", "--dtype", "int32",
                                  "--gpu", "h100-sxm"])  # fmt: skip
    assert summed["flops"] == 0 and summed["ridge"] is None and summed["bound"] == "memory"
    assert summed["floor_ms"] == pytest.approx(summed["bytes"] / 3.35e12 * 1e3)


@pytest.mark.parametrize(
    "argv, label",
    [
        (["quant_gemv_int8", "--m", "1", "--n", "4096", "--k", "4096"],
         "quant_gemv_int8 m=1 n=4096 k=4096"),
        (["quant_gemv_fp8", "--m", "1", "--n", "4096", "--k", "4096"],
         "quant_gemv_fp8 m=1 n=4096 k=4096"),
        (["quant_gemv_int4", "--m", "1", "--n", "4096", "--k", "4096", "--group", "128"],
         "quant_gemv_int4 m=1 n=4096 k=4096 group=128"),
        (["rope_interleaved", "--tokens", "1", "--heads", "8", "--head-dim", "64"],
         "rope_interleaved tokens=1 heads=8 head_dim=64"),
    ],
)  # fmt: skip
def test_a_specification_op_is_labelled_as_asked_for(capsys, argv, label):
    data, _ = run_json(capsys, ["roofline", *argv])
    assert data["op"] == argv[0]
    assert main(["roofline", *argv]) == 0
    op_row = capsys.readouterr().out.splitlines()[0]
    assert op_row.split(None, 1)[1].strip() == label


def _rows(text: str) -> dict:
    """The human table's rows by name (the first word of each line)."""
    return {line.split(None, 1)[0]: line.split(None, 1)[1].strip()
            for line in text.splitlines() if len(line.split(None, 1)) == 2}  # fmt: skip


def test_an_op_without_flops_reads_the_same_with_or_without_a_rate(capsys):
    transpose = [
        "roofline",
        "transpose",
        "--rows",
        "1024",
        "--cols",
        "1024",
        "--dtype",
        "fp32",
        "--gpu",
        "h100-sxm",
    ]
    histogram = ["roofline", "histogram", "--n", "1048576", "--bins", "256", "--gpu", "h100-sxm"]
    seen = []
    for argv in (transpose, histogram):
        assert main(argv) == 0
        rows = _rows(capsys.readouterr().out)
        assert rows["ridge"] == "none: no FLOPs, placed by its bytes alone"
        assert "no FLOPs" in rows["attainable"] and "TFLOP/s" not in rows["attainable"]
        seen.append((rows["ridge"], rows["attainable"]))
    assert seen[0] == seen[1]
    data, _ = run_json(capsys, transpose)  # JSON keeps the fp32 ridge: the rate exists
    assert data["ridge"] == pytest.approx(67.0 / 3.35)


def test_a_memory_bound_op_on_a_gpu_without_its_rate_is_placed_by_its_bytes(capsys):
    argv = ["roofline", "softmax", "--rows", "8", "--cols", "8", "--gpu", "rtx-5090"]
    data, _ = run_json(capsys, argv)
    assert data["dtype"] == "bf16" and data["bound"] == "memory"
    assert data["ridge"] is None and data["peak_tflops"] is None
    assert data["floor_ms"] == pytest.approx(data["bytes"] / 1792e9 * 1e3)
    assert data["ridge_note"].startswith("unknown: no bf16 rate listed")
    assert main(argv) == 0
    out = capsys.readouterr().out
    rows = _rows(out)
    assert rows["ridge"].startswith("unknown: no bf16 rate listed")
    assert "104.8" in rows["ridge"]  # the listed fp32 rate that proves it, and nothing made up
    assert "ridge is unknown" in out
    # A GEMM would need more than the fp32 rate to be memory-bound: still refused.
    gemm = [*GEMM_4096, "--gpu", "rtx-5090"]
    assert "rtx-5090 has no bf16 peak" in one_line_failure(capsys, gemm)


def test_a_peak_missing_from_measured_ceilings_reads_well(capsys, monkeypatch):
    source = "measured on NVIDIA H200, 2026-11-29"
    fake_measured(monkeypatch, Ceilings("h200", {"fp32": 51e12}, 4.2e12, source))
    argv = ["roofline", "gemm", "--m", "8", "--n", "8", "--k", "8", "--gpu", "h200"]
    line = one_line_failure(capsys, [*argv, "--ceilings", "measured", "--dtype", "fp64"])
    assert line == (
        "kernelab: h200 has no fp64 peak in its measured ceilings (measured on NVIDIA H200, "
        "2026-11-29; has: fp32)"
    )
    assert main([*argv, "--ceilings", "measured", "--dtype", "fp32"]) == 0
    gpu_row = _rows(capsys.readouterr().out)["gpu"]
    assert gpu_row.endswith("measured ceilings (measured on NVIDIA H200, 2026-11-29)")


# --- --m as a list: the walk over the batch ---------------------------------------------------

DECODE_MS = "1,2,4,8,16,32,64"


def test_a_list_of_m_walks_a_gemv_in_a_fresh_interpreter():
    from kernelab.hardware import get_gpu
    from kernelab.ops.gemv.roofline_walk import crossover_m
    from kernelab.roofline.costs import gemv_batched

    argv = ["roofline", "gemv", "--m", DECODE_MS, "--n", "4096", "--k", "4096", "--dtype",
            "bf16", "--gpu", "h100-sxm", "--json"]  # fmt: skip
    done = subprocess.run([sys.executable, "-m", "kernelab.cli", *argv], capture_output=True,
                          text=True, check=True)  # fmt: skip
    data = json.loads(done.stdout)
    spec = get_gpu("h100-sxm")
    ridge = spec.ridge("bf16")
    assert data["op"] == "gemv" and data["shape"] == {"n": 4096, "k": 4096}
    assert data["batches"] == [1, 2, 4, 8, 16, 32, 64]
    assert data["ridge"] == pytest.approx(ridge)
    assert [p["shape"]["m"] for p in data["points"]] == data["batches"]
    for point in data["points"]:
        cost = gemv_batched(point["shape"]["m"], 4096, 4096, dtype="bf16")
        assert point["intensity"] == pytest.approx(cost.intensity)
        attainable = min(spec.peak_flops("bf16"), cost.intensity * spec.bandwidth_bytes_per_s)
        assert point["attainable_tflops"] == pytest.approx(attainable / 1e12)
        assert point["bound"] == ("memory" if cost.intensity < ridge else "compute")
    # the crossing found on the cost model is the closed form's m*
    assert data["crossover_m"] == crossover_m(4096, 4096, ridge, 2)
    assert data["crossover_m"] > 64 and "memory-bound at every m listed" in data["bound_change"]


def test_the_walk_names_where_the_listed_m_turn_compute_bound(capsys):
    from kernelab.hardware import get_gpu
    from kernelab.ops.gemv.roofline_walk import crossover_m

    star = crossover_m(4096, 4096, get_gpu("h100-sxm").ridge("bf16"), 2)
    ms = [1, 16, star - 1, star, 2 * star]
    argv = ["roofline", "gemm", "--m", ",".join(map(str, ms)), "--n", "4096", "--k", "4096",
            "--gpu", "h100-sxm"]  # fmt: skip
    data, _ = run_json(capsys, argv)
    assert [p["bound"] for p in data["points"]] == ["memory"] * 3 + ["compute"] * 2
    assert data["crossover_m"] == star
    assert data["bound_change"] == (f"memory-bound up to m = {star - 1}, compute-bound from "
                                    f"m = {star}")  # fmt: skip
    assert main(argv) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert f"crosses the bf16 ridge of {data['ridge']:.4g} FLOP/B at m = {star}" in out
    for m in ms:
        assert f" {m} " in out
    assert "intensity FLOP/B" in out and "attainable TFLOP/s" in out


def test_one_m_keeps_the_single_placement(capsys):
    one, _ = run_json(capsys, ["roofline", "gemv", "--m", "1", "--n", "4096", "--k", "4096"])
    assert one["shape"]["m"] == 1 and "points" not in one and "bound" in one


def test_a_walk_that_never_crosses_says_so(capsys):
    # the classic y = A x: its intensity stays near 2 / itemsize whatever the rows of A
    data, _ = run_json(capsys, ["roofline", "gemv", "--m", "1,64", "--n", "4096", "--gpu",
                                "h100-sxm"])  # fmt: skip
    assert data["crossover_m"] is None and "never crosses" in data["crossover_note"]
    # no rate for the dtype: no ridge to cross, said in words
    data, _ = run_json(capsys, ["roofline", "gemm", "--m", "1,2", "--n", "64", "--k", "64",
                                "--gpu", "rtx-5090"])  # fmt: skip
    assert data["ridge"] is None and data["crossover_m"] is None
    assert "no ridge to cross" in data["crossover_note"] and data["ridge_note"]


def test_a_walk_of_a_quantized_gemv_and_its_times_give_achieved_per_m(capsys):
    argv = ["roofline", "quant_gemv_int4", "--m", "1,16,64", "--n", "4096", "--k", "4096",
            "--group", "128", "--gpu", "h100-sxm"]  # fmt: skip
    plain, _ = run_json(capsys, argv)
    floors = [p["floor_ms"] for p in plain["points"]]
    times = [2 * f for f in floors[:2]] + [floors[2] / 2]  # the last one beats its floor
    data, err = run_json(capsys, [*argv, "--time-ms", ",".join(f"{t:.9g}" for t in times)])
    sol = [p["sol_pct"] for p in data["points"]]
    assert sol[0] == pytest.approx(50, rel=1e-6) and sol[1] == pytest.approx(50, rel=1e-6)
    assert [p["faster_than_light"] for p in data["points"]] == [False, False, True]
    assert "m = 64" in err and "faster than speed of light" in err
    assert main([*argv, "--time-ms", ",".join(f"{t:.9g}" for t in times)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "achieved TFLOP/s" in out and "WARNING: m = 64" in out


def test_the_walk_plot_has_a_point_per_m(capsys, tmp_path):
    import matplotlib.image

    png = tmp_path / "walk.png"
    data, err = run_json(capsys, ["roofline", "gemv", "--m", DECODE_MS, "--n", "4096", "--k",
                                  "4096", "--gpu", "h100-sxm", "--plot", str(png)])  # fmt: skip
    assert data["plot"] == str(png) and str(png) in err
    assert matplotlib.image.imread(png).ndim == 3


def test_the_walk_chart_draws_one_point_per_m():
    from kernelab.commands.roofline import _cost
    from kernelab.hardware import get_gpu
    from kernelab.roofline.plot import draw_roofline
    from kernelab.roofline.walk import walk

    ms = [1, 2, 4, 8, 16, 32, 64]
    ceilings = Ceilings.from_spec(get_gpu("h100-sxm"))
    result = walk(lambda m: _cost("gemv", {"m": m, "n": 4096, "k": 4096}, "bf16", {}), ms,
                  ceilings)  # fmt: skip
    figure = draw_roofline(ceilings, result.points)
    legend = figure.legends[0]
    assert [t.get_text().split(" ")[1] for t in legend.get_texts()] == [f"m={m}" for m in ms]


@pytest.mark.parametrize(
    "m, says",
    [
        ("", "--m needs a value"),
        ("1,,4", "has an empty item"),
        ("1,", "has an empty item"),
        ("0", "--m must be at least 1"),
        ("1,0,4", "--m must be at least 1"),
        ("-4", "--m takes positive integers"),
        ("1,-2", "--m takes positive integers"),
        ("1.5", "--m takes positive integers"),
        ("1,two", "--m takes positive integers"),
        ("4,4", "--m lists 4 twice"),
        ("9" * 40, "past any batch"),
    ],
)
def test_a_bad_list_of_m_is_one_line_and_exit_2(capsys, m, says):
    argv = ["roofline", "gemv", "--m", m, "--n", "4096", "--k", "4096"]
    for as_json in (False, True):
        line = one_line_failure(capsys, argv + (["--json"] if as_json else []))
        assert says in line


@pytest.mark.parametrize(
    "argv, says",
    [
        (["roofline", "softmax", "--m", "1,2", "--rows", "8", "--cols", "8"], "does not take --m"),
        (["roofline", "gemv", "--m", "1,2", "--n", "8", "--k", "8", "--time-ms", "0.1"],
         "1 times for 2 values of --m"),
        (["roofline", "gemv", "--m", "1", "--n", "8", "--k", "8", "--time-ms", "0.1,0.2"],
         "one time, or one per m"),
        (["roofline", "gemv", "--m", "1,2", "--n", "8", "--k", "8", "--time-ms", "0.1,-1"],
         "--time-ms must be a positive"),
        (["roofline", "gemv", "--m", "1,2", "--n", "8", "--k", "8", "--plot", "x.txt"],
         ".png or .svg"),
    ],
)  # fmt: skip
def test_a_walk_refuses_what_does_not_fit_it_in_one_line(capsys, argv, says):
    assert says in one_line_failure(capsys, argv)
