"""`kernelab profile`: the ncu command line it builds, its errors, and its report output.

Without a GPU, a stand-in `ncu` (a small script put first on PATH) records the argv it was
given and acts out one outcome: write the H200 fixture report, refuse the counters, match no
kernel, or fail. The real thing runs in the gpu-marked test at the end.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kernelab.cli import main
from kernelab.errors import KernelabError
from kernelab.profiling.metrics import EXTRA_METRICS, FOCUSED_SECTIONS
from kernelab.profiling.ncu import build_ncu_command, report_path

NCU = Path(__file__).resolve().parents[1] / "fixtures" / "ncu"
FOCUSED_REPORT = NCU / "gemm_focused.ncu-rep.xz"


def run_cli(args, capsys) -> tuple[int, str, str]:
    code = main(args)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


# --- the command line ------------------------------------------------------------------------


def test_every_command_keeps_the_clocks_alone_and_follows_children(tmp_path):
    variants = [
        {},
        {"sections": "full"},
        {"kernel_regex": "gemm", "launch_skip": 3, "launch_count": 2},
        {"nvtx_range": "kernelab_profile/", "launch_count": None, "metrics": None},
    ]
    for options in variants:
        command = build_ncu_command(["python", "x.py"], out_path=tmp_path / "r", **options)
        at = command.index("--clock-control")
        assert command[at + 1] == "none", options
        assert command[command.index("--target-processes") + 1] == "all"
        assert command[-2:] == ["python", "x.py"]  # the target comes last, untouched
        assert "-f" in command and command[command.index("-o") + 1] == str(tmp_path / "r")


def test_focused_sections_and_extra_metrics_are_requested(tmp_path):
    command = build_ncu_command(["./a.out"], out_path=tmp_path / "r.ncu-rep")
    sections = [command[i + 1] for i, a in enumerate(command) if a == "--section"]
    assert sections == list(FOCUSED_SECTIONS)
    metrics = command[command.index("--metrics") + 1].split(",")
    assert "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum" in metrics
    assert "sm__ops_path_tensor_src_bf16_dst_fp32.sum" in metrics
    assert "dram__bytes_read.sum" in metrics and set(metrics) == set(EXTRA_METRICS)
    assert "--set" not in command
    # ncu appends .ncu-rep itself: -o gets the name without it.
    assert command[command.index("-o") + 1] == str(tmp_path / "r")
    assert report_path(tmp_path / "r") == report_path(tmp_path / "r.ncu-rep")


def test_filters_become_ncu_options(tmp_path):
    command = build_ncu_command(
        ["python", "s.py"],
        out_path=tmp_path / "r",
        sections="full",
        kernel_regex="sgemm.*",
        nvtx_range="step/",
        launch_skip=5,
        launch_count=2,
    )
    joined = " ".join(command)
    assert "--set full" in joined and "--section" not in command
    assert "--kernel-name regex:sgemm.*" in joined
    assert "--nvtx --nvtx-include step/" in joined
    assert "--launch-skip 5" in joined and "--launch-count 2" in joined


def test_metrics_alone_are_a_profile_without_sections(tmp_path):
    """A ladder's proof metrics are all it collects: no section, only --metrics."""
    command = build_ncu_command(["./a.out"], out_path=tmp_path / "r", sections=(),
                                metrics=["lts__t_sectors_op_red.sum"])  # fmt: skip
    assert "--section" not in command and "--set" not in command
    assert command[command.index("--metrics") + 1] == "lts__t_sectors_op_red.sum"


@pytest.mark.parametrize(
    "options",
    [
        {"launch_skip": -1},
        {"launch_count": 0},
        {"sections": "everything"},
        {"sections": (), "metrics": None},
        {"sections": (), "metrics": []},
        {"kernel_regex": "  "},
    ],
)
def test_bad_options_are_refused(tmp_path, options):
    with pytest.raises(KernelabError):
        build_ncu_command(["python"], out_path=tmp_path / "r", **options)
    with pytest.raises(KernelabError, match="nothing to profile"):
        build_ncu_command([], out_path=tmp_path / "r")


# --- failures are one line -------------------------------------------------------------------


def test_missing_ncu_is_one_line_and_exit_2(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "KERNELAB_NCU"}
    env["PATH"] = ""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "kernelab.cli",
            "profile",
            "--kernel",
            "x",
            "--",
            "python",
            "-c",
            "1",
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    assert done.returncode == 2
    lines = [line for line in done.stderr.splitlines() if line.startswith("kernelab:")]
    assert lines == [
        "kernelab: ncu not found: install Nsight Compute or add /usr/local/cuda/bin to PATH"
    ]
    assert "Traceback" not in done.stderr and done.stdout == ""


def test_counter_permission_error_names_the_fix(fake_ncu, monkeypatch, capsys):
    monkeypatch.setenv("FAKE_NCU_MODE", "perm")
    code, out, err = run_cli(["profile", "--kernel", "x", "--", "python", "-c", "1"], capsys)
    assert code == 2 and out == ""
    (line,) = [x for x in err.splitlines() if x.startswith("kernelab:")]
    assert "ERR_NVGPUCTRPERM" in line and "NVreg_RestrictProfilingToAdminUsers=0" in line


def test_no_matching_kernel_is_one_line(fake_ncu, monkeypatch, capsys):
    monkeypatch.setenv("FAKE_NCU_MODE", "none")
    code, _, err = run_cli(["profile", "--kernel", "nomatch", "--", "python", "-c", "1"], capsys)
    assert code == 2
    (line,) = [x for x in err.splitlines() if x.startswith("kernelab:")]
    assert "profiled no kernel" in line and "nomatch" in line


def test_a_failing_target_reports_ncus_error_line(fake_ncu, monkeypatch, capsys):
    monkeypatch.setenv("FAKE_NCU_MODE", "fail")
    code, _, err = run_cli(["profile", "--kernel", "x", "--", "python", "bad.py"], capsys)
    assert code == 2
    (line,) = [x for x in err.splitlines() if x.startswith("kernelab:")]
    assert "exit 1" in line and "returned an error code" in line


@pytest.mark.parametrize(
    "args",
    [
        ["profile"],
        ["profile", "--set", "bogus", "--import", str(FOCUSED_REPORT)],
        ["profile", "--import", str(FOCUSED_REPORT), "torch.mm"],
        ["profile", "--import", "/no/such/report.ncu-rep"],
        ["profile", "--kernel", "x", "--launch-count", "0", "--", "python", "-c", "1"],
        ["profile", "no.such.kernel", "--size", "64"],
        ["profile", "torch.mm", "--size", "0"],
        ["profile", "torch.mm", "--rows", "64"],
        ["profile", "torch.mm", "--m", "64", "--n", "64"],
        ["profile", "torch.softmax", "--size", "64", "--k", "3"],
        ["profile", "--import", "/dev/null"],
        ["profile", "--import", str(NCU / "gemm_focused_raw.csv"), "--set", "full"],
        ["profile", "--import", str(NCU / "gemm_focused_raw.csv"), "--size", "5"],
        ["profile", "--import", str(NCU / "gemm_focused_raw.csv"), "--dtype", "bf16"],
        ["profile", "--import", str(NCU / "gemm_focused_raw.csv"), "--launch-count", "2"],
    ],
)
def test_bad_input_is_one_line_and_exit_2(args, capsys, fake_ncu):
    code, out, err = run_cli(args, capsys)
    assert code == 2, err
    assert out == ""
    lines = [x for x in err.strip().splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("kernelab:"), err
    with pytest.raises(FileNotFoundError):
        fake_ncu()  # refused before ncu ever ran


# --- reports ---------------------------------------------------------------------------------


def test_import_says_what_is_wrong_with_the_file_or_the_options(capsys, tmp_path):
    code, _, err = run_cli(["profile", "--import", "/dev/null"], capsys)
    assert code == 2 and "/dev/null is not a regular file" in err and "no such" not in err
    empty = tmp_path / "page.csv"
    empty.write_text("")
    code, _, err = run_cli(["profile", "--import", str(empty)], capsys)
    assert code == 2 and f"{empty} is empty" in err
    page = str(NCU / "gemm_focused_raw.csv")
    code, _, err = run_cli(["profile", "--import", page, "--set", "full", "--size", "5"], capsys)
    assert code == 2 and "--set, --size shape a new profile; with --import there is none" in err


def test_import_prints_each_kernels_diagnosis_as_json(capsys):
    code, out, _ = run_cli(["profile", "--import", str(FOCUSED_REPORT), "--json"], capsys)
    assert code == 0
    data = json.loads(out)  # stdout is exactly one JSON document
    assert data["mode"] == "import" and data["report"] == str(FOCUSED_REPORT)
    sgemm, bf16 = data["kernels"]
    assert (sgemm["bottleneck"], sgemm["unit"]) == ("compute", "FMA")
    assert (bf16["bottleneck"], bf16["unit"]) == ("compute", "Tensor")
    for kernel in (sgemm, bf16):
        assert kernel["advice"] and all(isinstance(a, str) and a for a in kernel["advice"])
        assert {"metric", "value", "threshold", "meaning"} <= set(kernel["evidence"][0])
    assert sgemm["roofline"]["gpu"] == "h200" and sgemm["roofline"]["bound"] == "compute"
    assert bf16["tensor_pct"] == pytest.approx(90.1, abs=0.1)
    assert "metrics" not in sgemm


def test_import_of_csv_pages_and_all_metrics(capsys):
    code, out, _ = run_cli(
        ["profile", "--import", str(NCU / "gemm_focused_raw.csv"), "--json", "--all-metrics"],
        capsys,
    )
    assert code == 0
    kernels = json.loads(out)["kernels"]
    duration = kernels[0]["metrics"]["gpu__time_duration.sum"]
    assert duration == {"value": pytest.approx(2_679_520), "unit": "ns"}
    code, out, _ = run_cli(["profile", "--import", str(NCU / "gemm_focused_details.csv")], capsys)
    assert code == 0 and "diagnosis: compute" in out and "report:" in out


def test_profiling_a_command_runs_ncu_and_reads_its_report(fake_ncu, tmp_path, capsys):
    out_file = tmp_path / "mine.ncu-rep"
    args = ["profile", "--kernel", "gemm", "--launch-skip", "2", "--out", str(out_file)]
    code, out, err = run_cli([*args, "--json", "--", "python", "train.py"], capsys)
    assert code == 0, err
    data = json.loads(out)
    assert data["mode"] == "command" and data["report"] == str(out_file)
    assert out_file.is_file()  # the report is kept where asked
    argv = fake_ncu()
    assert argv[argv.index("--clock-control") + 1] == "none"
    assert argv[argv.index("--kernel-name") + 1] == "regex:gemm"
    assert argv[argv.index("--launch-skip") + 1] == "2"
    assert argv[-2:] == ["python", "train.py"]
    assert [k["unit"] for k in data["kernels"]] == ["FMA", "Tensor"]


def test_profiling_an_implementation_runs_the_runner_inside_an_nvtx_range(fake_ncu, capsys):
    code, out, err = run_cli(
        ["profile", "torch.mm", "--size", "256", "--dtype", "bf16", "--json"], capsys
    )
    assert code == 0, err
    data = json.loads(out)
    assert data["mode"] == "implementation"
    assert data["shape"] == {"m": 256, "n": 256, "k": 256} and data["dtype"] == "bf16"
    argv = fake_ncu()
    assert argv[argv.index("--clock-control") + 1] == "none"
    assert argv[argv.index("--nvtx-include") + 1] == "kernelab_profile/"
    assert "--launch-count" not in argv  # every kernel in the range, none of the warm-up
    runner = argv[argv.index("-m") + 1 :]
    assert runner[:2] == ["kernelab.profiling.runner", "torch.mm"]
    assert json.loads(runner[runner.index("--shape") + 1]) == {"m": 256, "n": 256, "k": 256}
    assert Path(data["report"]).is_file()
    # The cost model's prediction for the op rides along with each kernel.
    assert data["kernels"][0]["predicted"]["flops"] == 2 * 256**3


def test_the_runner_refuses_bad_input_in_one_line():
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "kernelab.profiling.runner",
            "torch.mm",
            "--shape",
            "{",
            "--dtype",
            "bf16",
        ],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2 and done.stderr.startswith("kernelab: --shape is not JSON")


# --- on the GPU ------------------------------------------------------------------------------


@pytest.mark.gpu
def test_profile_torch_mm_bf16_end_to_end_is_tensor_bound(tmp_path):
    if shutil.which("ncu") is None and not os.environ.get("KERNELAB_NCU"):
        pytest.fail("ncu is not on PATH: add /usr/local/cuda/bin (Nsight Compute) to PATH")
    out_file = tmp_path / "mm.ncu-rep"
    done = subprocess.run(
        [sys.executable, "-m", "kernelab.cli", "profile", "torch.mm", "--size", "2048"]
        + ["--dtype", "bf16", "--out", str(out_file), "--json"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert out_file.is_file()
    main_kernel = max(data["kernels"], key=lambda k: k["duration_ns"] or 0)
    assert main_kernel["unit"] == "Tensor", main_kernel["diagnosis"]
    assert main_kernel["bottleneck"] in ("compute", "balanced")
    assert main_kernel["tensor_pct"] > 50
    # With kernelab's metrics the tensor FLOPs are counted: 2 * 2048^3, within the epilogue.
    assert main_kernel["flops"]["flops"] == pytest.approx(2 * 2048**3, rel=0.01)
    assert main_kernel["roofline"]["math_dtype"] == "bf16"
