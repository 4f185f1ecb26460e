"""The judge sizes itself to the device: a problem's memory learnt from fake tensors before
anything is allocated, the timed calls' input pool shrunk to fit a stated share of the free
memory (the verdict says how many sets it used, and every sampled timed output is still
checked), and a problem that cannot fit even once skipped with what it needs and what the
device has, never a set-up traceback. The device's free memory is a stand-in here
(monkeypatched); the problems are large on paper only."""

from __future__ import annotations

import json
import resource
from pathlib import Path

import pytest

from kernelab.cli import main
from kernelab.evaluate import evaluator, footprint, verdict
from kernelab.evaluate.evaluator import Evaluator
from kernelab.evaluate.formats import load_problem
from kernelab.evaluate.judge import run_problem
from kernelab.evaluate.verdict import POOL_SETS, Options

EVAL = Path(__file__).resolve().parents[1] / "fixtures" / "eval"
KB = EVAL / "kernelbench"
SCALE = 0.0625
SOFTMAX_SOLUTION = KB / "solutions/softmax/correct"

# KernelBench level 1 problem 23's shape: 4096 x 393,216 fp32, 6.4 GB a tensor
BIG_ROWS, BIG_COLS = 4096, 393_216
BIG = BIG_ROWS * BIG_COLS * 4


def _big_softmax(folder: Path) -> Path:
    problem = folder / "big_softmax.py"
    problem.write_text(
        (KB / "softmax.py")
        .read_text()
        .replace("batch_size = 2048", f"batch_size = {BIG_ROWS}")
        .replace("dim = 4093  # not a multiple of any tile", f"dim = {BIG_COLS}")
    )
    return problem


def _free(monkeypatch, free_bytes: int, what: str = "free device memory") -> None:
    """The memory the judge sees as free, in place of the device's."""
    monkeypatch.setattr(evaluator, "available_bytes", lambda device: (free_bytes, what))


def _solution() -> Path:
    return SOFTMAX_SOLUTION / "model_new.py"


def test_fake_tensors_give_a_problems_size_without_allocating_it(tmp_path):
    problem = load_problem(_big_softmax(tmp_path), device="cpu", scale=1.0)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB
    size = footprint.fake_set_size(problem, problem.timing_cases()[0])
    grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert (size.inputs, size.output) == (BIG, BIG)
    assert (size.inputs64, size.output64) == (2 * BIG, 2 * BIG)  # fp32 -> float64
    assert grown_kib < 1 << 20  # under a GiB grown: the 6.4 GB tensors were never made


def test_the_issue_problem_on_an_h200_needs_more_than_the_card_and_says_how_much():
    one = footprint.SetSize(inputs=BIG, inputs64=2 * BIG, output=BIG, output64=2 * BIG)
    # kept by the judge: three test seeds and the re-check, one pool set (inputs, output,
    # output in float64: 4 tensors each); for a moment, checking an output in float64 (5);
    # on the card the worker's pool, its call tree, three kept outputs plus the one being
    # made, and the fingerprint's scratch (8)
    expected = 4 * 4 * BIG + 4 * BIG + 5 * BIG + 8 * BIG
    need = footprint.need_bytes([one] * 4, [one], 1, on_gpu=True, min_kept=POOL_SETS)
    assert need == expected
    with pytest.raises(footprint.DoesNotFit) as found:
        footprint.plan([one] * 4, [one], wanted_sets=POOL_SETS, min_kept=POOL_SETS,
                       kept_cap=4 << 30, on_gpu=True, available=(139 * 10**9, "free device "
                       "memory"), how="from fake tensors")  # fmt: skip
    assert str(found.value).startswith(
        f"skipped: needs {expected / 1e9:.1f} GB, card has 139.0 GB free device memory"
    )


def test_the_plan_takes_the_most_input_sets_that_fit_and_gives_the_rest_to_kept_outputs():
    one = footprint.SetSize(inputs=100, inputs64=200, output=100, output64=200)
    need = {k: footprint.need_bytes([one], [one], k, on_gpu=True, min_kept=3) for k in (1, 2, 3)}
    assert need[1] < need[2] < need[3]
    budget = need[2] + 50  # two sets fit, three do not
    free = int(budget / footprint.MEMORY_SHARE) + 1
    chosen = footprint.plan([one], [one], wanted_sets=3, min_kept=3, kept_cap=10**9,
                            on_gpu=True, available=(free, "free device memory"), how="x")  # fmt: skip
    assert chosen.pool_sets == 2 and chosen.need_bytes == need[2]
    assert chosen.kept_output_bytes == int(footprint.MEMORY_SHARE * free) - need[2] + 3 * 100
    roomy = footprint.plan([one], [one], wanted_sets=3, min_kept=3, kept_cap=4096,
                           on_gpu=True, available=(10**9, "free device memory"), how="x")  # fmt: skip
    assert roomy.pool_sets == 3 and roomy.kept_output_bytes == 4096  # the cap, no more


@pytest.fixture
def as_h200(monkeypatch):
    import kernelab.harness.ceilings as ceilings
    from kernelab.harness.ceilings import DeviceIdentity

    identity = DeviceIdentity(0, "NVIDIA H200", "h200", None, (9, 0))
    monkeypatch.setattr(ceilings, "this_gpu", lambda command="kernelab": identity)
    monkeypatch.setattr(ceilings, "measured_ceilings_for", lambda spec, path=None: None)


@pytest.fixture
def rotating(monkeypatch):
    """Timed calls rotate through the pool (no set is made fast enough for one per call)."""
    import kernelab.evaluate.evaluator as evaluator_module

    monkeypatch.setattr(evaluator_module, "FRESH_MAKE_MAX_MS", -1.0)


def _timed(problem_path: Path) -> Evaluator:
    problem = load_problem(problem_path, device="cpu", scale=SCALE)
    found = Evaluator(problem, Options(seeds=1, seed=5, compile=False, max_time_s=0.05))
    found.timing = True  # the timed path on the host clock, as on a GPU
    found.prepare()
    return found


def test_short_memory_shrinks_the_pool_and_the_verdict_says_so(monkeypatch, as_h200, rotating):
    # softmax at 1/16: 128 x 256 fp32, 128 KiB in and out, 256 KiB each in float64
    one = footprint.SetSize(inputs=1 << 17, inputs64=1 << 18, output=1 << 17, output64=1 << 18)
    need_one = footprint.need_bytes([one, one], [one], 1, on_gpu=False, min_kept=POOL_SETS)
    _free(monkeypatch, int((need_one + 1000) / footprint.MEMORY_SHARE))
    found = _timed(KB / "softmax.py")
    assert len(found.pools["default"]) == 1
    judged = found.evaluate(_solution())
    assert judged.status == "pass", judged.message
    assert judged.memory["pool_sets"] == 1 and judged.memory["need_bytes"] == need_one
    assert judged.memory["sizes"] == "from the problem run on fake tensors"
    assert any(n.startswith("timed calls rotate through 1 input set(s), not 3") for n in
               judged.notes), judged.notes  # fmt: skip


def test_with_one_input_set_every_sampled_timed_output_is_still_checked(
    monkeypatch, as_h200, rotating
):
    one = footprint.SetSize(inputs=1 << 17, inputs64=1 << 18, output=1 << 17, output64=1 << 18)
    need_one = footprint.need_bytes([one, one], [one], 1, on_gpu=False, min_kept=POOL_SETS)
    _free(monkeypatch, int((need_one + 1000) / footprint.MEMORY_SHARE))
    found = _timed(KB / "softmax.py")
    checked = []
    judge = found._judge

    def counting(out, expected):
        checked.append(expected.seed)
        return judge(out, expected)

    monkeypatch.setattr(found, "_judge", counting)
    judged = found.evaluate(_solution())
    assert judged.status == "pass", judged.message
    [pool_set] = found.pools["default"]
    calls = len(judged.records[0]["samples_ms"])
    # the batch keeps no more outputs than the plan left room for ...
    assert POOL_SETS <= calls <= judged.memory["kept_output_bytes"] // (1 << 17)
    # ... and every output drawn after it (the last POOL_SETS and CHECKED_EXTRA more, or
    # all of a short batch) was judged against the one set's reference
    drawn = min(calls - POOL_SETS, max(verdict.CHECKED_EXTRA, min(verdict.CHECKED_MAX,
                                                                  int(calls * 0.1))))  # fmt: skip
    assert checked.count(pool_set.seed) == POOL_SETS + drawn


def test_with_one_input_set_a_cheat_on_timed_calls_still_fails(monkeypatch, as_h200, rotating):
    problem = load_problem(KB / "relu.py", device="cpu", scale=SCALE)
    one = footprint.fake_set_size(problem, problem.timing_cases()[0])
    need_one = footprint.need_bytes([one, one], [one], 1, on_gpu=False, min_kept=POOL_SETS)
    _free(monkeypatch, int((need_one + 1000) / footprint.MEMORY_SHARE))
    found = _timed(KB / "relu.py")
    assert len(found.pools["default"]) == 1
    cheat = found.evaluate(EVAL / "cheats/skips_when_timed.py")
    assert cheat.status == "fail" and "default: during timing, call " in cheat.message


def test_with_a_set_per_call_short_memory_keeps_no_pool_and_no_rotation_note(monkeypatch, as_h200):
    problem = load_problem(KB / "relu.py", device="cpu", scale=SCALE)
    one = footprint.fake_set_size(problem, problem.timing_cases()[0])
    need_one = footprint.need_bytes([one, one], [one], 1, on_gpu=False, min_kept=POOL_SETS)
    _free(monkeypatch, int((need_one + 1000) / footprint.MEMORY_SHARE))
    found = _timed(KB / "relu.py")
    assert found.fresh == {"default": True} and found.pools == {"default": []}
    judged = found.evaluate(KB / "solutions/relu/correct/model_new.py")
    assert judged.status == "pass", judged.message
    assert judged.memory["pool_sets"] == 1  # what the plan allowed; no pool was needed
    assert not any("rotate through" in n for n in judged.notes), judged.notes
    cheat = found.evaluate(EVAL / "cheats/skips_when_timed.py")
    assert cheat.status == "fail" and "(its own input set, seed " in cheat.message


def test_a_problem_that_cannot_fit_once_is_skipped_with_the_sizes(monkeypatch, tmp_path):
    _free(monkeypatch, 139 * 10**9)
    outcome = run_problem(_big_softmax(tmp_path), [_solution()], device="cpu", scale=1.0,
                          options=Options(seeds=3), timeout=60)  # fmt: skip
    assert outcome.setup_error is None
    [judged] = outcome.verdicts.values()
    assert judged["status"] == "skipped"
    assert judged["message"].startswith("skipped: needs ")
    assert "GB, machine has 139.0 GB free device memory" in judged["message"]
    assert "Traceback" not in judged["message"] and outcome.skipped == judged["message"]
    plan = judged["memory"]  # the sums behind the skip, with one input set
    assert plan["pool_sets"] == 1 and plan["need_bytes"] > plan["budget_bytes"]
    assert plan["budget_bytes"] == int(footprint.MEMORY_SHARE * 139 * 10**9)
    assert f"needs {plan['need_bytes'] / 1e9:.1f} GB" in judged["message"]


def test_the_cli_reports_a_skip_as_its_own_status_and_exit_3(monkeypatch, tmp_path, capsys):
    _free(monkeypatch, 139 * 10**9)
    problem = _big_softmax(tmp_path)
    code = main(["eval", str(problem), str(_solution()), "--device", "cpu", "--json"])
    judged = json.loads(capsys.readouterr().out)
    assert code == 3 and judged["status"] == "skipped", judged
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "big_softmax.py").write_text(problem.read_text())
    (suite / "big_softmax_solution.py").write_text(_solution().read_text())
    code = main(["eval", "--suite", str(suite), "--device", "cpu", "--json"])
    table = json.loads(capsys.readouterr().out)
    assert code == 3 and table["summary"] == {"skipped": 1}
    assert table["problems"][0]["skipped"].startswith("skipped: needs ")


def test_an_out_of_memory_at_set_up_is_a_skip_not_a_traceback(tmp_path):
    problem = tmp_path / "oom.py"
    problem.write_text(
        (KB / "softmax.py")
        .read_text()
        .replace(
            "def get_inputs():",
            "def get_inputs():\n    raise torch.OutOfMemoryError('Tried to allocate 6.00 GiB')",
        )
    )
    outcome = run_problem(problem, [_solution()], device="cpu", scale=SCALE,
                          options=Options(seeds=1), timeout=60)  # fmt: skip
    [judged] = outcome.verdicts.values()
    assert judged["status"] == "skipped", judged
    assert judged["message"].startswith("skipped: needs more, machine has ")
    assert (
        "setting up ran out of memory (OutOfMemoryError: Tried to allocate 6.00 GiB)"
        in (judged["message"])
    )


def test_a_problem_fake_tensors_cannot_run_is_measured_on_one_real_set_up(tmp_path):
    problem = tmp_path / "data_dependent.py"
    problem.write_text(
        (KB / "softmax.py")
        .read_text()
        .replace(
            "    return [torch.randn(batch_size, dim) * 3.0]",
            "    rows = int(torch.randint(batch_size, batch_size + 1, (1,)).item())\n"
            "    return [torch.randn(rows, dim) * 3.0]",
        )
    )
    found = Evaluator(load_problem(problem, device="cpu", scale=SCALE), Options(seeds=1))
    found.prepare()
    assert found.memory.how.startswith("measured on one real set-up per case (fake tensors ")
    assert found.memory.to_dict()["need_bytes"] > 0 and found.memory.pool_sets == POOL_SETS
