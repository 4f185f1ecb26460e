"""benchmarks/kernelbench_level1.py on the CPU: a small stand-in checkout of level-1 problems
(the fixture problems under KernelBench's file names) judged with ModelNew = Model, resumed,
cut by its budget, and the bar it judges the verdicts by."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from benchmark_scripts import load_script

pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[2]
KB = ROOT / "tests" / "fixtures" / "eval" / "kernelbench"


def _script():
    return load_script("kernelbench_level1")


@pytest.fixture
def checkout(tmp_path):
    """A KernelBench-shaped checkout: KernelBench/level1/NN_Name.py."""
    level1 = tmp_path / "kb" / "KernelBench" / "level1"
    level1.mkdir(parents=True)
    shutil.copy(KB / "relu.py", level1 / "19_ReLU.py")
    shutil.copy(KB / "softmax.py", level1 / "23_Softmax.py")
    (level1 / "7_Broken.py").write_text(
        "import torch\n\n\nclass Model(torch.nn.Module):\n"
        "    def forward(self, x):\n        return x @ x\n\n\n"  # [n, 3] @ [n, 3] cannot run
        "def get_inputs():\n    return [torch.rand(64, 3)]\n\n\n"
        "def get_init_inputs():\n    return []\n"
    )
    (level1 / "README.md").write_text("not a problem")
    return tmp_path / "kb"


def _run(script, checkout, out, *extra):
    return script.main(["--kernelbench", str(checkout), "--out", str(out), "--device", "cpu",
                        "--scale", "0.05", "--timeout", "120", *extra])  # fmt: skip


def test_every_problem_is_judged_with_its_own_reference_and_a_broken_one_is_a_crash(
    checkout, tmp_path
):
    script = _script()
    out = tmp_path / "out"
    assert _run(script, checkout, out) == 1  # the broken problem keeps it short of the bar
    solution = out / "suite" / "solutions" / "019_ReLU" / "reference_as_solution.py"
    assert (
        solution.read_text()
        .rstrip()
        .endswith("ModelNew = Model  # the reference judged as a solution")
    )
    summary = json.loads((out / script.SUMMARY).read_text())
    by_name = {row["problem"]: row for row in summary["rows"]}
    assert list(by_name) == ["007_Broken", "019_ReLU", "023_Softmax"]  # numeric order
    assert by_name["019_ReLU"]["status"] == "pass" and by_name["019_ReLU"]["faults"] == []
    assert by_name["023_Softmax"]["status"] == "pass"
    assert by_name["007_Broken"]["status"] == "crash"
    assert "reference failed" in by_name["007_Broken"]["message"]
    assert summary["short_of_bar"] == ["007_Broken: crash"]
    assert summary["complete"] and not summary["meets_bar"] and not summary["timed"]


def test_resume_skips_what_is_judged_and_the_budget_leaves_the_rest(checkout, tmp_path, capsys):
    script = _script()
    out = tmp_path / "out"
    assert _run(script, checkout, out, "--only", "19,23", "--budget-s", "0.001") == 0
    verdicts = script.read_verdicts(out / script.VERDICTS)
    assert list(verdicts) == [19]  # the budget was spent after the first problem
    assert "1 problems left for --resume" in capsys.readouterr().out
    partial = json.loads((out / script.SUMMARY).read_text())
    assert not partial["complete"] and partial["judged"] == 1
    (out / script.VERDICTS).write_text(
        (out / script.VERDICTS).read_text() + '{"number": 23, "torn'  # a run cut mid-write
    )
    assert _run(script, checkout, out, "--only", "19,23", "--resume") == 0
    assert "2 problems, 1 already judged" in capsys.readouterr().out
    summary = json.loads((out / script.SUMMARY).read_text())
    assert summary["complete"] and summary["meets_bar"]
    assert [row["number"] for row in summary["rows"]] == [19, 23]


def test_a_suite_dir_keeps_the_problem_copies_out_of_out(checkout, tmp_path):
    script = _script()
    out, suite = tmp_path / "out", tmp_path / "suite-elsewhere"
    assert _run(script, checkout, out, "--only", "19", "--suite-dir", str(suite)) == 0
    # --out holds the verdicts and the summary alone: two files to bring back
    assert sorted(p.name for p in out.rglob("*")) == sorted([script.VERDICTS, script.SUMMARY])
    assert (suite / "019_ReLU.py").is_file()
    assert (suite / "solutions" / "019_ReLU" / "reference_as_solution.py").is_file()
    summary = json.loads((out / script.SUMMARY).read_text())
    assert [row["status"] for row in summary["rows"]] == ["pass"]


def test_the_bar_takes_speed_outside_the_band_oom_and_missing_timing_as_faults():
    script = _script()
    passing = {"status": "pass", "message": "", "notes": []}
    assert script.judge({**passing, "speedup_vs_eager": 1.02}, timed=True) == []
    assert script.judge({**passing, "speedup_vs_eager": 1.3}, timed=True) == [
        "1.30x eager, outside 0.9-1.1x"
    ]
    assert script.judge({**passing, "speedup_vs_eager": None}, timed=True) == ["no timing"]
    assert script.judge({**passing, "speedup_vs_eager": None}, timed=False) == []
    oom = {"status": "error", "message": "setting up raised OutOfMemoryError", "notes": []}
    assert script.judge(oom, timed=True) == ["status error", "out of memory"]
    skipped = {"status": "skipped", "message": "skipped: needs 80 GB, card has 70", "notes": []}
    assert script.judge(skipped, timed=True) == []
    assert script.median_speedup(
        {"timings": [{"speedup_vs_eager": v} for v in (1.0, 0.9, 1.2, 1.1)]}
    ) == pytest.approx(1.05)


def test_bad_arguments_are_one_line_errors(tmp_path, capsys):
    script = _script()
    with pytest.raises(SystemExit):
        script.main(["--out", str(tmp_path), "--kernelbench", str(tmp_path), "--scale", "2"])
    assert "--scale must be in (0, 1]" in capsys.readouterr().err
    with pytest.raises(SystemExit, match="no level-1 problems"):
        script.main(["--out", str(tmp_path / "o"), "--kernelbench", str(tmp_path)])
