"""One problem judged: the references and baselines once, then every solution in a worker of
its own. Whatever happens while one solution is judged becomes that solution's verdict; the
others are judged all the same. A problem too large for the device is skipped, with what it
needs and what the device has (kernelab.evaluate.footprint), never a set-up traceback."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from kernelab.errors import KernelabError
from kernelab.evaluate.evaluator import Evaluator
from kernelab.evaluate.footprint import GB, DoesNotFit, available_bytes, is_out_of_memory
from kernelab.evaluate.formats import describe_exception, load_problem
from kernelab.evaluate.verdict import Verdict
from kernelab.output import note


@dataclasses.dataclass
class ProblemRun:
    """What the judge found for one problem."""

    verdicts: dict  # solution path -> verdict dict
    setup_error: str | None = None  # the problem could not be set up: why
    skipped: str | None = None  # the problem does not fit the device: "skipped: needs N GB, ..."
    baselines: dict | None = None
    baseline_records: list = dataclasses.field(default_factory=list)
    notes: list = dataclasses.field(default_factory=list)


def run_problem(
    problem: str | Path,
    solutions: list[str | Path],
    *,
    device: str,
    scale: float,
    options,
    timeout: float,
    protect=(),
) -> ProblemRun:
    """Judge `solutions` of `problem`, each in its own worker; every solution gets a verdict
    unless the problem itself cannot be set up (then setup_error says why). `protect`: more
    paths no worker may write (a suite's directory)."""
    evaluator, outcome = open_problem(
        problem, solutions, device=device, scale=scale, options=options, protect=protect
    )
    if evaluator is None:
        return outcome
    for solution in solutions:
        note(f"evaluating {solution}")
        outcome.verdicts[str(solution)] = judge_solution(evaluator, solution, timeout=timeout)
    return outcome


def open_problem(
    problem: str | Path,
    solutions: list[str | Path],
    *,
    device: str,
    scale: float,
    options,
    protect=(),
) -> tuple[Evaluator | None, ProblemRun]:
    """The problem set up once (references, baselines) for judging its solutions: the
    Evaluator and a ProblemRun without verdicts yet. The Evaluator is None when the problem
    cannot be set up (setup_error says why) or is skipped (every one of `solutions` then
    has its "skipped" verdict)."""
    outcome = ProblemRun(verdicts={})
    evaluator = None
    try:
        evaluator = Evaluator(load_problem(problem, device=device, scale=scale), options)
        evaluator.protect = list(protect)
        evaluator.prepare()
        evaluator.measure_baselines()
    except DoesNotFit as exc:
        return None, _skipped(outcome, evaluator, problem, solutions, str(exc), exc.plan)
    except KernelabError as exc:
        outcome.setup_error = str(exc)
        return None, outcome
    except Exception as exc:
        if is_out_of_memory(exc):  # past what the plan foresaw
            message = _out_of_memory(evaluator, device, exc)
            return None, _skipped(outcome, evaluator, problem, solutions, message)
        outcome.setup_error = f"setting up the problem raised {describe_exception(exc)}"
        return None, outcome
    outcome.baselines = evaluator.baselines
    outcome.baseline_records = evaluator.baseline_records
    outcome.notes = evaluator.notes
    return evaluator, outcome


def judge_solution(evaluator: Evaluator, solution: str | Path, *, timeout: float) -> dict:
    """One solution's verdict, as a dict, from a prepared Evaluator; the judge's own failure
    on it is its verdict too."""
    try:
        verdict = evaluator.evaluate(solution, timeout=timeout)
    except Exception as exc:  # the judge's own failure on this solution: its verdict
        verdict = Verdict(
            problem=evaluator.problem.name, format=evaluator.problem.format,
            solution=str(solution), status="fail",
            message=f"the judge could not judge it: {describe_exception(exc)}",
            device=str(evaluator.device),
        )  # fmt: skip
    return verdict.to_dict()


def _out_of_memory(evaluator: Evaluator | None, device: str, exc: BaseException) -> str:
    """The skip message for an allocation that failed although the plan said it would fit
    (the plan is an estimate: the allocator's rounding, a reference's temporaries), or
    before there was a plan (the problem's weights)."""
    plan = evaluator.memory if evaluator else None
    free, what = available_bytes(evaluator.device if evaluator else device)
    has = f"{free / GB:.1f} GB {what} now" if free is not None else what
    planned = f"more than the {plan.need_bytes / GB:.1f} GB planned" if plan else "more"
    card = "card" if "cuda" in str(evaluator.device if evaluator else device) else "machine"
    return (f"skipped: needs {planned}, {card} has {has}: setting up ran out of memory "
            f"({describe_exception(exc)[:120]})")  # fmt: skip


def _skipped(
    outcome: ProblemRun, evaluator, problem, solutions, message: str, plan: dict | None = None
) -> ProblemRun:
    """Every solution's verdict "skipped", with the one message that says why and the
    memory plan behind it."""
    if plan is None and evaluator is not None and evaluator.memory is not None:
        plan = evaluator.memory.to_dict()
    outcome.skipped = message
    for solution in solutions:
        outcome.verdicts[str(solution)] = Verdict(
            problem=evaluator.problem.name if evaluator else Path(problem).stem,
            format=evaluator.problem.format if evaluator else "",
            solution=str(solution), status="skipped", message=message,
            device=str(evaluator.device) if evaluator else "",
            memory=plan or {},
        ).to_dict()  # fmt: skip
    if evaluator is not None:
        outcome.notes = evaluator.notes
    return outcome
