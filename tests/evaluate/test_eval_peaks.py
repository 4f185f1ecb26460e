"""The memory plan (kernelab.evaluate.footprint) is an upper bound of what the judge holds:
each step of judging, measured on the host (footprint.LivePeak counts the bytes of the
storages torch ops make while it is on; the whole judge's resident set from /proc), stays
within the part of the plan that counts it. A problem of 1/16 KernelBench softmax size or a
few tensors of a few MiB stands in for one that fills a card."""

from __future__ import annotations

import gc
import re
from pathlib import Path

import pytest
import torch
from sized_problems import sized_softmax

from kernelab.evaluate import evaluator, footprint, trees
from kernelab.evaluate.evaluator import Evaluator
from kernelab.evaluate.footprint import LivePeak
from kernelab.evaluate.formats import load_problem
from kernelab.evaluate.timed_calls import Fresh, run_calls
from kernelab.evaluate.verdict import POOL_SETS, Options
from kernelab.harness import blocks

EVAL = Path(__file__).resolve().parents[1] / "fixtures" / "eval"
KB = EVAL / "kernelbench"
SOLUTION = KB / "solutions/softmax/correct/model_new.py"
BLOCK = 1 << 12  # elements a comparison takes at a time here: a few blocks per output


@pytest.fixture
def small_blocks(monkeypatch):
    monkeypatch.setattr(blocks, "CHECK_BLOCK", BLOCK)


@pytest.fixture
def as_h200(monkeypatch):
    import kernelab.harness.ceilings as ceilings
    from kernelab.harness.ceilings import DeviceIdentity

    identity = DeviceIdentity(0, "NVIDIA H200", "h200", None, (9, 0))
    monkeypatch.setattr(ceilings, "this_gpu", lambda command="kernelab": identity)
    monkeypatch.setattr(ceilings, "measured_ceilings_for", lambda spec, path=None: None)


def _prepared(problem_path: Path, *, timing: bool = False, fresh: bool = True) -> Evaluator:
    problem = load_problem(problem_path, device="cpu", scale=1.0)
    found = Evaluator(problem, Options(seeds=1, seed=5, compile=False, max_time_s=0.02,
                                       min_samples=3, repeat_calls=2))  # fmt: skip
    found.timing = timing  # the timed path on the host clock, as on a GPU
    if timing and fresh:
        evaluator.FRESH_MAKE_MAX_MS, saved = 1e9, evaluator.FRESH_MAKE_MAX_MS
        try:
            found.prepare()
        finally:
            evaluator.FRESH_MAKE_MAX_MS = saved
    else:
        found.prepare()
    return found


def _size(found: Evaluator) -> footprint.SetSize:
    return footprint.fake_set_size(found.problem, found.problem.timing_cases()[0])


def test_fake_tensors_give_the_peaks_of_making_a_set_as_the_real_run_has_them():
    problem = load_problem(KB / "softmax.py", device="cpu", scale=0.25)
    [case] = problem.tests
    size = footprint.fake_set_size(problem, case)
    # torch.randn(batch, dim) * 3.0: two tensors for a moment; softmax: its output alone
    assert (size.make, size.run) == (2 * size.inputs, size.output)
    with LivePeak() as made:
        data = problem.generate(case, 1)
    scratch = trees.clone(data)
    with LivePeak() as ran:
        problem.reference(scratch)
    assert (made.peak, ran.peak) == (size.make, size.run)


def test_a_storage_counts_until_it_is_freed_and_views_count_nothing():
    with LivePeak() as seen:
        x = torch.ones(1000)  # 4000 bytes
        view = x[10:].t()
        y = x * 2  # 8000 live
        del x, y
        z = view + 1  # x's storage lives on in the view, beside z's 3960 bytes
    assert (seen.peak, seen.live) == (8000, 7960)
    del view, z
    assert seen.live == 0


def test_a_baseline_holds_no_previous_output_while_the_next_set_is_made(tmp_path):
    found = _prepared(sized_softmax(tmp_path, 256, 1024))  # 1 MiB a tensor
    size = _size(found)
    [case] = found.problem.tests
    sets = Fresh(lambda seed: found.problem.generate(case, seed), list(range(5)))
    with LivePeak() as held:
        run_calls(found.problem.reference, sets, buffers=set(), calls=5, mode="hot", keep=False)
    # the call tree, and a set being made or the reference running (SetSize.transient)
    assert held.peak <= size.inputs + max(size.making, size.running)
    assert held.live == 0


def test_a_timed_batch_holds_what_the_plan_gives_the_worker(tmp_path):
    found = _prepared(sized_softmax(tmp_path, 256, 1024))
    size = _size(found)
    [case] = found.problem.tests
    sets = Fresh(lambda seed: found.problem.generate(case, seed), list(range(POOL_SETS)))
    with LivePeak() as held:
        _, outputs, _ = run_calls(found.problem.reference, sets, buffers=set(),
                                  calls=POOL_SETS, mode="hot")  # fmt: skip
    assert len(outputs) == POOL_SETS and held.peak <= size.batch(POOL_SETS)


def test_the_loops_own_cost_keeps_no_more_outputs_than_a_batch_would(tmp_path, as_h200):
    found = _prepared(sized_softmax(tmp_path, 256, 1024), timing=True)
    size = _size(found)
    found.memory.kept_output_bytes = POOL_SETS * size.output  # the plan's least
    found.loop_ms = {}
    with LivePeak() as held:
        found.measure_loops()
    # the call tree, the three kept copies, the fingerprint's scratch and a set being made:
    # once 50 copies were kept, whatever the plan
    assert held.peak <= size.batch(POOL_SETS) < 10 * size.output


def test_recognising_the_cost_keeps_nothing_the_reference_made(tmp_path):
    found = _prepared(sized_softmax(tmp_path, 256, 1024))
    [recheck] = found.rechecks.values()
    gc.collect()
    gc.disable()  # what a reference cycle holds stays held, as between collections
    try:
        for _ in range(3):  # (torch holds the arguments of a process's first mode call)
            with LivePeak() as held:
                found._cost(recheck)
        assert held.live == 0  # once the recogniser's record held every tensor it saw
    finally:
        gc.enable()


def test_making_a_set_holds_no_more_than_the_plan_says(tmp_path, small_blocks):
    found = _prepared(sized_softmax(tmp_path, 64, 1024))  # 16 blocks an output
    size = _size(found)
    [case] = found.problem.tests
    for buffers in (None, set()):  # at set-up (output buffers searched), and when checked
        with LivePeak() as held:
            expected = found._expect(case, 3, buffers=buffers)
        assert held.peak <= size.making_peak
        assert held.live == size.kept
        del expected


def test_judging_an_output_holds_blocks_not_float64_copies_of_it(tmp_path, small_blocks):
    found = _prepared(sized_softmax(tmp_path, 64, 1024))
    size = _size(found)
    [recheck] = found.rechecks.values()
    wrong = recheck.eager * 1.01
    for out in (recheck.eager.clone(), wrong, wrong.t().contiguous().t()):
        with LivePeak() as held:
            found._judge(out, recheck)
            found.problem.checker(trees.clone(recheck.data), out)
        # a copy of the inputs and the reference run for KernelBench's own allclose, and
        # the comparisons' blocks; once the output's float64 copy, a mask, its finite
        # elements and the reference's, and their difference, then allclose in float64
        assert held.peak <= size.inputs + size.running + size.blocks < 4 * size.output


def _resident() -> int:
    text = Path("/proc/self/status").read_text()
    return int(re.search(r"VmHWM:\s+(\d+)", text).group(1)) * 1024


def _reset_peak() -> None:
    Path("/proc/self/clear_refs").write_text("5")


def _returned_when_freed() -> None:
    """Every allocation of 1 MiB or more mapped on its own (glibc's M_MMAP_THRESHOLD, fixed),
    so that a freed tensor leaves the resident set at once and the peak is the tensors'."""
    import ctypes
    import ctypes.util

    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    if not libc.mallopt(-3, 1 << 20):  # M_MMAP_THRESHOLD
        raise OSError("mallopt refused")


@pytest.mark.parametrize("pool_sets", [1, 0])
def test_the_whole_judges_peak_is_within_its_plan(
    tmp_path, monkeypatch, as_h200, small_blocks, pool_sets
):
    """Set up and one solution judged, timed calls on the host clock with one pool set kept,
    or with a set per timed call (no pool: the re-check made again from its seed, each
    sampled call's set made again to check it): the judge's resident set grows by no more
    than the plan's need on this host (its sets, the transient and the shared pages of the
    inputs). Before, checking an output took ten outputs' worth beside its set and the
    loop's own cost fifty."""
    try:
        _reset_peak()
        _returned_when_freed()
    except (OSError, AttributeError):
        pytest.skip("the peak resident set cannot be measured here (/proc, glibc's mallopt)")
    problem = sized_softmax(tmp_path, 1024, 8192)  # 32 MiB a tensor
    loaded = load_problem(problem, device="cpu", scale=1.0)
    size = footprint.fake_set_size(loaded, loaded.tests[0])
    need = footprint.need_bytes([size], [size], pool_sets, on_gpu=False, min_kept=POOL_SETS)
    free = int((need + 1000) / footprint.MEMORY_SHARE)
    monkeypatch.setattr(evaluator, "available_bytes", lambda device: (free, "available RAM"))
    # with a pool, no set is made fast enough for one per call; without, every one is
    monkeypatch.setattr(evaluator, "FRESH_MAKE_MAX_MS", -1.0 if pool_sets else 1e9)
    options = Options(seeds=1, seed=5, compile=False, max_time_s=0.02, min_samples=3)
    found = Evaluator(load_problem(problem, device="cpu", scale=1.0), options)
    found.timing = True
    gc.collect()
    base = Path("/proc/self/status").read_text()
    base = int(re.search(r"VmRSS:\s+(\d+)", base).group(1)) * 1024
    _reset_peak()
    found.prepare()
    assert found.memory.need_bytes == need and found.memory.pool_sets == pool_sets
    assert found.fresh == {"default": not pool_sets}
    judged = found.evaluate(SOLUTION)
    assert judged.status == "pass", judged.message
    grown = _resident() - base
    slack = size.inputs // 2  # the interpreter's own objects (the plan counts tensors)
    assert grown <= need + slack, (grown / size.inputs, need / size.inputs)
