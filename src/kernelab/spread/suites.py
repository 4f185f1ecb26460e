"""`kernelab eval --suite DIR --gpus N`: the suite of kernelab.evaluate.suite, one task per
(problem, solution) spread over GPUs, with the same result as judging it on one.

On each GPU the worker judges a solution exactly as the local suite does: the problem set
up through the same judge (references, then baselines on this card), the solution in a
worker process of its own behind the same wall. A worker keeps the last problem it set up,
so the solutions of one problem that land on the same GPU share one set-up, as they do on
one GPU; the speedups in a verdict always divide times taken on the card that judged it.

Every finished task is written to the run's task folder at once (spread.plan.TaskBook):
Ctrl-C or a lost cluster leaves them, and `--resume` judges only the rest.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from pathlib import Path

from kernelab.evaluate.judge import ProblemRun, judge_solution, open_problem
from kernelab.evaluate.problem import describe_exception
from kernelab.evaluate.suite import discover
from kernelab.spread.plan import Task, task_key


class SuiteRunner:
    """One GPU's judge: (problem, solution) payloads in, the local suite's pieces out."""

    def __init__(self, *, device: str, scale: float, options, timeout: float, protect: list):
        self.device, self.scale, self.options = device, scale, options
        self.timeout, self.protect = timeout, protect
        self.problem: str | None = None  # the problem set up now
        self.evaluator = None
        self.outcome: ProblemRun | None = None

    def device_name(self) -> str:
        import torch

        if self.device.startswith("cuda") and torch.cuda.is_available():
            return torch.cuda.get_device_name(0)
        return self.device

    def _open(self, problem: str, solution: str) -> None:
        self.evaluator = self.outcome = None  # the previous problem's tensors go first
        if self.device.startswith("cuda"):
            import torch

            torch.cuda.empty_cache()
        try:
            self.evaluator, self.outcome = open_problem(
                problem, [solution], device=self.device, scale=self.scale,
                options=self.options, protect=self.protect,
            )  # fmt: skip
        except Exception as exc:  # as in the local suite: this problem's failure alone
            self.outcome = ProblemRun(
                verdicts={}, setup_error=f"judging it raised {describe_exception(exc)}"
            )
        self.problem = problem

    def run(self, payload: dict) -> dict:
        problem, solution = payload["problem"], payload["solution"]
        fresh = problem != self.problem
        if fresh:
            self._open(problem, solution)
        outcome = self.outcome
        if self.evaluator is not None:
            verdict = judge_solution(self.evaluator, solution, timeout=self.timeout)
        elif outcome.verdicts:  # skipped: the same verdict for every solution
            verdict = {**next(iter(outcome.verdicts.values())), "solution": solution}
        else:
            verdict = None  # the problem could not be set up: setup_error says why
        return {
            "verdict": verdict,
            "setup_error": outcome.setup_error,
            "skipped": outcome.skipped,
            "baselines": outcome.baselines,
            "notes": outcome.notes,
            # measured once per GPU that set the problem up: kept once
            "baseline_records": outcome.baseline_records if fresh else [],
        }


def plan_suite(directory) -> tuple[list, list[Task]]:
    """discover()'s problems and one task per (problem, solution), with absolute paths so
    that a worker on another node (a shared file system) or in another folder finds them."""
    found = discover(directory)
    tasks = []
    for problem, solutions in found:
        for solution in solutions:
            where = (str(Path(problem).resolve()), str(Path(solution).resolve()))
            tasks.append(Task(
                key=task_key("suite", *where), group=where[0],
                label=f"{Path(problem).name} <- {'/'.join(Path(solution).parts[-2:])}",
                payload={"problem": where[0], "solution": where[1]},
            ))  # fmt: skip
    return found, tasks


def suite_fingerprint(directory, *, device, scale, options, timeout) -> dict:
    return {
        "kind": "suite",
        "directory": str(Path(directory).resolve()),
        "device": device,
        "scale": scale,
        "options": dataclasses.asdict(options),
        "timeout": timeout,
    }


def merge_suite(
    directory, found, tasks: list[Task], records: dict, *, device: str, scale: float
) -> dict:
    """run_suite's result from the task records (key -> record), problem by problem in
    discovery order; a task that failed every attempt is an "error" verdict saying why."""
    by_key = {(t.payload["problem"], t.payload["solution"]): t.key for t in tasks}
    rows, problems, timing_records = [], [], []
    for problem, solutions in found:
        entry = {"problem": str(problem), "solutions": len(solutions)}
        if not solutions:
            entry["setup_error"] = "no solutions found by the naming rule"
            problems.append(entry)
            continue
        first = None
        for solution in solutions:
            key = by_key[(str(Path(problem).resolve()), str(Path(solution).resolve()))]
            record = records.get(key) or {"failed": "not run", "attempts": []}
            result = record.get("result")
            if result is not None and first is None:
                first = result
            verdict = result.get("verdict") if result else None
            if verdict is None:
                why = record.get("failed") or (result or {}).get("setup_error") or "no verdict"
                verdict = {"problem": Path(problem).stem, "format": "", "status": "error",
                           "message": why}  # fmt: skip
            verdict = {**verdict, "solution": str(solution)}
            if result is not None:
                verdict["ran_on"] = record.get("ran_on")
                timing_records.extend(result.get("baseline_records", []))
            if record.get("attempts"):
                verdict["attempts"] = record["attempts"]
            rows.append(verdict)
            timing_records.extend(verdict.get("records", []))
        first = first or {}
        entry.update(
            setup_error=first.get("setup_error"), skipped=first.get("skipped"),
            baselines=first.get("baselines"), notes=first.get("notes", []),
        )  # fmt: skip
        problems.append(entry)
    return {
        "directory": str(directory),
        "device": device,
        "scale": scale,
        "problems": problems,
        "rows": rows,
        "summary": dict(Counter(row["status"] for row in rows)),
        "records": timing_records,
    }


def spread_suite(
    directory,
    *,
    device: str,
    scale: float,
    options,
    timeout: float,
    gpus: int | None,
    address: str | None,
    resume: bool = False,
    folder=None,
    runner_cls=SuiteRunner,
    deadline_s: float | None = None,
    show_progress: bool = True,
) -> dict:
    """The suite judged over `gpus` GPUs of a Ray cluster (None: every GPU it has), as
    run_suite's result plus "spread": how many GPUs, tasks, resumed ones, the task folder.
    A task is cut after `deadline_s` (default: twice `timeout`, one for the problem's
    set-up and one for the solution)."""  # fmt: skip
    from kernelab.spread.engine import spread_tasks
    from kernelab.spread.progress import GpuBars

    found, tasks = plan_suite(directory)
    fingerprint = suite_fingerprint(
        directory, device=device, scale=scale, options=options, timeout=timeout
    )

    def succeeded(record: dict) -> bool:
        verdict = (record.get("result") or {}).get("verdict")
        return bool(verdict) and verdict.get("status") in ("pass", "skipped")

    records, spread = spread_tasks(
        tasks, fingerprint, address=address, gpus=gpus, resume=resume, folder=folder,
        runner_cls=runner_cls,
        runner_kwargs={"device": device, "scale": scale, "options": options,
                       "timeout": timeout, "protect": [str(Path(directory).resolve())]},
        deadline_s=deadline_s or 2 * timeout, succeeded=succeeded,
        title=Path(directory).name, unit="task", bars=GpuBars if show_progress else None,
        announce_folder=True,
    )  # fmt: skip
    result = merge_suite(directory, found, tasks, records, device=device, scale=scale)
    result["spread"] = spread
    return result
