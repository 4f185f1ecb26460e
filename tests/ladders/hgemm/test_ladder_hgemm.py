"""`kernelab ladder hgemm` and its engine, ladders/hgemm/ladder.py.

On the CPU: step and mode parsing, the pipeline lens against numbers worked by hand, the
per-step profile rows read from a real H200 ncu report, the CLI's compile report and lens
without a GPU, and one-line errors. On the GPU (marked `gpu`): a short checked and timed run
beside cuBLAS in both modes, and one step under ncu. Set $OUT to keep what the GPU tests
produced (the JSON documents and the rendered tables).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from pathlib import Path

import pytest

from kernelab.errors import KernelabError, UnknownNameError
from kernelab.hardware import get_gpu
from kernelab.ladders.hgemm import CHECK_SHAPES, STEPS, get_step
from kernelab.ladders.hgemm import ladder as hl
from kernelab.output import to_jsonable
from kernelab.runtime.cuda import build as cuda_build
from kernelab.runtime.cuda.sass import find_tool

needs_nvcc = pytest.mark.skipif(cuda_build.find_nvcc() is None, reason="needs nvcc")
NCU_FIXTURE = Path(__file__).parents[2] / "fixtures" / "ncu" / "gemm_focused_raw.csv"


def _no_gpu() -> bool:
    import torch

    return not torch.cuda.is_available()


def _names(steps) -> list[str]:
    return [s.name for s in steps]


# --- choosing steps and modes --------------------------------------------------------------


def test_parse_steps():
    assert _names(hl.parse_steps(None)) == _names(STEPS)
    assert _names(hl.parse_steps("all")) == _names(STEPS)
    assert _names(hl.parse_steps("06")) == ["hgemm:06"]
    assert _names(hl.parse_steps("hgemm:07, 3")) == ["hgemm:03", "hgemm:07"]
    assert _names(hl.parse_steps("5-7,1")) == ["hgemm:01", "hgemm:05", "hgemm:06", "hgemm:07"]
    with pytest.raises(UnknownNameError):
        hl.parse_steps("42")
    with pytest.raises(KernelabError, match="backwards"):
        hl.parse_steps("9-3")
    with pytest.raises(KernelabError, match="no steps"):
        hl.parse_steps(",")


def test_parse_modes():
    assert hl.parse_modes(None) == ["cold", "graph"]
    assert hl.parse_modes([]) == ["cold", "graph"]
    assert hl.parse_modes(["hot"]) == ["hot"]
    assert hl.parse_modes(["graph,cold", "cold"]) == ["graph", "cold"]
    assert hl.parse_modes("cold") == ["cold"]
    with pytest.raises(UnknownNameError, match="warm"):
        hl.parse_modes(["cold", "warm"])


def test_check_shapes_add_the_timed_sizes_once():
    shapes = hl.check_shapes([1024, 2048, 1024])
    assert shapes[: len(CHECK_SHAPES)] == [{"m": m, "n": n, "k": k} for m, n, k in CHECK_SHAPES]
    assert (2048, 2048, 2048) in CHECK_SHAPES  # so 2048 must not be added a second time
    assert shapes[len(CHECK_SHAPES) :] == [{"m": 1024, "n": 1024, "k": 1024}]


# --- the pipeline lens, worked by hand ---------------------------------------------------------

H200 = get_gpu("h200")  # 132 SMs, 4800 GB/s, bf16 dense 989.4 TFLOP/s
SM_RATE = 989.4e12 / 132  # bf16 FLOP/s per SM


def test_pipeline_lens_step06_by_hand():
    lens = hl.pipeline_lens(get_step(6), H200, latencies={"hbm": 1200.0, "l2": 600.0})
    # Block tile 128 x 256 x 64: a stage is 2*128*256*64 FLOPs and (128 + 256) * 64 bf16.
    assert lens["block_tile"] == [128, 256, 64]
    assert lens["bytes_per_stage"] == 49152
    assert lens["stages"] == 4 and lens["blocks_per_sm"] == 1
    assert lens["blocks_per_sm_source"] == "step metadata"
    assert lens["bytes_in_flight_per_sm"] == 4 * 49152  # 4 stages ahead, 1 block
    # Little's law: 4800 GB/s x 1200 ns / 132 SMs = 43,636 bytes per SM.
    assert lens["hbm_in_flight_needed_per_sm"] == pytest.approx(43636.36, rel=1e-5)
    assert lens["in_flight_over_needed"] == pytest.approx(196608 / 43636.36, rel=1e-5)
    assert lens["hbm_bandwidth_kept_pct"] == pytest.approx(100.0)  # 4.5x more than needed
    # 4,194,304 FLOPs at 7.4955 TFLOP/s per SM = 559.6 ns per stage;
    # ceil(1200 / 559.6) + 1 = 4 stages for HBM, ceil(600 / 559.6) + 1 = 3 for L2.
    assert lens["stage_compute_ns"] == pytest.approx(4194304 / SM_RATE * 1e9, rel=1e-9)
    assert lens["stage_compute_ns"] == pytest.approx(559.58, abs=0.01)
    assert (lens["stages_needed_hbm"], lens["stages_needed_l2"]) == (4, 3)
    assert lens["covers_hbm_latency"] is True  # 4 >= 4
    # 49152 bytes per 4,194,304 FLOPs at 989.4 TFLOP/s over all SMs: 11.59 TB/s.
    assert lens["load_tbps_demanded"] == pytest.approx(11.5945, abs=1e-4)
    assert lens["l2_load_tbps_demanded"] == pytest.approx(lens["load_tbps_demanded"])
    assert "4 covers HBM" in lens["summary"]


def test_pipeline_lens_when_latency_outruns_the_pipeline():
    lens = hl.pipeline_lens(get_step(6), H200, latencies={"hbm": 20000.0, "l2": 600.0})
    # 196,608 bytes x 132 SMs / 20 us = 1.298 TB/s of 4.8: 27.0 % of the bandwidth.
    assert lens["hbm_bandwidth_kept_pct"] == pytest.approx(100 * 196608 * 132 / 20e-6 / 4.8e12)
    assert lens["hbm_bandwidth_kept_pct"] == pytest.approx(27.03, abs=0.01)
    assert lens["stages_needed_hbm"] == math.ceil(20000 / 559.5797) + 1 == 37
    assert lens["covers_hbm_latency"] is False
    assert "does NOT cover" in lens["summary"]


def test_resident_blocks_share_the_mma_rate():
    # Step 02 states 2 blocks per SM: each block's 128x128x64 stage (2,097,152 FLOPs) then
    # lasts twice as long as the SM alone would take for it; the metadata beats an argument.
    lens = hl.pipeline_lens(get_step(2), H200, blocks_per_sm=5, latencies={"hbm": 900, "l2": 300})
    assert lens["blocks_per_sm"] == 2 and lens["blocks_per_sm_source"] == "step metadata"
    assert lens["stage_compute_ns"] == pytest.approx(2 * 2097152 / SM_RATE * 1e9, rel=1e-9)
    assert lens["bytes_in_flight_per_sm"] == 2 * (2 * 32768)
    # Step 01 states none: the occupancy of its compiled launch decides, else 1 is assumed.
    row = {"threads": 256, "registers": 122, "static_smem_bytes": 0, "dynamic_smem_bytes": 56832}
    blocks = hl.resident_blocks(row, H200)
    assert blocks == 2  # 122 regs x 256 threads: 2 blocks fit in 64K registers, not 3
    one = hl.pipeline_lens(get_step(1), H200, blocks_per_sm=blocks)
    assert one["blocks_per_sm_source"] == "occupancy of the compiled kernel"
    assert hl.pipeline_lens(get_step(1), H200)["blocks_per_sm_source"].startswith("assumed")


def test_l2_feed_of_cluster_steps():
    # 07 and 09 state their L2 bytes per K-tile; the rule for steps that do not (A tile +
    # B tile / cluster size) must give the same figures: 32 KiB and 24 KiB.
    for number, expected in ((7, 32768), (9, 24576)):
        step = get_step(number)
        assert hl.l2_bytes_per_stage(step) == expected
        pipeline = {k: v for k, v in step.pipeline.items() if k != "l2_bytes_per_k_tile_per_sm"}
        assert hl.l2_bytes_per_stage(dataclasses.replace(step, pipeline=pipeline)) == expected
    lens = hl.pipeline_lens(get_step(7), H200, latencies={"hbm": 900, "l2": 300})
    assert lens["l2_load_tbps_demanded"] == pytest.approx(lens["load_tbps_demanded"] * 2 / 3)
    assert hl.l2_bytes_per_stage(get_step(6)) == 49152  # no cluster: the whole stage


def test_a_step_without_pipeline_metadata_gets_a_one_line_reason():
    bare = dataclasses.replace(get_step(6), pipeline={"stages": 4})
    with pytest.raises(KernelabError, match="bytes_in_flight_per_block"):
        hl.pipeline_lens(bare, H200)
    lenses = hl.ladder_lenses([bare, get_step(5)], H200)
    assert lenses["hgemm:06"] == {
        "step": "hgemm:06",
        "error": "hgemm:06: no pipeline lens without bytes_in_flight_per_block",
    }
    assert lenses["hgemm:05"]["stages"] == 4


def test_every_step_has_a_lens():
    lenses = hl.ladder_lenses(STEPS, H200)
    assert [name for name, lens in lenses.items() if "error" in lens] == []


# --- the profile rows, from a real H200 report ----------------------------------------------


def test_profile_rows_from_a_real_report():
    from kernelab.profiling.report import load

    fp32_gemm, bf16_gemm = load(NCU_FIXTURE)  # cuBLAS fp32 and bf16 GEMMs at 4096^3, H200
    assert bf16_gemm.name.startswith("nvjet") and bf16_gemm.device == "NVIDIA H200"
    # Stand the report's kernels in for two steps by name, as ncu would name ours.
    kernels = [
        dataclasses.replace(fp32_gemm, name=get_step(5).kernel),
        dataclasses.replace(bf16_gemm, name=get_step(6).kernel),
    ]
    rows = hl.profile_rows([get_step(4), get_step(5), get_step(6)], kernels, 4096)
    missing, five, six = rows
    assert missing["found"] is False and "tensor_pct" not in missing
    assert five["found"] and six["found"]
    assert six["duration_ms"] == pytest.approx(0.176864)
    assert six["tflops"] == pytest.approx(2 * 4096**3 / 0.176864e-3 / 1e12, rel=1e-6)
    assert six["speedup_vs_prev"] == pytest.approx(2679520 / 176864, rel=1e-6)
    assert five["speedup_vs_prev"] is None  # step 04 had no kernel to compare with
    assert six["tensor_pct"] == pytest.approx(90.13654, rel=1e-6)
    assert five["tensor_pct"] < 0.01  # the fp32 SIMT GEMM leaves the tensor pipe idle
    assert six["top_stall"] and six["top_stall"] == six["stalls"][0]["reason"]
    assert six["bottleneck"]
    assert six["claimed_evidence"] == get_step(6).proof
    assert six["expected_speedup"] == get_step(6).expected_speedup


def test_launcher_rejects_bad_arguments(capsys):
    assert hl.main(["--size", "0", "--steps", "06"]) == 2
    assert hl.main(["--size", "64", "--steps", "42"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all(line.startswith("kernelab: ") for line in err)
    assert hl.launcher_command([get_step(6)], 2048)[-4:] == ["--size", "2048", "--steps", "06"]


def test_rows_records_and_table():
    from types import SimpleNamespace

    from kernelab.harness.records import Record
    from kernelab.harness.stats import summarize
    from kernelab.spec.reference import get_op

    cost = get_op("gemm").cost({"m": 1024, "n": 1024, "k": 1024}, "bf16")

    def timing(ms: float, mode: str):
        samples = [ms * 0.99, ms, ms * 1.01]
        return SimpleNamespace(
            median_ms=ms, rel_noise=0.01, throttled=False, mode=mode, samples_ms=samples,
            summary=summarize(samples), clocks={"sm_mhz": 1980.0}, warnings=[],
        )  # fmt: skip

    cublas = hl._row(hl.CUBLAS, 1024, timing(0.004, "cold"), cost.flops, 0.004)
    step = hl._row("hgemm:06", 1024, timing(0.005, "batch"), cost.flops, 0.004)
    transpose = hl._row(hl.TRANSPOSE, 1024, timing(0.002, "cold"), cost.flops, 0.004)
    assert cublas["pct_of_cublas"] == 100.0 and step["pct_of_cublas"] == pytest.approx(80.0)
    assert step["tflops"] == pytest.approx(2 * 1024**3 / 5e-6 / 1e12)
    assert transpose["tflops"] is None and transpose["gbps"] == pytest.approx(4 * 1024**2 / 2e3)
    assert hl.same_mode(step, "graph") and not hl.same_mode(step, "cold")
    table = hl.format_table([cublas, step], [1024], ["cold", "graph"])
    assert "100.0%" in table and "80.0%" in table

    identity = SimpleNamespace(name="NVIDIA H200", gpu_id="h200", driver="580")
    record = hl.to_record("hgemm:06", 1024, timing(0.005, "graph"), cost, identity, {}, step)
    again = Record.from_dict(json.loads(json.dumps(record.to_dict())))
    assert again.implementation == "hgemm:06" and again.dtype == "bf16"
    assert again.extra == {"ladder": "hgemm", "pct_of_cublas": pytest.approx(80.0)}


# --- the command without a GPU --------------------------------------------------------------


@needs_nvcc
@pytest.mark.skipif(not _no_gpu(), reason="checks the no-GPU path")
def test_cli_without_gpu_prints_the_compile_report_and_the_lens(capsys):
    from kernelab.cli import main

    assert main(["ladder", "hgemm", "--steps", "06", "--json"]) == 0
    captured = capsys.readouterr()
    data = json.loads(captured.out)  # exactly one JSON document on stdout
    assert "timing and checking need a CUDA GPU" in captured.err
    assert data["timed"] is False and data["gpu"] is None and data["lens_gpu"] == "h200"
    (compiled,) = data["compile"]
    assert compiled["step"] == "hgemm:06" and compiled["spills"] is False
    assert compiled["threads"] == 384 and compiled["dynamic_smem_bytes"] == 4 * 49152 + 1024
    if find_tool("cuobjdump"):
        assert compiled["sass_claims"] and all(compiled["sass_claims"].values())
    expected = hl.pipeline_lens(get_step(6), H200)  # the same default latencies
    # Through JSON like the command's output (tuples become lists; floats round-trip exactly).
    assert data["lens"]["hgemm:06"] == json.loads(json.dumps(to_jsonable(expected)))

    assert main(["ladder", "hgemm", "--steps", "06"]) == 0
    text = capsys.readouterr().out
    assert "pipeline lens" in text and "hgemm:06" in text and "Little's law" in text


@pytest.mark.parametrize(
    "args",
    [
        ["dgemm"],
        ["hgemm", "--steps", "42"],
        ["hgemm", "--steps", "9-3"],
        ["hgemm", "--mode", "warm"],
        ["hgemm", "--mode", "cold,hot,lukewarm"],
        ["hgemm", "--sizes", "0"],
        ["hgemm", "--sizes", "1024,x"],
        ["hgemm", "--profile", "--sizes", "1024,2048"],
        ["hgemm", "--max-time", "0"],
        ["hgemm", "--plot", "ladder.png"],
        ["sgemm", "--mode", "cold", "--mode", "graph"],
    ],
)
def test_cli_bad_input_is_one_line(args, capsys):
    from kernelab.cli import main

    assert main(["ladder", *args]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("kernelab: ") and captured.out == ""


def test_unknown_ladder_lists_both(capsys):
    from kernelab.cli import main

    assert main(["ladder", "dgemm"]) == 2
    err = capsys.readouterr().err
    assert "unknown ladder 'dgemm'" in err and "sgemm" in err and "hgemm" in err


def _pretend_gpu(monkeypatch):
    """The command's GPU branch with the GPU work replaced: checks, grids and timings come
    from the stubs below, so the flow, the JSON and the tables are exercised on the CPU."""
    from types import SimpleNamespace

    from kernelab.commands import ladder_hgemm as command

    monkeypatch.setattr(command, "_has_gpu", lambda: True)
    monkeypatch.setattr(command, "_lens_spec", lambda: H200)

    def check_steps(steps, progress, shapes):
        ok = {"ok": True, "message": "fine"}
        bad = {"ok": False, "message": "off by a lot"}
        return {s.name: [{"shape": sh, **(bad if s.number == 5 else ok)} for sh in shapes]
                for s in steps}  # fmt: skip

    def time_ladder(steps, sizes, modes, max_time_s, progress, bracket=False):
        timed = [hl.CUBLAS, *(s.name for s in steps), *([hl.CUBLAS_AGAIN] if bracket else [])]
        rows = [{"impl": name, "size": size, "mode": "batch" if mode == "graph" else mode,
                 "median_ms": 1.0 + i, "tflops": 100.0 / (1 + i), "pct_of_cublas": 100 / (1 + i)}
                for size in sizes for mode in modes for i, name in enumerate(timed)]  # fmt: skip
        return rows, [SimpleNamespace(gpu="NVIDIA H200")]

    monkeypatch.setattr(hl, "check_steps", check_steps)
    monkeypatch.setattr(hl, "persistent_grids", lambda steps, sizes, progress: {"hgemm:06": {}})
    monkeypatch.setattr(hl, "time_ladder", time_ladder)


@needs_nvcc
def test_cli_gpu_branch_with_the_gpu_work_stubbed(monkeypatch, capsys):
    from kernelab.cli import main

    _pretend_gpu(monkeypatch)
    args = ["ladder", "hgemm", "--steps", "5,6", "--sizes", "256", "--mode", "cold,graph"]
    assert main([*args, "--json"]) == 1  # a step gave wrong answers: the run says so
    result = json.loads(capsys.readouterr().out)
    assert result["timed"] and result["wrong"] == ["hgemm:05"] and not result["all_correct"]
    assert len(result["checks"]["hgemm:06"]) == len(CHECK_SHAPES) + 1  # and 256^3
    assert set(result["lens"]) == {"hgemm:05", "hgemm:06"} and result["modes"] == ["cold", "graph"]
    assert {r["impl"] for r in result["timing"]} == {"torch.mm", "hgemm:06"}  # 05 not timed
    assert main(args) == 1
    text = capsys.readouterr().out
    assert "cold mode" in text and "graph mode" in text and "hgemm:05 wrong at" in text


@needs_nvcc
def test_cli_pairs_each_correct_step_with_cublas_when_asked(monkeypatch, capsys):
    from kernelab.cli import main

    _pretend_gpu(monkeypatch)
    seen = []

    def time_paired(steps, size, pairs, progress, mode="cold"):
        seen.append(([s.name for s in steps], size, pairs))
        return [{"impl": s.name, "size": size, "mode": mode, "pairs": pairs,
                 "pct_median": 100.3, "pct_ci95": [100.2, 100.4], "pairs_ahead": 7}
                for s in steps]  # fmt: skip

    monkeypatch.setattr(hl, "time_paired", time_paired)
    args = ["ladder", "hgemm", "--steps", "5,6", "--sizes", "256,512", "--pairs", "50"]
    assert main([*args, "--json"]) == 1  # step 05 is wrong
    result = json.loads(capsys.readouterr().out)
    # the step that gave wrong answers is not paired; every size is
    assert seen == [(["hgemm:06"], 256, 50), (["hgemm:06"], 512, 50)]
    assert [r["size"] for r in result["paired"]] == [256, 512]
    assert main(args) == 1
    assert "alternating pairs" in capsys.readouterr().out
    for bad in (["--pairs", "-1"], ["--pairs", "5", "--profile"]):
        assert main(["ladder", "hgemm", "--steps", "6", *bad]) == 2
    assert main(["ladder", "sgemm", "--pairs", "5"]) == 2


def test_cli_profile_branch_with_ncu_stubbed(monkeypatch, capsys):
    from kernelab.cli import main
    from kernelab.profiling.report import load

    _pretend_gpu(monkeypatch)
    fixture = load(NCU_FIXTURE)[1]
    kernel = dataclasses.replace(fixture, name=get_step(6).kernel)
    seen = {}

    def profile_steps(steps, size, progress):
        seen["size"] = size
        return hl.profile_rows(steps, [kernel], size)

    monkeypatch.setattr(hl, "compile_report", lambda steps, progress: [])
    monkeypatch.setattr(hl, "profile_steps", profile_steps)
    args = ["ladder", "hgemm", "--profile", "--steps", "6"]
    assert main([*args, "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert seen["size"] == 4096 and result["gpu"] == "NVIDIA H200"
    assert result["profile"][0]["tensor_pct"] == pytest.approx(90.13654, rel=1e-6)
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "Nsight Compute" in text and "hgemm:06 claims" in text


# --- on the GPU --------------------------------------------------------------------------------


def _keep(name: str, result: dict, render) -> None:
    """Write the JSON document and its rendered table under $OUT, when the caller set one."""
    out = os.environ.get("OUT")
    if not out:
        return
    from rich.console import Console

    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.json").write_text(json.dumps(result, indent=1, default=str) + "\n")
    with (folder / f"{name}.txt").open("w") as handle:
        render(result, Console(file=handle, width=170))


@pytest.mark.gpu
def test_cli_checks_and_times_a_step_beside_cublas_on_gpu(capsys, tmp_path):
    from kernelab.cli import main
    from kernelab.commands.ladder_hgemm import _render_hgemm_timing
    from kernelab.harness.records import load_records

    records = Path(os.environ.get("OUT") or tmp_path) / "ladder_hgemm_records.json"
    args = ["ladder", "hgemm", "--sizes", "1024", "--steps", "06", "--max-time", "0.3"]
    assert main([*args, "--out", str(records), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    _keep("ladder_hgemm_1024", result, _render_hgemm_timing)

    assert result["timed"] is True and result["all_correct"] is True
    checks = result["checks"]["hgemm:06"]
    assert len(checks) == len(CHECK_SHAPES) + 1  # the awkward shapes and 1024^3
    assert all(c["ok"] for c in checks), [c["message"] for c in checks if not c["ok"]]
    assert result["grids"]["hgemm:06"]["1024"] > 0  # JSON keys are strings
    for mode in ("cold", "graph"):
        rows = {r["impl"]: r for r in result["timing"] if hl.same_mode(r, mode)}
        # the other languages' GEMMs are columns too where they build and pass their check
        assert {"torch.mm", "hgemm:06"} <= set(rows) <= {"torch.mm", "hgemm:06", *hl.OTHER_COLUMNS}
        assert rows["torch.mm"]["pct_of_cublas"] == pytest.approx(100.0)  # a ratio of rates
        step = rows["hgemm:06"]
        assert step["tflops"] > 0 and step["median_ms"] > 0
        assert step["pct_of_cublas"] == pytest.approx(
            100 * rows["torch.mm"]["median_ms"] / step["median_ms"]
        )
    assert result["lens"]["hgemm:06"]["stages"] == 4
    saved = load_records(records)
    saved_impls = {r.implementation for r in saved}
    assert {"torch.mm", "hgemm:06"} <= saved_impls
    assert len(saved) == 2 * len(saved_impls)  # one record per implementation and mode


@pytest.mark.gpu
def test_bracketed_timing_times_cublas_again_after_the_steps():
    rows, records = hl.time_ladder(
        [get_step(13)], [1024], ["cold"], 0.2, bracket=True, other_columns=()
    )
    assert [r["impl"] for r in rows] == [hl.CUBLAS, "hgemm:13", hl.CUBLAS_AGAIN]
    first, again = rows[0], rows[2]
    assert again["pct_of_cublas"] == pytest.approx(100 * first["median_ms"] / again["median_ms"])
    assert [r.implementation for r in records] == [hl.CUBLAS, "hgemm:13", hl.CUBLAS_AGAIN]


@pytest.mark.gpu
def test_cli_profiles_a_step_under_ncu_on_gpu(capsys):
    from kernelab.cli import main
    from kernelab.commands.ladder_hgemm import _render_hgemm_profile

    args = ["ladder", "hgemm", "--profile", "--sizes", "2048", "--steps", "06", "--json"]
    assert main(args) == 0
    result = json.loads(capsys.readouterr().out)
    _keep("ladder_hgemm_profile_2048", result, _render_hgemm_profile)

    (row,) = result["profile"]
    assert row["step"] == "hgemm:06" and row["found"], row
    assert row["tensor_pct"] is not None and row["tensor_pct"] > 0
    assert row["duration_ms"] > 0 and row["tflops"] > 0
    assert row["top_stall"] and row["bottleneck"]
    assert row["claimed_evidence"] == get_step(6).proof


def test_interleaved_rounds_rate_each_step_against_the_faster_cublas_around_it():
    cublas = iter([10.0, 9.0, 9.5, 9.5, 11.0, 10.0])  # round 3: the card slows, then recovers
    step = iter([9.0, 9.5, 10.0])
    pct = hl.interleave(lambda: next(cublas), {"hgemm:10": lambda: next(step)}, 3)
    assert pct["hgemm:10"] == pytest.approx([100.0, 100.0, 100.0])
    row = hl._rounds_row("hgemm:10", 4096, "cold", [98.0, 101.0, 103.0])
    assert (row["pct_median"], row["pct_min"], row["pct_max"]) == (101.0, 98.0, 103.0)
    assert row["rounds_ahead"] == 2 and row["rounds"] == 3
    assert "2/3" in hl.format_rounds([row])
    with pytest.raises(KernelabError, match="at least 1"):
        hl.time_rounds([], 1024, 0)
