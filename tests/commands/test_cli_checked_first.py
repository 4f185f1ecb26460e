"""What a newcomer trips on, round two: bad paths, numbers and GPUs end the real command with
one line on stderr and exit 2, before any work and with nothing written; the GPU a command
describes follows one rule and says which; zero FLOPs has an answer."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kernelab.errors import KernelabError, input_file, output_file, output_folder, positive_number
from kernelab.hardware import detect
from kernelab.hardware.detect import DEFAULT_GPU, choose_gpu

NCU = Path(__file__).resolve().parents[1] / "fixtures" / "ncu"
REPORT = str(NCU / "gemm_focused_raw.csv")
# The commands run in a scratch folder, so the package must be found by an absolute path.
SRC = str(Path(__file__).resolve().parents[2] / "src")
GEMM = ["roofline", "gemm", "--m", "64", "--n", "64", "--k", "64"]


def _run(cwd: Path, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "kernelab", *argv],
        cwd=cwd, capture_output=True, text=True, stdin=subprocess.DEVNULL, check=False,
        env={**os.environ, "COLUMNS": "80", "PYTHONPATH": SRC},
    )  # fmt: skip


def _one_line(cwd: Path, *argv: str) -> str:
    """Run the command in `cwd` (holding only what the test put there); it must fail with one
    line and exit 2, and leave `cwd` as it was."""
    before = sorted(p.name for p in cwd.iterdir())
    done = _run(cwd, *argv)
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    assert done.stderr.startswith("kernelab: ") and done.stderr.count("\n") == 1, done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""
    assert sorted(p.name for p in cwd.iterdir()) == before
    return done.stderr


@pytest.fixture
def place(tmp_path) -> Path:
    (tmp_path / "a_folder").mkdir()
    (tmp_path / "a_file").write_text("")
    (tmp_path / "w.py").write_text("print('ran')\n")
    return tmp_path


# --- output paths ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("plot", "words"),
    [
        ("/proc/x.png", "cannot write in /proc"),
        ("", "not an empty string"),
        ("a_folder", "ends in no suffix"),
        ("plot.pdf", ".png or .svg"),
        ("missing/r.png", "no folder missing"),
        ("a_file/r.png", "a_file is not a folder"),
    ],
)
def test_roofline_plot_path_is_checked_first(place, plot, words):
    assert words in _one_line(place, *GEMM, "--plot", plot)


def test_roofline_plot_that_names_a_folder_with_a_suffix(place):
    (place / "shots.png").mkdir()
    assert "is a folder" in _one_line(place, *GEMM, "--plot", "shots.png")


@pytest.mark.parametrize(
    ("out", "words"),
    [("/proc/x", "cannot write in /proc"), ("", "not an empty string"), ("a_file", "is a file")],
)
def test_timeline_out_is_checked_before_the_workload_runs(place, out, words):
    err = _one_line(place, "timeline", "--out", out, "--", sys.executable, "w.py")
    assert words in err


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["timeline", "--import", "a_folder"], "is a folder"),
        (["timeline", "--import", ""], "not an empty string"),
        (["timeline", "--import", "none.json"], "no such file"),
        (["hierarchy", "--import", "a_folder"], "is a folder"),
        (["hierarchy", "--import", ""], "not an empty string"),
        (["hierarchy", "--out", "/proc/x.json"], "cannot write in /proc"),
        (["hierarchy", "--out", ""], "not an empty string"),
        (["profile", "--import", "a_folder"], "is a folder"),
        (["profile", "--import", ""], "not an empty string"),
        (["profile", "torch.mm", "--size", "64", "--out", "/proc/x"], "cannot write in /proc"),
        (["profile", "torch.mm", "--size", "64", "--out", ""], "not an empty string"),
        (["profile", "--import", REPORT, "--out", "kept"], "with --import there is none"),
    ],
)
def test_import_and_out_paths_are_one_line(place, argv, words):
    assert words in _one_line(place, *argv)


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["bench", "torch.mm", "--plot", "/proc/x.png"], "cannot write in /proc"),
        (["bench", "torch.mm", "--out", ""], "not an empty string"),
        (["bench", "torch.mm", "--out", "a_folder"], "is a folder"),
        (["bench", "torch.mm", "--max-time", "nan"], "--max-time must be a positive, finite"),
    ],
)
def test_bench_checks_its_paths_and_numbers_before_timing(place, argv, words):
    assert words in _one_line(place, *argv)


@pytest.mark.parametrize(
    "argv",
    [
        ["bench", "torch.mm", "--out", "r.txt"],
        ["ladder", "reduce", "--out", "r.txt"],
        ["ladder", "sgemm", "--out", "r.json.xz"],
        ["eval", "--suite", "a_folder", "--out", "r.txt"],
    ],
)
def test_every_out_of_records_is_a_json_file(place, argv):
    assert "--out writes .json files" in _one_line(place, *argv)


def test_piped_tables_carry_no_trailing_blanks(place):
    out = _run(place, *GEMM).stdout
    assert "intensity" in out and all(line == line.rstrip() for line in out.splitlines())


def test_version_says_what_is_missing_in_words(place):
    out = _run(place, "version").stdout
    assert "None" not in out and "kernelab" in out


# --- numbers and GPUs ----------------------------------------------------------------------


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "0", "-1"])
@pytest.mark.parametrize("option", ["--latency-ns", "--bandwidth-gbps", "--bytes-per-stage"])
def test_pipeline_refuses_non_finite_and_non_positive_numbers(place, option, value):
    err = _one_line(place, "pipeline", "--gpu", "h200", f"{option}={value}")
    assert f"{option} must be a positive, finite number" in err


@pytest.mark.parametrize("value", ["nan", "inf", "0"])
def test_roofline_time_must_be_positive_and_finite(place, value):
    assert "--time-ms must be" in _one_line(place, *GEMM, f"--time-ms={value}")


@pytest.mark.parametrize(
    "argv",
    [
        ["profile", "--import", REPORT, "--gpu", "nope"],
        ["profile", "--import", REPORT, "--gpu", ""],
        [*GEMM, "--gpu", ""],
        ["pipeline", "--gpu", ""],
        ["timeline", "--import", "a_file", "--gpu", ""],
    ],
)
def test_a_bad_gpu_name_is_one_line_before_any_work(place, argv):
    err = _one_line(place, *argv)
    assert "--gpu" in err or "unknown GPU" in err


def test_profile_on_another_gpus_roofline_gives_no_share_of_it(place):
    done = _run(place, "profile", "--import", REPORT, "--gpu", "m2-max", "--json")
    assert done.returncode == 0, done.stderr
    first = json.loads(done.stdout)["kernels"][0]
    assert first["roofline"]["gpu"] == "m2-max" and first["roofline"]["sol_pct"] is None
    assert "ran on NVIDIA H200" in first["roofline_note"]
    human = _run(place, "profile", "--import", REPORT, "--gpu", "m2-max").stdout
    assert "% of attainable" not in human and "placed by intensity only" in " ".join(human.split())


def test_profile_on_its_own_gpu_still_gives_the_share(place):
    done = _run(place, "profile", "--import", REPORT, "--gpu", "h200", "--json")
    roofline = json.loads(done.stdout)["kernels"][0]["roofline"]
    assert 0 < roofline["sol_pct"] <= 100


def test_zero_flops_is_memory_bound_at_intensity_zero(place):
    argv = ["roofline", "elementwise", "--n", "1000", "--flops-per-element", "0", "--gpu", "h200"]
    done = _run(place, *argv, "--json")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert (data["flops"], data["intensity"], data["bound"]) == (0, 0, "memory")
    assert data["floor_ms"] == pytest.approx(1000 * 3 * 2 / 4800e9 * 1e3)
    human = _run(place, *argv)
    assert human.returncode == 0, human.stderr
    assert "memory-bound: no FLOPs" in " ".join(human.stdout.split())


# --- one rule for the GPU a command describes ------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        GEMM,
        ["pipeline"],
        ["tile", "--bm", "128", "--bn", "128", "--bk", "8", "--tm", "8", "--tn", "8"]
        + ["--threads", "256"],
    ],
)
def test_every_command_describes_the_same_gpu_and_says_how_it_was_chosen(place, argv):
    data = json.loads(_run(place, *argv, "--json").stdout)
    choice = data["gpu_choice"]
    expected = choose_gpu(None)
    assert choice == expected.to_dict()
    if choice["how"] == "default":
        assert choice["id"] == DEFAULT_GPU and "no GPU detected" in choice["reason"]
    human = " ".join(_run(place, *argv).stdout.split())
    assert expected.label in human


def test_choose_gpu_names_detected_and_default(monkeypatch):
    monkeypatch.setattr(detect, "_gpu_device_present", lambda: False)
    chosen = choose_gpu(None)
    assert (chosen.spec.id, chosen.how) == (DEFAULT_GPU, "default")
    assert "no GPU detected here" in chosen.label

    found = detect.DetectedGPU(0, "NVIDIA H200", detect.get_gpu("h200"), "9.0", 132, None, None,
                               None, "torch")  # fmt: skip
    monkeypatch.setattr(detect, "_gpu_device_present", lambda: True)
    monkeypatch.setattr(detect, "detect_gpu", lambda index=0: found)
    assert (choose_gpu(None).spec.id, choose_gpu(None).how) == ("h200", "detected")
    assert choose_gpu("auto").spec.id == "h200"
    assert (choose_gpu("a100-sxm").spec.id, choose_gpu("a100-sxm").how) == ("a100-sxm", "given")

    stranger = detect.DetectedGPU(0, "NVIDIA Z1", None, "9.9", 10, None, None, None, "torch")
    monkeypatch.setattr(detect, "detect_gpu", lambda index=0: stranger)
    chosen = choose_gpu(None)
    assert chosen.how == "default" and "NVIDIA Z1, is not in the catalog" in chosen.reason
    with pytest.raises(KernelabError, match="not an empty string"):
        choose_gpu(" ")


# --- the helpers, for every command --------------------------------------------------------


def test_the_path_helpers(tmp_path):
    assert output_file(None, "--x") is None and input_file(None, "--x") is None
    assert output_file(str(tmp_path / "a.svg"), "--plot", suffixes=(".svg",)) == tmp_path / "a.svg"
    assert output_folder(str(tmp_path / "new" / "deeper"), "--out") == tmp_path / "new" / "deeper"
    assert not (tmp_path / "new").exists()  # checked, not created
    with pytest.raises(KernelabError, match="cannot write in /proc"):
        output_folder("/proc/nope/deeper", "--out")
    with pytest.raises(KernelabError, match="no such file"):
        input_file(str(tmp_path / "none"), "--import")
    for value in (float("nan"), float("inf"), 0.0, -1.0):
        with pytest.raises(KernelabError, match="positive, finite"):
            positive_number(value, "--x")
    assert positive_number(2.5, "--x") == 2.5


def test_an_unknown_name_among_many_lists_a_few_and_counts_the_rest():
    from kernelab.errors import KNOWN_SHOWN, unknown

    many = [f"op{i:03d}" for i in range(118)]
    message = str(unknown("implementation", "op1000", many))
    assert message.startswith("unknown implementation 'op1000'; did you mean op100")
    assert message.endswith(
        f"(known: {', '.join(many[:KNOWN_SHOWN])} and {118 - KNOWN_SHOWN} more)"
    )
    few = ["fp32", "bf16"]
    assert str(unknown("dtype", "fp8", few)).endswith("(known: bf16, fp32)")  # all, as before


def test_pipeline_on_a_gpu_without_the_tensor_peak_says_so(place):
    argv = ["pipeline", "--gpu", "rtx-5090", "--latency-ns", "500"]
    err = _one_line(place, *argv, "--dtype", "bf16")  # asked for: an error
    assert "rtx-5090 has no bf16 peak" in err
    done = _run(place, *argv, "--json")  # not asked for: the memory half, and why no more
    data = json.loads(done.stdout)
    assert data["tensor_cores"] is None and "no bf16 peak" in data["tensor_cores_note"]
    assert "no tensor-core line" in _run(place, *argv).stdout
