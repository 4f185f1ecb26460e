"""The judge sizes itself to the device: a problem's memory learnt from fake tensors before
anything is allocated, the correctness sets made one at a time when they are checked (never
held together, so the seeds do not add up), the timed calls' input pool shrunk to fit a
stated share of the free memory (the verdict says how many sets it used, and every sampled
timed output is still checked), and a problem that cannot fit even once skipped with what it
needs and what the device has, never a set-up traceback. The device's free memory is a stand-in here
(monkeypatched); the problems are large on paper only."""

from __future__ import annotations

import json
import resource
import weakref
from pathlib import Path

import pytest
from sized_problems import sized_softmax

from kernelab.cli import main
from kernelab.evaluate import evaluator, footprint, verdict
from kernelab.evaluate.evaluator import Evaluator
from kernelab.evaluate.formats import load_problem
from kernelab.evaluate.judge import run_problem
from kernelab.evaluate.verdict import POOL_SETS, Options
from kernelab.harness import blocks

EVAL = Path(__file__).resolve().parents[1] / "fixtures" / "eval"
KB = EVAL / "kernelbench"
SCALE = 0.0625
SOFTMAX_SOLUTION = KB / "solutions/softmax/correct"

# KernelBench level 1 problem 23's shape: 4096 x 393,216 fp32, 6.4 GB a tensor
BIG_ROWS, BIG_COLS = 4096, 393_216
BIG = BIG_ROWS * BIG_COLS * 4


def _big_softmax(folder: Path) -> Path:
    return sized_softmax(folder, BIG_ROWS, BIG_COLS)


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
    scratch = blocks.CHECK_BLOCK * blocks.CHECK_BYTES_PER_ELEMENT
    # kept by the judge throughout (inputs, output, output in float64: 4 tensors each): the
    # re-check and one pool set; for a moment, checking an output (the inputs sent back, the
    # output and its snapshot: 3) with the comparison's float64 blocks; then the larger phase:
    # the timed calls on the card (the worker's pool set, its call tree, three kept outputs
    # plus the one being made, and the fingerprint's scratch: 8) over the correctness checks
    # (a correctness set and the worker's share of its call: 7)
    expected = 2 * 4 * BIG + 3 * BIG + scratch + 8 * BIG  # 19 tensors and 128 MiB: 122.5 GB
    need = footprint.need_bytes([one], [one], 1, on_gpu=True, min_kept=POOL_SETS)
    assert need == expected
    # three seeds held together, as the judge once did, were 33 tensors: 212.6 GB
    assert 33 * BIG == 212_600_881_152
    with pytest.raises(footprint.DoesNotFit) as found:
        footprint.plan([one], [one], wanted_sets=POOL_SETS, min_kept=POOL_SETS,
                       kept_cap=4 << 30, on_gpu=True, available=(139 * 10**9, "free device "
                       "memory"), how="from fake tensors")  # fmt: skip
    assert str(found.value).startswith(
        f"skipped: needs {expected / 1e9:.1f} GB, card has 139.0 GB free device memory"
    )
    assert "--scale below 1 needs less" in str(found.value)  # --seeds no longer would
    # with a set per timed call the moments never add up: 10 tensors (64.4 GB), within 80 %
    # of an H100 80GB's 84.5 GB free (67.6 GB)
    fresh = footprint.plan([one], [one], wanted_sets=POOL_SETS, min_kept=POOL_SETS,
                           kept_cap=4 << 30, on_gpu=True, available=(H100_FREE, "free device "
                           "memory"), how="from fake tensors", fresh=True)  # fmt: skip
    assert fresh.pool_sets == 0 and fresh.need_bytes == 10 * BIG + scratch


def _plan_on(one: footprint.SetSize, card_gb: int, seeds: int = 3):
    """The plan for a one-case problem of set `one` with `seeds` seeds, or None where it
    does not fit a card with `card_gb` GB free."""
    try:
        return footprint.plan([one] * seeds, [one], wanted_sets=POOL_SETS, min_kept=POOL_SETS,
                              kept_cap=4 << 30, on_gpu=True,
                              available=(card_gb * 10**9, "free device memory"), how="x")  # fmt: skip
    except footprint.DoesNotFit:
        return None


def test_the_seeds_do_not_add_up_so_larger_problems_fit_an_80_gb_card_and_an_h200():
    scratch = blocks.CHECK_BLOCK * blocks.CHECK_BYTES_PER_ELEMENT

    def softmax(cols: int) -> footprint.SetSize:  # 4096 rows of fp32, in and out
        tensor = BIG_ROWS * cols * 4
        # made as randn(...) * 3.0 (two tensors for a moment), the output its only tensor
        return footprint.SetSize(tensor, 2 * tensor, tensor, 2 * tensor, 2 * tensor, tensor)

    one = softmax(BIG_COLS)
    assert footprint.need_bytes([one] * 3, [one], 1, on_gpu=True, min_kept=POOL_SETS) == (
        footprint.need_bytes([one], [one], 1, on_gpu=True, min_kept=POOL_SETS)
    )
    # problem 23 itself (6.4 GB a tensor, 122.5 GB with one pool set) fits neither an H200
    # nor an 80 GB card with a pool
    assert _plan_on(one, 139) is None and _plan_on(one, 80) is None
    # 4096 x 245,760 (4.0 GB a tensor): 96.6 GB with two pool sets (24 tensors: 8 kept per
    # set, 3 for a moment, the pool's inputs twice and the batch's 7), within 80 % of an
    # H200's 139 GB, not with three (29 tensors); three seeds held together needed 133 GB
    tensor = 4096 * 245_760 * 4
    h200 = _plan_on(softmax(245_760), 139)
    assert h200 is not None and h200.pool_sets == 2 and h200.need_bytes == 24 * tensor + scratch
    assert 29 * tensor > footprint.MEMORY_SHARE * 139e9 and 33 * tensor > 0.8 * 139e9
    # 4096 x 131,072 (a third of problem 23's columns, 2.1 GB a tensor): 62.3 GB with three
    # pool sets within 80 % of 80 GB (64 GB); three seeds held together needed 70.9 GB
    card80 = _plan_on(softmax(131_072), 80)
    assert card80 is not None and card80.pool_sets == 3
    assert card80.need_bytes == 29 * 4096 * 131_072 * 4 + scratch
    assert 33 * 4096 * 131_072 * 4 > footprint.MEMORY_SHARE * 80e9
    assert _plan_on(softmax(131_072), 80, seeds=10).need_bytes == card80.need_bytes


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
    need_one = footprint.need_bytes([one], [one], 1, on_gpu=False, min_kept=POOL_SETS)
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
    need_one = footprint.need_bytes([one], [one], 1, on_gpu=False, min_kept=POOL_SETS)
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
    need_one = footprint.need_bytes([one], [one], 1, on_gpu=False, min_kept=POOL_SETS)
    _free(monkeypatch, int((need_one + 1000) / footprint.MEMORY_SHARE))
    found = _timed(KB / "relu.py")
    assert len(found.pools["default"]) == 1
    cheat = found.evaluate(EVAL / "cheats/skips_when_timed.py")
    assert cheat.status == "fail" and "default: during timing, call " in cheat.message


def test_with_a_set_per_call_short_memory_keeps_no_pool_and_no_rotation_note(monkeypatch, as_h200):
    problem = load_problem(KB / "relu.py", device="cpu", scale=SCALE)
    one = footprint.fake_set_size(problem, problem.timing_cases()[0])
    need_one = footprint.need_bytes([one], [one], 1, on_gpu=False, min_kept=POOL_SETS)
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
    # problem 23 on the host alone (no worker on the device) needs 16 tensors (the judge's
    # 15 and the pages the inputs are shared through), 103.2 GB
    _free(monkeypatch, 80 * 10**9)
    outcome = run_problem(_big_softmax(tmp_path), [_solution()], device="cpu", scale=1.0,
                          options=Options(seeds=3), timeout=60)  # fmt: skip
    assert outcome.setup_error is None
    [judged] = outcome.verdicts.values()
    assert judged["status"] == "skipped"
    assert judged["message"].startswith("skipped: needs ")
    assert "GB, machine has 80.0 GB free device memory" in judged["message"]
    assert "Traceback" not in judged["message"] and outcome.skipped == judged["message"]
    plan = judged["memory"]  # the sums behind the skip, with one input set
    assert plan["pool_sets"] == 1 and plan["need_bytes"] > plan["budget_bytes"]
    assert plan["budget_bytes"] == int(footprint.MEMORY_SHARE * 80 * 10**9)
    assert f"needs {plan['need_bytes'] / 1e9:.1f} GB" in judged["message"]


def test_the_cli_reports_a_skip_as_its_own_status_and_exit_3(monkeypatch, tmp_path, capsys):
    _free(monkeypatch, 80 * 10**9)
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


# --- the correctness sets, one at a time ---------------------------------------------------


def _watched(monkeypatch, found: Evaluator) -> list:
    """Weak references to every Expected the evaluator makes from now on."""
    made: list[weakref.ref] = []
    expect = found._expect

    def counting(case, seed, buffers=None):
        expected = expect(case, seed, buffers=buffers)
        made.append(weakref.ref(expected))
        return expected

    monkeypatch.setattr(found, "_expect", counting)
    return made


def _alive(made: list) -> list:
    return [e for e in (ref() for ref in made) if e is not None]


def test_one_correctness_set_is_alive_at_a_time_and_set_up_keeps_only_their_seeds(monkeypatch):
    import random

    found = Evaluator(load_problem(KB / "softmax.py", device="cpu", scale=SCALE),
                      Options(seeds=3, seed=11, repeat_calls=2))  # fmt: skip
    made = _watched(monkeypatch, found)
    found.prepare()
    kept = [*found.rechecks.values(), *(e for pool in found.pools.values() for e in pool)]
    # set-up made each correctness set once (its failures are set-up's) and kept only the
    # sets timing needs; the seeds come from --seed's generator in the order they always did
    assert len(made) >= len(found.checks) + len(kept)
    assert {id(e) for e in _alive(made)} == {id(e) for e in kept}
    draw = random.Random(11)
    assert [check.seed for check in found.checks] == [draw.randrange(2**31) for _ in range(3)]
    assert all(check.input_bytes > 0 for check in found.checks)

    def correctness_alive() -> int:
        return len([e for e in _alive(made) if not any(e is k for k in kept)])

    alive_at_make, alive_at_check = [], []
    expect, check = found._expect, found._check

    def making(case, seed, buffers=None):
        alive_at_make.append(correctness_alive())
        return expect(case, seed, buffers=buffers)

    def watching(worker, expected, kind):
        if kind in ("test", "benchmark"):
            alive_at_check.append(correctness_alive())
        return check(worker, expected, kind)

    monkeypatch.setattr(found, "_expect", making)
    monkeypatch.setattr(found, "_check", watching)
    made.clear()
    judged = found.evaluate(_solution())
    assert judged.status == "pass", judged.message
    assert alive_at_make == [0, 0, 0]  # the previous set is gone before the next is made
    assert alive_at_check == [1, 1, 1]  # the one being checked, no other
    assert [(c.case, c.seed) for c in judged.cases if c.kind == "test"] == [
        (check.case.label, check.seed) for check in found.checks
    ]
    assert len(made) == 3 and not _alive(made)  # each made for its check, and gone after


def test_a_reference_that_fails_at_one_seed_fails_set_up_as_before(monkeypatch):
    from kernelab.errors import KernelabError

    found = Evaluator(load_problem(KB / "softmax.py", device="cpu", scale=SCALE),
                      Options(seeds=3, seed=11))  # fmt: skip
    import random

    draw = random.Random(11)
    _, second, _ = (draw.randrange(2**31) for _ in range(3))
    problem = found.problem
    generate, reference, last = problem.generate, problem.reference, []

    def generating(case, seed):
        last.append(seed)
        return generate(case, seed)

    def failing(data):
        if last[-1] == second:
            raise RuntimeError("not at this seed")
        return reference(data)

    monkeypatch.setattr(problem, "generate", generating)
    monkeypatch.setattr(problem, "reference", failing)
    with pytest.raises(KernelabError) as failed:  # judge.open_problem: the setup_error
        found.prepare()
    assert str(failed.value) == (
        f"{problem.name} default seed {second}: the reference failed: RuntimeError: not at "
        "this seed"
    )


def test_a_set_that_cannot_be_made_again_when_checked_is_the_problems_not_the_solutions(
    monkeypatch,
):
    import torch

    found = Evaluator(load_problem(KB / "softmax.py", device="cpu", scale=SCALE),
                      Options(seeds=2, seed=3, repeat_calls=2))  # fmt: skip
    found.prepare()
    problem, first = found.problem, found.checks[0]

    def failing(data):  # a reference that worked at set-up and no longer does
        raise RuntimeError("not reproducible")

    monkeypatch.setattr(problem, "reference", failing)
    judged = found.evaluate(_solution())
    assert judged.status == "error" and not judged.cases
    assert judged.message == (
        f"{problem.name} default seed {first.seed}: the reference failed: RuntimeError: not "
        "reproducible"
    )

    def short(data):
        raise torch.OutOfMemoryError("Tried to allocate 6.00 GiB")

    monkeypatch.setattr(problem, "reference", short)
    judged = found.evaluate(_solution())
    assert judged.status == "skipped" and not judged.cases
    assert judged.message.startswith("skipped: needs more than the "), judged.message
    assert judged.message.endswith(
        f"making the references of default seed {first.seed} ran out of memory "
        "(OutOfMemoryError: Tried to allocate 6.00 GiB)"
    )


def test_inputs_that_run_out_of_memory_are_reported_not_made_elsewhere(tmp_path):
    """A KernelBench get_inputs that fails under the device is run on the host from then on
    (one that needs numpy); one that ran out of memory is not (kernelbench.generate): the
    judge and the worker would then draw different inputs from one seed. The error goes up,
    for the memory plan to report as a skip."""
    import torch

    from kernelab.evaluate import kernelbench

    problem_file = tmp_path / "oom.py"
    problem_file.write_text(
        "import torch\n\nclass Model(torch.nn.Module):\n"
        "    def forward(self, x):\n        return x\n\n"
        "def get_inputs():\n"
        "    raise torch.OutOfMemoryError('CUDA out of memory. Tried to allocate 6.40 GiB')\n\n"
        "def get_init_inputs():\n    return []\n"
    )
    problem = load_problem(problem_file, device="cpu", scale=1.0)
    [case] = problem.tests
    with pytest.raises(torch.OutOfMemoryError):
        problem.generate(case, 1)
    assert kernelbench.is_out_of_memory(torch.OutOfMemoryError("CUDA out of memory"))
    assert not kernelbench.is_out_of_memory(TypeError("can't convert cuda tensor to numpy"))


# KernelBench level 1 problem 5's shape: C = A * s, A 65,536 x 16,384 fp32 (4.3 GB in and out)
SCALAR_ROWS, SCALAR_COLS = 16384 * 4, 4096 * 4
SCALAR = SCALAR_ROWS * SCALAR_COLS * 4
H100_FREE = int(84.5e9)  # what an H100 80GB HBM3 had free when problem 5 was skipped


def _scalar_multiplication(folder: Path) -> Path:
    path = folder / "scalar_multiplication.py"
    path.write_text(
        "import torch\n\n\nclass Model(torch.nn.Module):\n"
        "    def forward(self, A, s):\n        return A * s\n\n\n"
        f"M = {SCALAR_ROWS}\nN = {SCALAR_COLS}\n\n\n"
        "def get_inputs():\n    return [torch.rand(M, N), 3.14]\n\n\n"
        "def get_init_inputs():\n    return []\n"
    )
    return path


def test_the_plan_of_a_problem_shaped_like_kernelbench_5_holds_each_term_once(tmp_path):
    problem = load_problem(_scalar_multiplication(tmp_path), device="cpu", scale=1.0)
    size = footprint.fake_set_size(problem, problem.tests[0])  # fake tensors: nothing allocated
    i, o = SCALAR, SCALAR
    assert (size.inputs, size.output, size.inputs64, size.output64) == (i, o, 2 * i, 2 * o)
    assert size.kept == i + o + 2 * o  # the inputs, the eager output, the exact one
    assert size.in_worker == i + 2 * o  # the worker's copy, its output and the snapshot
    # the transient: checking an output (the inputs sent back, the output and its snapshot)
    assert size.transient == i + 2 * o + size.blocks
    # the batch: the call tree, 3 kept outputs, the call's own and the fingerprint's two
    assert size.batch(POOL_SETS) == i + 6 * o

    def need(sets: int) -> int:
        return footprint.need_bytes([size], [size], sets, on_gpu=True, min_kept=POOL_SETS)

    # one pool set: the judge keeps the re-check and the pool set throughout, and the timed
    # phase (the worker's pool and batch) is larger than the correctness phase (a correctness
    # set and the worker's share of its check); the phases never add up
    assert need(1) == 2 * size.kept + size.transient + max(size.kept + size.in_worker,
                                                           i + size.batch(POOL_SETS))  # fmt: skip
    assert need(1) > int(footprint.MEMORY_SHARE * H100_FREE)  # 81.7 GB: more than 67.6
    # a set per timed call: nothing kept throughout; the batch is the worker's alone (the
    # judge holds nothing of the case then), and the judge's set and its transient meet
    # either a checked call in the worker or the batch's three kept outputs, never the batch
    assert need(0) == size.transient + size.kept + max(size.in_worker, POOL_SETS * o)
    assert need(0) == 10 * o + size.blocks > size.batch(POOL_SETS) == 7 * o
    assert need(0) < 43.1e9 < 67e9  # 98.9 GB when each term was summed; 60.3 when the batch
    # was counted beside the judge's set

    plan = footprint.plan([size], [size], wanted_sets=POOL_SETS, min_kept=POOL_SETS,
                          kept_cap=verdict.KEPT_OUTPUT_BYTES, on_gpu=True,
                          available=(H100_FREE, "free device memory"), how="fake",
                          fresh=True)  # fmt: skip
    assert plan.pool_sets == 0 and plan.need_bytes == need(0)
    assert plan.refusal.startswith(f"skipped: needs {need(1) / 1e9:.1f} GB")
    with pytest.raises(footprint.DoesNotFit, match=f"needs {need(1) / 1e9:.1f} GB"):
        footprint.plan([size], [size], wanted_sets=POOL_SETS, min_kept=POOL_SETS,
                       kept_cap=verdict.KEPT_OUTPUT_BYTES, on_gpu=True,
                       available=(H100_FREE, "free device memory"), how="fake")  # fmt: skip


def test_with_room_for_a_set_per_call_only_the_recheck_is_made_again_and_cheats_fail(
    monkeypatch, as_h200
):
    problem = load_problem(KB / "relu.py", device="cpu", scale=SCALE)
    one = footprint.fake_set_size(problem, problem.timing_cases()[0])
    need_none = footprint.need_bytes([one], [one], 0, on_gpu=False, min_kept=POOL_SETS)
    need_one = footprint.need_bytes([one], [one], 1, on_gpu=False, min_kept=POOL_SETS)
    assert need_none < need_one
    _free(monkeypatch, int((need_none + 1000) / footprint.MEMORY_SHARE))
    found = _timed(KB / "relu.py")
    assert found.memory.pool_sets == 0 and found.fresh == {"default": True}
    [shelved] = found.rechecks.values()
    assert shelved.data[0].device.type == "meta"  # its seed kept, not its tensors
    made = []
    expect = found._expect
    monkeypatch.setattr(found, "_expect", lambda *a, **k: made.append(a[1]) or expect(*a, **k))
    judged = found.evaluate(KB / "solutions/relu/correct/model_new.py")
    assert judged.status == "pass", judged.message
    assert judged.cases[-1].kind == "recheck" and judged.cases[-1].ok
    assert shelved.seed in made  # made again from its seed when it was checked
    cheat = found.evaluate(EVAL / "cheats/skips_when_timed.py")
    assert cheat.status == "fail" and "(its own input set, seed " in cheat.message


def test_with_room_for_a_set_per_call_only_a_problem_that_cannot_have_one_is_skipped(
    monkeypatch, as_h200, rotating
):
    problem = load_problem(KB / "relu.py", device="cpu", scale=SCALE)
    one = footprint.fake_set_size(problem, problem.timing_cases()[0])
    need_none = footprint.need_bytes([one], [one], 0, on_gpu=False, min_kept=POOL_SETS)
    _free(monkeypatch, int((need_none + 1000) / footprint.MEMORY_SHARE))
    with pytest.raises(footprint.DoesNotFit, match="a set per timed call would fit, but") as no:
        _timed(KB / "relu.py")
    assert str(no.value).startswith("skipped: needs ") and no.value.plan["pool_sets"] == 1


def test_the_plan_of_a_problem_shaped_like_kernelbench_23_fits_an_80_gb_card_with_a_set_per_call(
    tmp_path,
):
    """4096 x 393,216 fp32 softmax (6.4 GB in, 6.4 GB out), sized on fake tensors: with a set
    per timed call the batch (the worker's alone) is never counted beside the judge's set,
    and the worker's kept outputs only beside the checks of the batch's sampled calls."""
    problem = load_problem(_big_softmax(tmp_path), device="cpu", scale=1.0)
    size = footprint.fake_set_size(problem, problem.timing_cases()[0])  # nothing allocated
    t = BIG
    assert (size.inputs, size.output, size.inputs64, size.output64) == (t, t, 2 * t, 2 * t)
    assert size.kept == 4 * t and size.in_worker == 3 * t
    assert size.transient == 3 * t + size.blocks  # a checked output with its snapshot
    assert size.batch(POOL_SETS) == 7 * t  # the call tree, 3 kept, the call's own, 2 scratch
    sets = [footprint.fake_set_size(problem, c) for c in [*problem.tests, *problem.benchmarks]]

    def need(pool: int) -> int:
        return footprint.need_bytes(sets, [size], pool, on_gpu=True, min_kept=POOL_SETS)

    # what each moment holds, in tensors of 6.4 GB
    set_up = size.kept + size.transient  # the re-check made, the baselines timed: 7
    checked = size.transient + size.kept + size.in_worker  # a checked call: 10
    loops = t + size.batch(POOL_SETS)  # the loop's cost, the re-check shelved: 8
    batch = size.batch(POOL_SETS)  # the worker's batch, the judge holding nothing: 7
    sampled = size.transient + size.kept + POOL_SETS * t  # a sampled output checked: 10
    assert need(0) == max(set_up, loops, checked, batch, sampled) == 10 * t + size.blocks
    # the plan before counted the batch beside the judge's set and the transient: 90.2 GB
    assert size.transient + size.kept + batch == 14 * t + size.blocks > 90e9
    plan = footprint.plan(sets, [size], wanted_sets=POOL_SETS, min_kept=POOL_SETS,
                          kept_cap=verdict.KEPT_OUTPUT_BYTES, on_gpu=True,
                          available=(H100_FREE, "free device memory"), how="fake",
                          fresh=True)  # fmt: skip
    assert plan.pool_sets == 0 and plan.need_bytes == need(0)
    assert 64.5e9 < plan.need_bytes <= plan.budget_bytes < 67.7e9
    # the kept outputs get no more than the least batch (three calls of 6.4 GB)
    assert plan.kept_output_bytes < 4 * t
    assert need(1) > 120e9  # with one pool set kept: 122.5 GB, neither card
    # on an H200 (139 GB free) the same: a pool does not fit, a set per call does
    h200 = footprint.plan(sets, [size], wanted_sets=POOL_SETS, min_kept=POOL_SETS,
                          kept_cap=verdict.KEPT_OUTPUT_BYTES, on_gpu=True,
                          available=(139 * 10**9, "free device memory"), how="fake",
                          fresh=True)  # fmt: skip
    assert h200.pool_sets == 0 and h200.need_bytes == need(0)


def test_with_a_set_per_call_every_cheat_still_fails_and_the_worker_drops_the_batch(
    monkeypatch, as_h200
):
    """A small problem judged with no pool (the plan for problems like KernelBench 23): the
    correct solution passes, the batch's outputs are gone from the worker before the re-check
    call, and a solution that only works on checked calls, writes its inputs or returns a
    stale answer fails."""
    problem = load_problem(KB / "relu.py", device="cpu", scale=SCALE)
    one = footprint.fake_set_size(problem, problem.timing_cases()[0])
    need_none = footprint.need_bytes([one], [one], 0, on_gpu=False, min_kept=POOL_SETS)
    _free(monkeypatch, int((need_none + 1000) / footprint.MEMORY_SHARE))
    found = _timed(KB / "relu.py")
    assert found.memory.pool_sets == 0 and found.memory.need_bytes == need_none
    assert found.fresh == {"default": True} and found.pools == {"default": []}
    after_recheck = []
    check = found._check

    def checking(worker, expected, kind):
        result = check(worker, expected, kind)
        if kind == "recheck":  # the batch's outputs, asked for after the checked call
            after_recheck.append(worker.ask({"kind": "outputs", "indices": [0, 1, 2]}))
        return result

    monkeypatch.setattr(found, "_check", checking)
    judged = found.evaluate(KB / "solutions/relu/correct/model_new.py")
    assert judged.status == "pass", judged.message
    assert judged.memory["pool_sets"] == 0
    assert judged.cases[-1].kind == "recheck" and judged.cases[-1].ok
    assert after_recheck == [{"outputs": {}}]  # dropped: not held beside the checked call
    monkeypatch.setattr(found, "_check", check)
    for cheat, says in (
        (EVAL / "cheats/skips_when_timed.py", "(its own input set, seed "),
        (EVAL / "checks/works_only_when_checked.py", "(its own input set, seed "),
        (KB / "solutions/relu/wrong/mutates_input.py", "the solution wrote into input 0"),
        (KB / "solutions/relu/wrong/cached.py", "during timing, call "),  # a stale answer
        (EVAL / "cheats/memoises_pointer.py", "during timing, call "),
    ):
        failed = found.evaluate(cheat)
        assert failed.status == "fail", (cheat.name, failed.status, failed.message)
        assert says in failed.message, (cheat.name, failed.message)
