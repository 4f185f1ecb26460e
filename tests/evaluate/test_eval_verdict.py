"""Verdicts on the CPU: every fixture solution judged by an Evaluator in this process (the
judge), the solution in its worker, each wrong one rejected with a message that says why;
the op recognisers; the thresholds' edge rules.

Without a GPU the candidate is called `repeat_calls` times in place of timing (each call
checked), then re-checked on unseen inputs. The timed path runs here too, on the host clock,
with this process presented as an H200 for the roofline, and with it the cheats that tell
timed calls from checked ones.
"""

from __future__ import annotations

import functools
from pathlib import Path

import pytest
import torch

from kernelab.evaluate import trees
from kernelab.evaluate.evaluator import Evaluator
from kernelab.evaluate.formats import load_problem
from kernelab.evaluate.recognise import declared, recognise
from kernelab.evaluate.verdict import Options

EVAL = Path(__file__).resolve().parents[1] / "fixtures" / "eval"
KB = EVAL / "kernelbench"
GM = EVAL / "gpumode"
SCALE = 0.0625  # fixture sizes / 16: small enough for a shared CPU

PROBLEMS = {
    "kb-softmax": KB / "softmax.py",
    "kb-matmul": KB / "matmul.py",
    "kb-relu": KB / "relu.py",
    "gm-softmax": GM / "softmax_py",
    "gm-relu": GM / "relu_py",
}


def solutions_of(key: str) -> list[Path]:
    path = PROBLEMS[key]
    if path.is_dir():
        return [path / "submission.py", *sorted((path / "solutions").rglob("*.py"))]
    return sorted((KB / "solutions" / path.stem).rglob("*.py"))


@functools.cache
def evaluator(key: str) -> Evaluator:
    problem = load_problem(PROBLEMS[key], device="cpu", scale=SCALE)
    found = Evaluator(problem, Options(seeds=2, seed=1234, repeat_calls=20))
    found.prepare()
    return found


# Why each known-wrong solution must fail: one of these phrases in its message.
WHY = {
    "zeros": ("output is constant", "relative norm error 1 exceeds"),
    "off_by_one": ("NaN where the reference is finite", "exceeds the threshold"),
    "low_precision": ("exceeds the threshold",),
    "mutates_input": ("the solution wrote into input 0",),
    "cached": ("exceeds the threshold",),
    "degrades": ("during 20 calls, call", "after 20 calls, on new inputs"),
}

CASES = [(key, path) for key in PROBLEMS for path in solutions_of(key)]


@pytest.mark.parametrize("key, solution", CASES, ids=[f"{k}:{p.stem}" for k, p in CASES])
def test_fixture_verdicts(key, solution):
    verdict = evaluator(key).evaluate(solution)
    assert "\n" not in verdict.message
    wrong = "wrong" in solution.parts
    if not wrong or solution.stem == "side_stream":  # no streams on a CPU: it is correct here
        assert verdict.status == "pass", verdict.message
        assert verdict.message.startswith("correct on")
        assert any("timing skipped (no GPU)" in note for note in verdict.notes)
        assert all(case.ok for case in verdict.cases)
        assert any(case.kind == "recheck" for case in verdict.cases)
        return
    assert verdict.status == "fail", f"{solution} passed: {verdict.message}"
    assert any(phrase in verdict.message for phrase in WHY[solution.stem]), verdict.message


def test_a_loose_allclose_is_named_when_it_would_have_passed(tmp_path):
    # Probabilities off by 5e-4 each: within the problem's own atol=1e-3, rows no longer
    # sum to one, far outside fp32's threshold.
    biased = tmp_path / "biased.py"
    biased.write_text(
        "import torch\n\n\ndef custom_kernel(data):\n"
        "    return torch.softmax(data[0], dim=-1) + 5e-4\n"
    )
    verdict = evaluator("gm-softmax").evaluate(biased)
    assert verdict.status == "fail"
    assert "exceeds the threshold" in verdict.message
    assert "alone would have passed it" in verdict.message


def test_gpumode_buffer_is_poisoned_so_an_unwritten_element_shows():
    found = evaluator("gm-relu")
    verdict = found.evaluate(GM / "relu_py/solutions/wrong/off_by_one.py")
    assert "1 NaN" in verdict.message
    assert all(e.buffers == {"[1]"} for e in found.expectations())


def test_a_buffer_that_already_holds_the_answer_is_still_found_and_poisoned(tmp_path):
    # torch.empty may hand back the block a previous call filled with this very answer; a
    # before/after comparison alone then sees an input, and the unwritten element would pass.
    import shutil

    problem = tmp_path / "relu_prefilled"
    shutil.copytree(GM / "relu_py", problem)
    shutil.copy(GM / "utils.py", tmp_path)  # the problem imports ../utils.py, as upstream
    reference = problem / "reference.py"
    source = reference.read_text()
    empty = "y = torch.empty(size, device=device(), dtype=torch.bfloat16)"
    assert empty in source
    reference.write_text(source.replace(empty, "y = torch.relu(x)"))
    found = Evaluator(
        load_problem(problem, device="cpu", scale=SCALE), Options(seeds=2, repeat_calls=2)
    )
    found.prepare()
    assert all(e.buffers == {"[1]"} for e in found.expectations())
    verdict = found.evaluate(problem / "solutions/wrong/off_by_one.py")
    assert verdict.status == "fail"
    assert "1 NaN" in verdict.message


def test_every_test_case_and_seed_is_checked():
    found = evaluator("gm-softmax")
    verdict = found.evaluate(GM / "softmax_py/submission.py")
    seen = {(case.case, case.seed) for case in verdict.cases if case.kind == "test"}
    assert len(seen) == 3 * 2  # three test cases, two seeds each
    assert {4242, 5236, 1001} <= {seed for _, seed in seen}  # the seeds task.yml names
    assert any(case.kind == "benchmark" and case.seed == 31232 for case in verdict.cases)


def test_missing_entry_point_fails_with_a_reason(tmp_path):
    empty = tmp_path / "empty.py"
    empty.write_text("x = 1\n")
    assert "defines no class ModelNew" in evaluator("kb-relu").evaluate(empty).message
    assert "defines no custom_kernel" in evaluator("gm-relu").evaluate(empty).message
    notes = tmp_path / "solution.txt"
    notes.write_text("def custom_kernel(data):\n    return data[1]\n")
    assert "not a Python file (.py)" in evaluator("gm-relu").evaluate(notes).message


def test_wrong_dtype_or_structure_is_named(tmp_path):
    half = tmp_path / "half.py"
    half.write_text(
        "import torch\n\n\nclass ModelNew(torch.nn.Module):\n"
        "    def forward(self, x):\n        return torch.relu(x).half()\n"
    )
    assert "has dtype float16; the reference returns float32" in (
        evaluator("kb-relu").evaluate(half).message
    )
    pair = tmp_path / "pair.py"
    pair.write_text(
        "import torch\n\n\nclass ModelNew(torch.nn.Module):\n"
        "    def forward(self, x):\n        return torch.relu(x), x\n"
    )
    assert "returned tuple of 2" in evaluator("kb-relu").evaluate(pair).message


def test_reference_error_widens_the_threshold_but_never_for_constants():
    found = evaluator("kb-relu")
    expected = next(found.expectations())
    exact = trees.leaves(expected.exact)[0][1]
    nudged = (exact * (1 + 1e-4)).to(torch.float32)  # 1e-4 relative: over fp32's 1.9e-5
    ok, *_ = found._judge(nudged, expected)
    assert not ok
    wider = type(expected)(**{**expected.__dict__, "allowance": 2e-4})
    ok, error, limit, _ = found._judge(nudged, wider)
    assert ok and error == pytest.approx(1e-4, rel=0.05) and limit == 2e-4
    huge = type(expected)(**{**expected.__dict__, "allowance": 10.0})
    ok, *_, message = found._judge(torch.zeros_like(nudged), huge)
    assert not ok and "constant" in message


# --- the roofline recognisers ------------------------------------------------------------


@pytest.mark.parametrize(
    "key, op, shape",
    [
        ("kb-matmul", "gemm", {"m": 64, "n": 48, "k": 128}),
        ("kb-softmax", "softmax", {"rows": 128, "cols": 256}),
        ("kb-relu", "elementwise", {"n": 128 * 512}),
        ("gm-relu", "elementwise", {"n": 1048576}),
    ],
)
def test_recognised_costs(key, op, shape):
    found = evaluator(key)
    [(_, recognition)] = found.costs.items()
    assert recognition.cost is not None, recognition.reason
    assert recognition.cost.op == op
    assert {k: recognition.cost.shape[k] for k in shape} == shape


def test_two_arithmetic_ops_are_not_recognised():
    x = torch.randn(8, 16)
    found = recognise(lambda data: torch.relu(data[0]) * 2.0, [x])
    assert found.cost is None and "2 arithmetic aten ops" in found.reason


def test_a_gemm_cost_counts_flops_and_bytes():
    a, b = torch.randn(32, 64), torch.randn(64, 16)
    cost = recognise(lambda data: data[0] @ data[1], [a, b]).cost
    assert cost.flops == 2 * 32 * 16 * 64
    assert cost.bytes == (32 * 64 + 64 * 16 + 32 * 16) * 4


def test_declared_cost_is_used_as_given():
    found = declared(lambda data: {"flops": 10.0, "bytes": 40.0}, None, "bf16", "mine")
    assert found.cost.flops == 10.0 and found.cost.dtype == "bf16" and found.cost.op == "mine"
    refused = declared(lambda data: {"flops": 1.0}, None, "fp32", "x")
    assert refused.cost is None and "flops and bytes" in refused.reason


def test_options_are_validated():
    from kernelab.errors import KernelabError

    with pytest.raises(KernelabError, match="--seeds"):
        Options(seeds=0).validate()
    with pytest.raises(KernelabError, match="--mode"):
        Options(mode="warm").validate()


# --- the timing path, on the host clock (a GPU's events: test_eval_gpu.py) ---------------


@pytest.fixture
def as_h200(monkeypatch):
    """This process presented as an H200 to the roofline placement (the judge's side)."""
    import kernelab.harness.ceilings as ceilings
    from kernelab.harness.ceilings import DeviceIdentity

    identity = DeviceIdentity(0, "NVIDIA H200", "h200", None, (9, 0))
    monkeypatch.setattr(ceilings, "this_gpu", lambda command="kernelab": identity)
    monkeypatch.setattr(ceilings, "measured_ceilings_for", lambda spec, path=None: None)


def timed_evaluator(problem_path: Path, **options) -> Evaluator:
    problem = load_problem(problem_path, device="cpu", scale=SCALE)
    settings = {"seeds": 1, "seed": 99, "compile": False, "max_time_s": 0.05, **options}
    found = Evaluator(problem, Options(**settings))
    found.timing = True  # as on a GPU; the loop times with the host clock on the CPU
    found.prepare()
    return found


def test_timed_verdict_reports_speedups_placement_and_records(as_h200):
    found = timed_evaluator(PROBLEMS["kb-matmul"])
    found.measure_baselines()
    eager = found.baselines["default"]["eager"]["mean_ms"]
    assert eager > 0
    verdict = found.evaluate(KB / "solutions/matmul/correct/model_new.py")
    assert verdict.status == "pass", verdict.message
    [timed] = verdict.timings
    assert timed.solution_ms > 0 and timed.eager_ms == eager
    assert timed.speedup_vs_eager == pytest.approx(eager / timed.solution_ms)
    assert timed.compiled_ms is None  # compile off
    sheet = timed.placement["datasheet"]
    assert sheet["gpu"] == "h200" and sheet["time_ms"] == pytest.approx(timed.solution_ms)
    assert "x eager PyTorch in per-call latency, launch path included" in verdict.message
    assert "launch path" in timed.basis  # the speedup says which time it compares
    [record] = verdict.records
    assert record["implementation"] == "model_new" and record["op"] == "kernelbench:matmul"
    assert len(record["samples_ms"]) >= found.options.min_samples
    assert [r["implementation"] for r in found.baseline_records] == ["eager"]
    assert verdict.cases[-1].kind == "recheck" and verdict.cases[-1].ok


def test_faster_than_the_floor_is_suspect_not_celebrated(as_h200, tmp_path):
    # A declared cost of an exabyte: any real time is under the H200's roofline floor.
    problem = tmp_path / "relu_exabyte.py"
    problem.write_text(
        (KB / "relu.py").read_text()
        + "\n\ndef roofline_cost(x):\n    return {'flops': 1.0, 'bytes': 1e18}\n"
    )
    verdict = timed_evaluator(problem).evaluate(KB / "solutions/relu/correct/model_new.py")
    assert verdict.status == "suspect"
    assert "under the roofline floor" in verdict.message
    assert "eager PyTorch" not in verdict.message


@pytest.mark.parametrize(
    "cheat, at_least_ms",
    [
        # its process's clock slowed a thousandfold, 20 ms of sleep per call
        ("cheats/lies_about_time.py", 5.0),
        # 20 ms of work per call done in the loop's input loading, outside the per-call clock
        ("cheats/works_before_the_clock.py", 2.0),
    ],
)
def test_time_the_worker_does_not_report_is_found_by_the_judges_clock(as_h200, cheat, at_least_ms):
    found = timed_evaluator(PROBLEMS["kb-relu"], max_time_s=0.2)
    verdict = found.evaluate(EVAL / cheat)
    assert verdict.status == "suspect", verdict.message
    assert "tampered with" in verdict.message
    [timed] = verdict.timings
    # the judge's floor: the 20 ms calls less its generous allowance for the loop and for
    # noise on a loaded CPU (a bound, low on a busy machine); never the worker's ~0.02 ms
    assert timed.solution_ms >= at_least_ms, timed
    assert any("the judge observed at least" in w for w in timed.warnings)


def test_a_time_of_nothing_at_all_is_tampering(as_h200):
    found = timed_evaluator(PROBLEMS["kb-relu"], max_time_s=0.2)
    verdict = found.evaluate(EVAL / "cheats/reports_zero_time.py")
    assert verdict.status == "suspect", verdict.message
    assert "reported no time at all" in verdict.message
    [timed] = verdict.timings
    assert timed.solution_ms > 0 and timed.speedup_vs_eager is not None


def test_the_loop_and_the_baselines_are_measured_before_any_worker_exists(as_h200, monkeypatch):
    from kernelab.evaluate import observed

    found = timed_evaluator(PROBLEMS["kb-relu"])
    assert found.loop_ms["default"] > 0 and found.baselines["default"]["eager"]["mean_ms"] > 0

    def not_now(*args, **kwargs):
        raise AssertionError("measured while a worker is alive")

    monkeypatch.setattr(observed, "loop_cost_ms", not_now)
    verdict = found.evaluate(KB / "solutions/relu/correct/model_new.py")
    assert verdict.status == "pass", verdict.message


def test_an_honest_time_is_left_as_the_worker_measured_it(as_h200):
    found = timed_evaluator(PROBLEMS["kb-relu"])
    verdict = found.evaluate(KB / "solutions/relu/correct/model_new.py")
    assert verdict.status == "pass", verdict.message
    [timed] = verdict.timings
    assert not any("the judge observed" in w for w in timed.warnings), timed.warnings


def test_behaviour_during_and_after_timing_is_checked(as_h200):
    found = timed_evaluator(PROBLEMS["gm-relu"])
    verdict = found.evaluate(GM / "relu_py/solutions/wrong/degrades.py")
    assert verdict.status == "fail"
    assert "during timing, call" in verdict.message or verdict.message.startswith(
        "after timing, on new inputs"
    ), verdict.message


# --- checks a solution cannot predict, on the timed path ----------------------------------


@pytest.mark.parametrize(
    "cheat",
    [
        "checks/works_only_when_checked.py",  # the poisoned flag, the chosen indices' frame
        "cheats/skips_when_timed.py",  # a timer's frame on its stack
        "cheats/finishes_after_return.py",  # an empty tensor, filled by a thread later
        "cheats/memoises_pointer.py",  # the timer's tensor object, called again
    ],
)
def test_a_timed_call_may_be_checked_whichever_it_is(as_h200, cheat):
    found = timed_evaluator(PROBLEMS["kb-relu"])
    verdict = found.evaluate(EVAL / cheat)
    assert verdict.status == "fail", verdict.message
    assert "default: during timing, call " in verdict.message, verdict.message


@pytest.mark.parametrize(
    "cheat",
    [
        "checks/computes_after_the_batch.py",  # the honest answer, made after the batch
        "checks/forges_the_fingerprint.py",  # ... and nudged to the zeros' sum of words
        "checks/hides_behind_a_neg_view.py",  # ... as a negative view, which cannot be viewed
    ],  # as bytes (the digest resolves the bit; an undigestible output fails)
)
def test_an_output_made_after_the_batch_does_not_match_its_fingerprint(as_h200, cheat):
    found = timed_evaluator(PROBLEMS["kb-relu"])
    verdict = found.evaluate(EVAL / cheat)
    assert verdict.status == "fail", verdict.message
    assert "the output sent back is not the one the call returned" in verdict.message


def test_the_checked_calls_are_chosen_after_the_batch_and_vary():
    found = evaluator("kb-relu")
    draws = {tuple(found._chosen(200, last=3)) for _ in range(5)}
    assert len(draws) > 1  # not from --seed: the worker cannot recompute them
    for chosen in draws:
        assert {197, 198, 199} <= set(chosen) and len(chosen) == 3 + 20  # a tenth of 200
    # a set per call: the last call, and a tenth more
    assert all(199 in c and len(c) == 21 for c in {tuple(found._chosen(200, last=1))})


# --- a new input set for every timed call ---------------------------------------------------


def test_answers_remembered_by_content_are_never_reused(as_h200):
    # 20 ms of work per distinct input set, repeats served from a cache keyed by 16 sampled
    # values: with a new set per timed call, every call pays for its work.
    found = timed_evaluator(PROBLEMS["kb-relu"], max_time_s=0.2)
    assert found.fresh == {"default": True}
    verdict = found.evaluate(EVAL / "cheats/memoises_content.py")
    assert verdict.status == "pass", verdict.message  # every answer it returns is right
    [timed] = verdict.timings
    assert timed.solution_ms >= 18.0, timed  # its work, not the cache's microseconds
    assert not any("rotate through" in n for n in verdict.notes), verdict.notes


def test_no_call_can_do_the_work_of_later_ones(as_h200):
    # The cheat looks for the batch's seeds in the loop's frame to do every call's work in the
    # first call (20 ms a set). Each seed is handed over only when its call comes, so every
    # call does its own work: the median, not just the mean, is the work's.
    found = timed_evaluator(PROBLEMS["kb-relu"], max_time_s=0.2)
    verdict = found.evaluate(EVAL / "cheats/precomputes_the_batch.py")
    assert verdict.status == "pass", verdict.message  # every answer it returns is right
    [timed] = verdict.timings
    assert timed.solution_ms >= 18.0, timed
    [record] = verdict.records
    assert record["stats"]["median"] >= 18.0


def test_a_seed_asked_for_out_of_turn_fails_the_solution(as_h200):
    found = timed_evaluator(PROBLEMS["kb-relu"])
    verdict = found.evaluate(EVAL / "checks/asks_for_seeds_ahead.py")
    assert verdict.status == "fail", verdict.message
    assert "broke the timed calls' protocol: it asked for seed 5 out of turn" in verdict.message


def test_seeds_are_handed_over_one_call_at_a_time_against_the_last_fingerprint():
    from kernelab.evaluate.timed_calls import Streamed, fingerprint, run_calls

    asked = []

    def ask(index, printed):
        asked.append((index, printed))
        return 100 + index

    def make(seed):
        torch.manual_seed(seed)
        return [torch.randn(4, 8)]

    _, outputs, prints = run_calls(
        lambda data: data[0] * 2, Streamed(make, ask), buffers=set(), calls=3, mode="hot"
    )
    # one seed a call, each asked for after the previous call's output was fingerprinted
    assert asked == [(0, None), (1, prints[0]), (2, prints[1])]
    assert prints == [fingerprint(out) for out in outputs]
    assert torch.equal(outputs[2], make(102)[0] * 2)
    with pytest.raises(ValueError, match="fingerprints"):
        run_calls(lambda d: d, Streamed(make, ask), buffers=set(), calls=2, keep=False)


def test_each_timed_call_gets_a_set_of_its_own_at_the_same_addresses():
    from kernelab.evaluate.timed_calls import Fresh, run_calls

    def make(seed):
        torch.manual_seed(seed)
        return [torch.randn(4, 8)]

    seen = []

    def call(data):
        seen.append((data[0].data_ptr(), data[0].clone()))
        return data[0] * 2

    _, outputs, prints = run_calls(
        call, Fresh(make, [11, 12, 13, 11]), buffers=set(), calls=4, mode="hot"
    )
    assert prints[0] == prints[3] != prints[1]  # each output's fingerprint, taken in the loop
    assert len({pointer for pointer, _ in seen}) == 1  # one tree of tensors for every call
    values = [value for _, value in seen]
    assert not torch.equal(values[0], values[1]) and not torch.equal(values[1], values[2])
    assert torch.equal(values[0], values[3])  # the seed alone decides the set
    assert torch.equal(values[1], make(12)[0])
    assert all(torch.equal(out, value * 2) for out, value in zip(outputs, values, strict=True))
    with pytest.raises(ValueError, match="5 calls need 5 seeds"):
        run_calls(call, Fresh(make, [1, 2]), buffers=set(), calls=5, mode="hot")


def _relu_variant(folder: Path, name: str, inputs: str) -> Path:
    problem = folder / f"{name}.py"
    problem.write_text(
        (KB / "relu.py").read_text().replace("return [torch.randn(batch_size, dim)]", inputs)
    )
    return problem


def test_a_generator_that_ignores_its_seed_gets_the_pool_and_a_note(as_h200, tmp_path):
    # Python's own random module is not seeded by the judge: two sets from one seed differ.
    problem = _relu_variant(
        tmp_path, "relu_unseeded",
        "import random\n    return [torch.randn(batch_size, dim) + random.random()]",
    )  # fmt: skip
    found = timed_evaluator(problem)
    assert found.fresh == {"default": False}
    verdict = found.evaluate(KB / "solutions/relu/correct/model_new.py")
    assert verdict.status == "pass", verdict.message
    [note] = [n for n in verdict.notes if "rotate through" in n]
    assert "the generator gives different inputs for the same seed" in note
    assert "an answer remembered by the inputs' content is not caught there" in note


def test_a_slow_generator_gets_the_pool_and_a_note(as_h200, monkeypatch):
    import kernelab.evaluate.evaluator as evaluator_module

    monkeypatch.setattr(evaluator_module, "FRESH_MAKE_MAX_MS", 0.0)
    found = timed_evaluator(PROBLEMS["kb-relu"])
    assert found.fresh == {"default": False}
    assert any("making one set takes" in n and "(more than 0)" in n for n in found.notes)
    verdict = found.evaluate(EVAL / "cheats/memoises_content.py")
    assert verdict.status == "pass", verdict.message
    [timed] = verdict.timings
    assert timed.solution_ms < 18.0  # what the rotation lets through, as the note says


def test_a_wrong_answer_on_a_fresh_set_is_caught_against_that_sets_reference(as_h200):
    found = timed_evaluator(PROBLEMS["kb-relu"])
    verdict = found.evaluate(EVAL / "cheats/memoises_pointer.py")
    assert verdict.status == "fail", verdict.message
    assert "(its own input set, seed " in verdict.message, verdict.message


def test_fingerprints_follow_values_not_layout():
    from kernelab.evaluate import digest
    from kernelab.evaluate.timed_calls import fingerprint

    x = torch.randn(64, 32)
    assert fingerprint(x) == fingerprint(x.t().contiguous().t())  # same values, new strides
    flipped = x.clone()
    flipped.view(torch.int32)[5, 7] ^= 1  # one bit of one element
    assert fingerprint(flipped) != fingerprint(x)
    assert fingerprint(x)[1] == f" torch.float32[64, 32]:{digest.host_digest(x)}"  # BLAKE2b
    assert fingerprint([x, 3]) != fingerprint([x, 4])
    assert fingerprint(torch.empty(2, device="meta")) != fingerprint(torch.zeros(2))


def test_an_exception_while_judging_is_that_solutions_fail(monkeypatch):
    found = evaluator("kb-relu")

    def broken(worker, verdict):
        raise RuntimeError("the comparison broke")

    monkeypatch.setattr(found, "_judge_in", broken)
    verdict = found.evaluate(KB / "solutions/relu/correct/model_new.py")
    assert verdict.status == "fail"
    assert verdict.message == "judging it raised RuntimeError: the comparison broke"
