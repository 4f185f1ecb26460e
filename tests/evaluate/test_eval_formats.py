"""kernelab.evaluate.formats, kernelbench, gpumode and suite discovery: reading both community
formats into one Problem, on the CPU."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelab.errors import KernelabError
from kernelab.evaluate import gpumode, trees
from kernelab.evaluate.formats import detect_format, load_problem, scaled
from kernelab.evaluate.suite import discover

EVAL = Path(__file__).resolve().parents[1] / "fixtures" / "eval"
KB = EVAL / "kernelbench"
GM = EVAL / "gpumode"


def test_detects_both_formats():
    assert detect_format(KB / "softmax.py") == "kernelbench"
    assert detect_format(GM / "softmax_py") == "gpumode"
    assert detect_format(GM / "softmax_py" / "reference.py") == "gpumode"


@pytest.mark.parametrize(
    "path, match",
    [
        (EVAL / "nowhere.py", "no such problem"),
        (EVAL, "without reference.py"),
        (GM / "utils.py", "neither a KernelBench problem"),
        (GM / "softmax_py" / "task.yml", "neither"),
    ],
)
def test_unknown_problems_are_one_line_errors(path, match):
    with pytest.raises(KernelabError, match=match) as caught:
        detect_format(path)
    assert "\n" not in str(caught.value)


def test_scaling_shrinks_sizes_only():
    assert scaled(4096, 0.25) == 1024
    assert scaled(17, 0.25) == 16  # never below 16: a kernel, a group count still fit
    assert scaled(8, 0.25) == 8  # a small integer: a dim, a count, a kernel size
    assert scaled(4096, 1.0) == 4096
    assert scaled(64, 0.01) == 16


TASK_FLOW_AND_BLOCK = """\
files:
  - {"name": "utils.py", "source": "../utils.py"}
description: |
  tests: not a key, this is prose
  - {"m": 999}
tests:
  - {"m": 1, "k": 7, "seed": 42}
  - {m: 2, seed: 43}   # bare keys
  - m: 3
    k: 9
    seed: 44
benchmarks:
  - {"m": 4096, "seed": 1}
ranking_by: "geom"
"""


def test_task_yml_without_pyyaml_reads_flow_and_block_items():
    lists = gpumode.parse_task_lists(TASK_FLOW_AND_BLOCK)
    assert lists["tests"] == [
        {"m": 1, "k": 7, "seed": 42},
        {"m": 2, "seed": 43},
        {"m": 3, "k": 9, "seed": 44},
    ]
    assert lists["benchmarks"] == [{"m": 4096, "seed": 1}]
    assert lists["files"] == [{"name": "utils.py", "source": "../utils.py"}]
    assert "description" not in lists


def test_task_yml_parsers_agree_on_the_fixtures():
    yaml = pytest.importorskip("yaml")
    for problem in ("softmax_py", "relu_py"):
        text = (GM / problem / "task.yml").read_text()
        loaded = yaml.safe_load(text)
        ours = gpumode.parse_task_lists(text)
        for key in ("tests", "benchmarks", "files"):
            assert ours[key] == loaded[key]


def test_gpumode_problem_loads_cases_with_seeds_and_scaled_sizes():
    problem = load_problem(GM / "softmax_py", device="cpu", scale=0.25)
    assert problem.format == "gpumode" and problem.name == "softmax_py"
    assert [(c.params, c.seed) for c in problem.tests] == [
        ({"rows": 1, "cols": 250}, 4242),  # 1 is below 16: kept
        ({"rows": 32, "cols": 1024}, 5236),
        ({"rows": 16, "cols": 16}, 1001),  # 32 columns shrink to 16, not 8
    ]
    first = problem.tests[0]
    (x,) = problem.generate(first, first.seed)
    (again,) = problem.generate(first, first.seed)
    (other,) = problem.generate(first, first.seed + 1)
    assert tuple(x.shape) == (1, 250)
    assert bool((x == again).all()) and not bool((x == other).all())
    assert problem.benchmarks[0].params == {"rows": 1024, "cols": 2048}


def test_gpumode_preallocated_output_is_found_as_a_buffer():
    problem = load_problem(GM / "relu_py", device="cpu", scale=1.0)
    case = problem.tests[1]
    data = problem.generate(case, case.seed)
    scratch = trees.clone(data)
    problem.reference(scratch)
    assert trees.changed_paths(data, scratch) == ["[1]"]  # y is written, x is not


def test_gpumode_checker_accepts_both_return_styles():
    assert gpumode._normalise_check("") == (True, "")
    assert gpumode._normalise_check("mismatch at 3") == (False, "mismatch at 3")
    assert gpumode._normalise_check((False, "bad")) == (False, "bad")
    assert gpumode._normalise_check((True, "")) == (True, "")


def test_kernelbench_problem_scales_its_constants_and_seeds_inputs():
    problem = load_problem(KB / "matmul.py", device="cpu", scale=0.125)
    assert problem.format == "kernelbench"
    assert any("M 1024->128" in note for note in problem.notes)
    a, b = problem.generate(problem.tests[0], 7)
    a2, _ = problem.generate(problem.tests[0], 7)
    assert tuple(a.shape) == (128, 256) and tuple(b.shape) == (256, 96)
    assert bool((a == a2).all())
    ok, message = problem.checker([a, b], a @ b)
    assert ok, message


def test_kernelbench_shape_tuples_scale_with_the_sizes_they_must_broadcast_against(tmp_path):
    # KernelBench's HingeLoss: predictions[batch, *input_shape] * targets[batch] broadcasts only
    # while input_shape[-1] == batch_size; scaling one and not the other breaks the reference
    problem_file = tmp_path / "hinge.py"
    problem_file.write_text(
        "import torch\n\n\nclass Model(torch.nn.Module):\n"
        "    def forward(self, predictions, targets):\n"
        "        return torch.mean(torch.clamp(1 - predictions * targets, min=0))\n\n\n"
        "batch_size = 4096\ninput_shape = (4096,)\nkernel = (3, 3)\n\n\n"
        "def get_inputs():\n"
        "    return [torch.rand(batch_size, *input_shape), torch.rand(batch_size)]\n\n\n"
        "def get_init_inputs():\n    return []\n"
    )
    problem = load_problem(problem_file, device="cpu", scale=0.125)
    assert any("input_shape (4096,)->(512,)" in note for note in problem.notes)
    assert not any("kernel" in note for note in problem.notes)  # small sizes stay as they are
    predictions, targets = problem.generate(problem.tests[0], 1)
    assert tuple(predictions.shape) == (512, 512) and tuple(targets.shape) == (512,)
    assert problem.reference([predictions, targets]).shape == ()


def test_kernelbench_problem_without_model_is_refused(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("class Model:\n    pass\n\n\ndef get_inputs():\n    return []\n")
    with pytest.raises(KernelabError, match="lacks get_init_inputs"):
        load_problem(bad, device="cpu")


def test_bad_scale_is_refused():
    with pytest.raises(KernelabError, match="--scale"):
        load_problem(KB / "relu.py", device="cpu", scale=0)


def test_suite_discovery_follows_the_naming_rule(tmp_path):
    found = {
        problem.name: [s.relative_to(problem.parent) for s in sols]
        for problem, sols in discover(KB)
    }
    assert set(found) == {"softmax.py", "matmul.py", "relu.py"}
    assert Path("solutions/softmax/correct/model_new.py") in found["softmax.py"]
    assert Path("solutions/relu/wrong/cached.py") in found["relu.py"]
    gm = {problem.name: sols for problem, sols in discover(GM)}
    assert set(gm) == {"softmax_py", "relu_py"}  # utils.py is a helper, not a problem
    assert gm["relu_py"][0].name == "submission.py"
    # Sibling files named foo_solution*.py count too.
    (tmp_path / "add.py").write_text((KB / "relu.py").read_text())
    (tmp_path / "add_solution_v2.py").write_text("")
    [(problem, solutions)] = discover(tmp_path)
    assert problem.name == "add.py" and [s.name for s in solutions] == ["add_solution_v2.py"]


def test_empty_suite_is_an_error(tmp_path):
    with pytest.raises(KernelabError, match="no problems"):
        discover(tmp_path)
