"""`kernelab tile` and `kernelab pipeline`: JSON on stdout, one-line errors with exit 2."""

from __future__ import annotations

import json
import re

import pytest

from kernelab.cli import main
from kernelab.spec import registry
from kernelab.spec.registry import Implementation

TILE = ["tile", "--bm", "128", "--bn", "128", "--bk", "8", "--tm", "8", "--tn", "8"]


def _json(capsys, argv):
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def _fails(capsys, argv) -> str:
    assert main(argv) == 2
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert err.startswith("kernelab:") and "\n" not in err
    assert "Traceback" not in captured.err
    return err


def test_tile_json(capsys):
    data = _json(
        capsys,
        [*TILE, "--threads", "256", "--regs", "128", "--m", "4096", "--n", "4096", "--k", "4096"]
        + ["--gpu", "h200", "--json"],
    )
    assert data["gpu"] == "h200"
    assert data["gpu_choice"] == {"id": "h200", "how": "given", "reason": "given with --gpu"}
    assert data["smem_per_block_bytes"] == 8192
    assert data["registers_source"] == "given"
    assert data["occupancy"]["blocks_per_sm"] == 2
    assert data["occupancy"]["limiter"] == ["registers"]
    assert data["reuse"]["block_flops_per_global_byte"] == pytest.approx(32.0)
    assert data["reuse"]["thread_flops_per_smem_load"] == pytest.approx(8.0)
    assert data["waves"]["blocks"] == 1024
    assert data["waves"]["slots"] == 264
    assert data["banks"] is None


def test_tile_with_banks(capsys):
    data = _json(capsys, [*TILE, "--threads", "256", "--bank-stride", "32", "--json"])
    assert data["banks"]["wavefronts"] == 32
    assert data["banks"]["padding_words"] == 1


def test_tile_human_output(capsys):
    assert main([*TILE, "--threads", "256"]) == 0
    out = capsys.readouterr().out
    assert "occupancy" in out and "estimate" in out


@pytest.mark.parametrize(
    "extra, words",
    [
        (["--threads", "100"], "multiple of the warp size"),
        (["--threads", "256", "--tm", "6"], "does not divide"),
        (["--threads", "0"], "must be positive"),
        (["--threads", "256", "--m", "4096"], "M, N and K"),
        (["--threads", "256", "--m", "0", "--n", "1", "--k", "1"], "must be positive"),
        (["--threads", "256", "--bank-stride", "32", "--bank-width", "12"], "access width"),
        (["--threads", "256", "--gpu", "h900"], "unknown GPU"),
    ],
)
def test_tile_bad_input_is_one_line(capsys, extra, words):
    assert words in _fails(capsys, [*TILE, *extra])


def test_tile_missing_options_are_named(capsys):
    err = _fails(capsys, ["tile", "--bm", "128"])
    assert "--bn" in err and "--threads" in err


def test_tile_that_does_not_fit_in_shared_memory_says_so(capsys):
    argv = ["tile", "--bm", "512", "--bn", "512", "--bk", "64", "--tm", "16", "--tn", "16"]
    err = _fails(capsys, [*argv, "--threads", "1024", "--regs", "64", "--stages", "2"])
    assert "shared memory" in err


def test_tile_reads_a_registered_kernel(capsys, monkeypatch):
    meta = {"BM": 128, "BN": 128, "BK": 16, "WM": 64, "WN": 64, "TM": 8, "TN": 4}
    meta |= {"threads": 128, "registers": 128}
    impl = Implementation(
        name="sgemm:10", op="gemm", build=lambda: None, dtypes=("fp32",), metadata=meta
    )
    monkeypatch.setattr(registry, "get", lambda name: impl)
    data = _json(capsys, ["tile", "--kernel", "sgemm:10", "--stages", "2", "--json"])
    assert data["kernel"] == "sgemm:10"
    assert data["config"]["wm"] == 64
    assert data["config"]["stages"] == 2  # the option overrides the metadata
    assert data["smem_per_block_bytes"] == 2 * (128 * 16 + 16 * 128) * 4
    assert data["reuse"]["warp_flops_per_smem_element"] == pytest.approx(64.0)


def test_pipeline_json(capsys):
    data = _json(capsys, ["pipeline", "--gpu", "h200", "--latency-ns", "500", "--json"])
    memory = data["memory"]
    assert memory["bandwidth_gbps"] == 4800
    assert memory["in_flight_per_sm_bytes"] == pytest.approx(4800e9 * 500e-9 / 132)
    assert memory["kernel"] is None
    assert data["tensor_cores"]["dtype"] == "bf16"
    assert data["tensor_cores"]["stages_needed"] is None


def test_pipeline_with_a_kernel_and_a_tile(capsys):
    argv = ["pipeline", "--gpu", "h200", "--latency-ns", "500", "--bytes-per-stage", "4096"]
    argv += ["--stages", "2"]
    argv += ["--blocks-per-sm", "1", "--bm", "128", "--bn", "256", "--bk", "64", "--json"]
    data = _json(capsys, argv)
    need = 4800e9 * 500e-9 / 132
    assert data["memory"]["kernel"]["pct_of_bandwidth"] == pytest.approx(100 * 4096 / need)
    assert data["tensor_cores"]["stages_needed"] == 2


def test_pipeline_human_output(capsys):
    assert main(["pipeline"]) == 0
    out = capsys.readouterr().out
    assert "in flight needed" in out and "KiB per SM" in out


@pytest.mark.parametrize(
    "argv",
    [
        ["pipeline", "--latency-ns", "0"],
        ["pipeline", "--latency-ns", "nan"],
        ["pipeline", "--latency-ns", "inf"],
        ["pipeline", "--bandwidth-gbps", "-5"],
        ["pipeline", "--bandwidth-gbps", "inf"],
        ["pipeline", "--bandwidth-gbps", "nan"],
        ["pipeline", "--bytes-per-stage", "nan"],
        ["pipeline", "--gpu", ""],
        ["pipeline", "--stages", "2"],
        ["pipeline", "--bm", "128"],
        ["pipeline", "--dtype", "fp5"],
        ["pipeline", "--gpu", "m3-max"],  # no latency known for it: asks for --latency-ns
    ],
)
def test_pipeline_bad_input_is_one_line(capsys, argv):
    _fails(capsys, argv)


def test_tile_of_a_ladder_step_takes_its_registers_from_ptxas(capsys):
    from kernelab.ladders.sgemm.ladder import compile_report, parse_steps
    from kernelab.runtime.cuda.build import find_nvcc

    if find_nvcc() is None:
        pytest.skip("needs nvcc (the lens estimates registers without it)")
    data = _json(capsys, ["tile", "--kernel", "sgemm:12", "--gpu", "h200", "--json"])
    compiled = {row["step"]: row for row in compile_report(parse_steps("12"))}["sgemm:12"]
    # One launch configuration per step: the lens and the compile report agree.
    assert data["registers_source"] == "given"
    assert data["registers_per_thread"] == compiled["registers"]


@pytest.mark.parametrize(
    "argv, words",
    [
        (["pipeline", "--stages", "8", "--bytes-per-stage", "65536", "--blocks-per-sm", "4"],
         "of shared memory per block"),
        (["pipeline", "--stages", "2", "--bytes-per-stage", "65536", "--blocks-per-sm", "4"],
         "of shared memory per SM"),
        (["pipeline", "--bytes-per-stage", "65536", "--blocks-per-sm", "100"], "at most 32"),
        (["pipeline", "--bandwidth-gbps", "1e308"], "more bytes in flight than a float holds"),
        (["pipeline", "--bm", str(10**400), "--bn", "64", "--bk", "32"], "BM must be at most"),
    ],
)  # fmt: skip
def test_pipeline_refuses_what_cannot_be_in_one_line(capsys, argv, words):
    for extra in ([], ["--json"]):
        assert words in _fails(capsys, [*argv, "--gpu", "h100-sxm", *extra])


def test_pipeline_words_stages_integer_ops_and_huge_figures(capsys):
    assert main(["pipeline", "--bytes-per-stage", "65536", "--stages", "1"]) == 0
    out = capsys.readouterr().out
    assert "its one stage (not pipelined" in out and "1 stage(s) loading ahead" not in out
    assert main(["pipeline", "--dtype", "int8", "--bm", "128", "--bn", "128", "--bk", "64"]) == 0
    out = capsys.readouterr().out
    assert "8192 OP/cycle/SM" in out and "FLOP" not in out
    assert main(["pipeline", "--bandwidth-gbps", "1e200"]) == 0
    out = capsys.readouterr().out
    assert "1e+200 GB/s" in out and not re.search(r"\d{13}", out)


@pytest.mark.parametrize(
    "extra, words",
    [
        (["--bank-width", "8"], "--bank-width needs --bank-stride"),
        (["--bank-pattern", "row"], "--bank-pattern needs --bank-stride"),
        (["--bank-width", "8", "--bank-pattern", "row"], "and --bank-pattern need --bank-stride"),
        (["--m", str(2**63), "--n", "8", "--k", "5"], "M must be at most 2**53"),
        (["--bm", str(10**400)], "BM must be at most 2**53"),
        (["--gpu", "m3-max"], "m3-max is an Apple part"),
        (["--gpu", "mi300x"], "mi300x is an AMD part"),
    ],
)
def test_tile_refuses_in_one_line(capsys, extra, words):
    assert words in _fails(capsys, [*TILE, "--threads", "256", *extra])


def test_tile_bank_width_takes_effect_with_a_stride(capsys):
    argv = [*TILE, "--threads", "256", "--bank-stride", "32", "--json"]
    assert _json(capsys, [*argv, "--bank-width", "8"])["banks"]["access_width_bytes"] == 8
    assert _json(capsys, argv)["banks"]["access_width_bytes"] == 4


def test_tile_fp64_registers_add_up_and_huge_problems_print_short(capsys):
    assert main([*TILE, "--threads", "256", "--dtype", "fp64"]) == 0
    out = capsys.readouterr().out
    assert "registers       180 per thread" in out
    assert (
        "(128 for 64 fp64 accumulators (2 each) + 32 for 16 fp64 fragment values (2 each) + 20"
        in out
    )
    big = str(2**53)
    assert main([*TILE, "--threads", "256", "--m", big, "--n", big, "--k", "5"]) == 0
    waves = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("waves"))
    assert "e+" in waves and not any(len(word) > 12 for word in waves.split())


def test_tile_dtype_over_a_kernel_moves_the_accumulator(capsys, monkeypatch):
    meta = {"BM": 128, "BN": 128, "BK": 8, "TM": 8, "TN": 8, "threads": 256}
    impl = Implementation(
        name="toy.gemm", op="gemm", build=lambda: None, dtypes=("fp32",), metadata=meta
    )
    monkeypatch.setattr(registry, "get", lambda name: impl)
    data = _json(capsys, ["tile", "--kernel", "toy.gemm", "--dtype", "fp64", "--json"])
    assert data["config"]["acc_dtype"] == "fp64"
    assert data["registers_per_thread"] == 180
