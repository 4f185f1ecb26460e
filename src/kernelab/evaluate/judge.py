"""One problem judged: the references and baselines once, then every solution in a worker of
its own. Whatever happens while one solution is judged becomes that solution's verdict; the
others are judged all the same."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from kernelab.errors import KernelabError
from kernelab.evaluate.formats import describe_exception, load_problem
from kernelab.evaluate.verdict import Evaluator, Verdict
from kernelab.output import note


@dataclasses.dataclass
class ProblemRun:
    """What the judge found for one problem."""

    verdicts: dict  # solution path -> verdict dict
    setup_error: str | None = None  # the problem could not be set up: why
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
    outcome = ProblemRun(verdicts={})
    try:
        evaluator = Evaluator(load_problem(problem, device=device, scale=scale), options)
        evaluator.protect = list(protect)
        evaluator.prepare()
        evaluator.measure_baselines()
    except KernelabError as exc:
        outcome.setup_error = str(exc)
        return outcome
    except Exception as exc:
        outcome.setup_error = f"setting up the problem raised {describe_exception(exc)}"
        return outcome
    outcome.baselines = evaluator.baselines
    outcome.baseline_records = evaluator.baseline_records
    outcome.notes = evaluator.notes
    for solution in solutions:
        note(f"evaluating {solution}")
        try:
            verdict = evaluator.evaluate(solution, timeout=timeout)
        except Exception as exc:  # the judge's own failure on this solution: its verdict
            verdict = Verdict(
                problem=evaluator.problem.name, format=evaluator.problem.format,
                solution=str(solution), status="fail",
                message=f"the judge could not judge it: {describe_exception(exc)}",
                device=str(evaluator.device),
            )  # fmt: skip
        outcome.verdicts[str(solution)] = verdict.to_dict()
    return outcome
