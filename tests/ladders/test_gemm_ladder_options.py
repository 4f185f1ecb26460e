"""The GEMM ladders' run options (kernelab.commands.ladder_gemm), on the CPU.

--prebuild compiles every step and every sgemm tile candidate without a GPU, into a cache a
machine without nvcc then reads; it never checks or times, even where a GPU is. With the
GPU work stubbed: --no-time checks and times nothing, --bracket / --rounds / --pair-modes
reach the engine, --save writes summary.json and records.json where `kernelab lab` reads
them (its default folder: harness.records.default_results_dir), and --tune's winners go to
tuned_<card>.json in the committed file's form. Options that do not go together are refused
in one line (exit 2) before anything compiles; a step with wrong answers makes exit 1."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from kernelab.hardware import get_gpu
from kernelab.ladders.hgemm import ladder as hl
from kernelab.ladders.sgemm import ladder as sl
from kernelab.runtime.cuda import build as cuda_build

SRC = Path(__file__).resolve().parents[2] / "src"
needs_nvcc = pytest.mark.skipif(cuda_build.find_nvcc() is None, reason="needs nvcc")
H200 = get_gpu("h200")


def _main(capsys, *argv: str) -> tuple[int, str, str]:
    from kernelab.cli import main

    code = main(["ladder", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


# --- refused in one line, before any compile -------------------------------------------------


@pytest.fixture
def no_compile(monkeypatch):
    def compiled(*_args, **_kwargs):
        raise AssertionError("compiled before the options were checked")

    for module in (sl, hl):
        monkeypatch.setattr(module, "compile_report", compiled)
    monkeypatch.setattr(sl, "prebuild", compiled)
    for module in ("ladder", "ladder_hgemm"):
        monkeypatch.setattr(f"kernelab.commands.{module}._has_gpu", lambda: False)


@pytest.mark.parametrize(
    "argv, words",
    [
        (["sgemm", "--prebuild", "--out", "r.json"], "--prebuild compiles every step and stops"),
        (["hgemm", "--prebuild", "--sizes", "4096"], "it does not go with --sizes"),
        (["hgemm", "--prebuild", "--pairs", "5"], "it does not go with --pairs"),
        (["sgemm", "--prebuild", "--tune"], "it does not go with --tune"),
        (["hgemm", "--tune"], "the hgemm steps have none"),
        (["sgemm", "--tune", "--steps", "1-7"], "the tunable steps are sgemm:08"),
        (["sgemm", "--tune", "--plot", "t.png"], "--tune times the tile candidates"),
        (["sgemm", "--tune", "--mode", "hot"], "it does not go with --mode"),
        (["sgemm", "--tune"], "ladder sgemm --tune needs a CUDA GPU"),
        (["sgemm", "--rounds", "3", "--bracket"], "--rounds and --bracket are for the hgemm"),
        (["sgemm", "--save"], "the sgemm timings go to --out FILE.json"),
        (["hgemm", "--rounds", "-1"], "--rounds takes a count >= 0"),
        (["hgemm", "--pair-modes", "hot"], "give --pairs"),
        (["hgemm", "--pairs", "5", "--pair-modes", "graph"], "unknown paired timing mode"),
        (["hgemm", "--pairs", "5", "--pair-modes", "cold,"], "has an empty item"),
        (["hgemm", "--no-time", "--bracket"], "--no-time checks every step and times nothing"),
        (["hgemm", "--no-time", "--out", "r.json"], "it does not go with --out"),
        (["sgemm", "--no-time", "--plot", "p.png"], "it does not go with --plot"),
        (["hgemm", "--profile", "--save"], "--profile does not go with --save"),
        (["hgemm", "--save-dir", ""], "--save-dir"),
        (["hgemm", "--bracket", "--gpus", "2"], "not one spread with --gpus"),
        (["reduce", "--prebuild"], "--prebuild is for the GEMM ladders (sgemm, hgemm)"),
        (["scan", "--no-time", "--save"], "--no-time and --save are for the GEMM ladders"),
        (["transpose", "--rounds", "2"], "not the transpose ladder"),
    ],
)
def test_options_that_do_not_go_together_are_one_line(no_compile, capsys, tmp_path, monkeypatch,
                                                       argv, words):  # fmt: skip
    monkeypatch.chdir(tmp_path)
    code, out, err = _main(capsys, *argv)
    lines = err.strip().splitlines()
    assert code == 2 and out == "", (code, err)
    assert len(lines) == 1 and lines[0].startswith("kernelab: ") and words in lines[0], err
    assert list(tmp_path.iterdir()) == []


def test_the_help_names_every_option(capsys):
    code, out, _ = _main(capsys, "--help")
    text = " ".join(out.replace("│", " ").split())
    assert code == 0
    for option in ("--prebuild", "--tune", "--no-time", "--rounds", "--bracket", "--pair-modes",
                   "--save", "--save-dir", "$OUT"):  # fmt: skip
        assert option in text, option


# --- --prebuild: compiled without a GPU, never checked or timed ------------------------------


def _never(*_args, **_kwargs):
    raise AssertionError("a GPU call the options should not make")


@needs_nvcc
def test_sgemm_prebuild_fills_a_cache_that_serves_a_machine_without_nvcc(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    env.update(PYTHONPATH=os.pathsep.join(filter(None, [str(SRC), env.get("PYTHONPATH")])),
               KERNELAB_CACHE=str(tmp_path / "cache"), CUDA_VISIBLE_DEVICES="")  # fmt: skip
    built = subprocess.run(
        [sys.executable, "-m", "kernelab", "ladder", "sgemm", "--prebuild", "--steps", "10",
         "--json"], capture_output=True, text=True, timeout=900, env=env,
    )  # fmt: skip
    assert built.returncode == 0, built.stderr
    result = json.loads(built.stdout)
    assert result["prebuilt"] and not result["timed"] and result["gpu"] is None
    (candidate,) = result["candidates"]  # step 10 has one tile candidate
    assert candidate["step"] == "sgemm:10" and candidate["spill_bytes"] == 0
    assert [r["step"] for r in result["compile"]] == ["sgemm:10"]
    assert list((tmp_path / "cache" / "cubins").glob("10_*.cubin"))

    # The same cache where no nvcc is: every cubin is found, none compiled.
    without_nvcc = ("import kernelab.runtime.cuda.build as b; b.find_nvcc = lambda: None; "
                    "from kernelab.cli import main; "
                    "raise SystemExit(main(['ladder', 'sgemm', '--prebuild', '--steps', '10', "
                    "'--json']))")  # fmt: skip
    again = subprocess.run([sys.executable, "-c", without_nvcc], capture_output=True, text=True,
                           timeout=300, env=env)  # fmt: skip
    assert again.returncode == 0, again.stderr
    assert all(r["cached"] for r in json.loads(again.stdout)["candidates"])


@pytest.fixture
def pretend_gpu(monkeypatch):
    """The commands see a GPU; every GPU call of the engines is replaced by the test."""
    import torch

    from kernelab.commands import ladder as sgemm_command
    from kernelab.commands import ladder_hgemm as hgemm_command

    for module in (sgemm_command, hgemm_command):
        monkeypatch.setattr(module, "_has_gpu", lambda: True)
    monkeypatch.setattr(hgemm_command, "_lens_spec", lambda: H200)
    monkeypatch.setattr(sgemm_command, "_gpu_name", lambda: "NVIDIA H200")
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *_: "NVIDIA H200")
    monkeypatch.setattr("kernelab.harness.ceilings.this_gpu", lambda *_: SimpleNamespace(
        key="h200", name="NVIDIA H200", gpu_id="h200", driver="580"))  # fmt: skip
    monkeypatch.setattr(hl, "compile_report", lambda steps, progress: [])
    monkeypatch.setattr(sl, "compile_report", lambda steps, progress: [])


@needs_nvcc
def test_hgemm_prebuild_compiles_and_stops_even_with_a_gpu(monkeypatch, capsys):
    from kernelab.commands import ladder_hgemm as hgemm_command

    monkeypatch.setattr(hgemm_command, "_has_gpu", lambda: True)
    monkeypatch.setattr(hgemm_command, "_lens_spec", lambda: H200)
    for name in ("check_steps", "persistent_grids", "time_ladder", "time_paired"):
        monkeypatch.setattr(hl, name, _never)
    code, out, err = _main(capsys, "hgemm", "--prebuild", "--steps", "06", "--json")
    assert code == 0, err
    result = json.loads(out)
    assert result["prebuilt"] and not result["timed"] and "need a CUDA GPU" not in err
    (row,) = result["compile"]
    assert row["step"] == "hgemm:06" and Path(row["cubin"]).is_file()
    assert set(result["lens"]) == {"hgemm:06"}


# --- the hgemm run with the GPU work stubbed -------------------------------------------------


def _timing(ms: float, mode: str):
    from kernelab.harness.stats import summarize

    samples = [ms * 0.99, ms, ms * 1.01] * 4
    return SimpleNamespace(median_ms=ms, rel_noise=0.01, throttled=False, mode=mode,
                           samples_ms=samples, summary=summarize(samples), clocks={},
                           warnings=[])  # fmt: skip


def _stub_hgemm(monkeypatch, wrong=()):
    """The hgemm engine's GPU calls, with real rows and records: what it saw goes to `seen`."""
    from kernelab.spec.reference import get_op

    seen: dict = {}
    identity = SimpleNamespace(name="NVIDIA H200", gpu_id="h200", driver="580")

    def check_steps(steps, progress, shapes):
        return {s.name: [{"shape": sh, "ok": s.name not in wrong, "message": "m"} for sh in shapes]
                for s in steps}  # fmt: skip

    def time_ladder(steps, sizes, modes, max_time_s, progress, bracket=False):
        seen["bracket"] = bracket
        names = [hl.CUBLAS, *(s.name for s in steps), *([hl.CUBLAS_AGAIN] if bracket else [])]
        rows, records = [], []
        for size in sizes:
            cost = get_op("gemm").cost({"m": size, "n": size, "k": size}, "bf16")
            for mode in modes:
                for i, name in enumerate(names):
                    timing = _timing(1.0 + 0.01 * i, mode)
                    row = hl._row(name, size, timing, cost.flops, 1.0)
                    rows.append(row)
                    records.append(hl.to_record(name, size, timing, cost, identity, {}, row))
        return rows, records

    def time_rounds(steps, size, rounds, progress):
        seen.setdefault("rounds", []).append((size, rounds))
        return [hl._rounds_row(s.name, size, "cold", [99.0] * rounds) for s in steps]

    def time_paired(steps, size, pairs, mode, progress):
        seen.setdefault("paired", []).append((mode, size))
        ref, ours = [1.0] * pairs, [0.99] * pairs
        return [hl._paired_row(s.name, size, {
            "mode": mode, "pairs": pairs, "pct_of_reference": 101.0, "pct_ci95": [100.9, 101.1],
            "pct_p20": 100.95, "pct_p80": 101.05, "pairs_ahead": pairs,
            "reference": {"median": 1.0}, "candidate": {"median": 0.99}, "throttled": False,
            "clocks": {}, "reference_ms": ref, "candidate_ms": ours}) for s in steps]  # fmt: skip

    monkeypatch.setattr(hl, "check_steps", check_steps)
    monkeypatch.setattr(hl, "persistent_grids", lambda steps, sizes, progress: {})
    monkeypatch.setattr(hl, "time_ladder", time_ladder)
    monkeypatch.setattr(hl, "time_rounds", time_rounds)
    monkeypatch.setattr(hl, "time_paired", time_paired)
    return seen


def test_hgemm_save_writes_what_the_lab_reads(pretend_gpu, monkeypatch, capsys, tmp_path):
    from kernelab.lab.results import load_results

    seen = _stub_hgemm(monkeypatch)
    folder = tmp_path / "h200" / "hgemm"
    code, out, err = _main(capsys, "hgemm", "--steps", "18", "--sizes", "2048,4096",
                           "--mode", "cold", "--bracket", "--rounds", "2", "--pairs", "3",
                           "--pair-modes", "cold,hot", "--save-dir", str(folder), "--json")  # fmt: skip
    assert code == 0, err
    result = json.loads(out)
    assert seen["bracket"] and seen["rounds"] == [(2048, 2), (4096, 2)]
    assert seen["paired"] == [("cold", 2048), ("cold", 4096), ("hot", 2048), ("hot", 4096)]
    assert result["saved_to"] == str(folder) and result["torch"]
    assert {r["impl"] for r in result["timing"]} == {hl.CUBLAS, "hgemm:18", hl.CUBLAS_AGAIN}

    summary = json.loads((folder / "summary.json").read_text())
    assert summary["steps"] == ["hgemm:18"] and summary["gpu"] == "NVIDIA H200"
    loaded = load_results(tmp_path / "h200")
    assert {"hgemm/summary.json", "hgemm/records.json"} <= set(loaded.files)
    assert len(loaded.hgemm_records) == 6 and not loaded.unreadable and not loaded.disagreements
    timing = loaded.hgemm_summary["timing"]
    assert timing and all(row["from_samples"] for row in timing)
    assert all(row["from_samples"] for row in loaded.hgemm_summary["paired"])
    assert len(loaded.hgemm_summary["rounds"]) == 2

    code, out, err = _main(capsys, "hgemm", "--steps", "18", "--sizes", "2048", "--rounds", "2",
                           "--pairs", "3", "--pair-modes", "hot", "--save-dir", str(folder))  # fmt: skip
    assert code == 0, err
    assert "interleaved rounds" in out and "alternating pairs" in out and "hot" in out
    assert f"saved for kernelab lab: {folder}" in " ".join(out.split())


def test_hgemm_save_without_a_folder_goes_where_the_benchmarks_write(pretend_gpu, monkeypatch,
                                                                      capsys, tmp_path):  # fmt: skip
    _stub_hgemm(monkeypatch)
    monkeypatch.setenv("OUT", str(tmp_path / "out"))
    code, out, err = _main(capsys, "hgemm", "--steps", "18", "--sizes", "2048", "--save",
                           "--json")  # fmt: skip
    assert code == 0, err
    assert json.loads(out)["saved_to"] == str(tmp_path / "out")  # $OUT, as the scripts do
    assert {p.name for p in (tmp_path / "out").iterdir()} == {"summary.json", "records.json"}

    monkeypatch.delenv("OUT")
    from kernelab.harness.records import default_results_dir

    assert default_results_dir("h200", "hgemm").parts[-2:] == ("h200", "hgemm")


def test_hgemm_no_time_checks_only_and_a_wrong_step_exits_1(pretend_gpu, monkeypatch, capsys,
                                                            tmp_path):  # fmt: skip
    _stub_hgemm(monkeypatch, wrong=("hgemm:05",))
    monkeypatch.setattr(hl, "time_ladder", _never)
    code, out, err = _main(capsys, "hgemm", "--steps", "5,6", "--sizes", "256", "--no-time",
                           "--save-dir", str(tmp_path), "--json")  # fmt: skip
    assert code == 1, err
    result = json.loads(out)
    assert result["timed"] is False and result["timing"] == [] and result["wrong"] == ["hgemm:05"]
    assert {p.name for p in tmp_path.iterdir()} == {"summary.json"}  # no timings, no records
    code, out, _ = _main(capsys, "hgemm", "--steps", "6", "--sizes", "256", "--no-time")
    text = " ".join(out.split())
    assert code == 0 and "nothing timed: --no-time" in text and "all right" in text


# --- sgemm: --no-time and --tune with the GPU work stubbed ----------------------------------


def test_sgemm_no_time_checks_only(pretend_gpu, monkeypatch, capsys):
    def check_steps(steps, shapes, progress):
        return [{"step": s.name, "shape": sh, "ok": s.number != 2, "message": "m"}
                for s in steps for sh in shapes]  # fmt: skip

    monkeypatch.setattr(sl, "check_steps", check_steps)
    monkeypatch.setattr(sl, "time_ladder", _never)
    code, out, err = _main(capsys, "sgemm", "--steps", "1,2", "--sizes", "64", "--no-time",
                           "--json")  # fmt: skip
    assert code == 1, err  # step 02 gave wrong answers
    result = json.loads(out)
    assert result["timed"] is False and result["rows"] == [] and result["gpu"] == "NVIDIA H200"
    code, out, _ = _main(capsys, "sgemm", "--steps", "1,2", "--sizes", "64", "--no-time")
    assert code == 1 and "1 wrong" in out and "sgemm:02 wrong at" in out


def test_sgemm_tune_checks_times_and_saves_the_winners(pretend_gpu, monkeypatch, capsys,
                                                       tmp_path):  # fmt: skip
    seen = []

    def tune(step, m, n, k, *, time_ms, check):
        seen.append((step.name, m))
        results = [{"defines": d, "ms": 1.0 + i, "gflops": 2.0 * m * n * k / (1.0 + i) / 1e6}
                   for i, d in enumerate(step.candidates)]  # fmt: skip
        results[-1].update(ms=None, gflops=None, rejected=True)
        return {"winner": step.candidates[0], "results": results,
                "shape_class": "large" if m >= 2048 else "small", "gpu": "nvidia-h200"}  # fmt: skip

    monkeypatch.setattr(sl, "tune", tune)
    code, out, err = _main(capsys, "sgemm", "--tune", "--steps", "1,12", "--save-dir",
                           str(tmp_path), "--json")  # fmt: skip
    assert code == 0, err
    result = json.loads(out)
    assert seen == [("sgemm:12", 4096), ("sgemm:12", 1024)]  # the default sizes, 01 has none
    saved = json.loads((tmp_path / "tuned_h200.json").read_text())
    assert result["saved_to"] == str(tmp_path / "tuned_h200.json")
    assert set(saved) == {"gpu", "measured", "source", "winners"} and saved["measured"]
    assert saved["source"] == "kernelab ladder sgemm --tune"
    assert set(saved["winners"]["12"]) == {"large", "small"}
    assert saved["winners"]["12"]["small"]["shape"] == [1024, 1024, 1024]

    code, out, err = _main(capsys, "sgemm", "--tune", "--steps", "12", "--sizes", "2048")
    assert code == 0, err
    text = " ".join(out.split())
    assert "sgemm:12 tile candidates at 2048^3" in text and "winner" in text
    assert "wrong answer: not timed" in text and not list(Path.cwd().glob("tuned_*.json"))
