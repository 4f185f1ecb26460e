"""`kernelab eval --suite DIR`: every problem in a directory, with its solutions.

The naming rule, one level deep in DIR:

  GPU MODE     a directory P with reference.py. Its solutions: P/submission.py and every
               .py file under P/solutions/ (GPU MODE's own solutions/correct/ and
               solutions/wrong/ layout).
  KernelBench  a file foo.py defining `class Model` and get_inputs(). Its solutions:
               foo_solution*.py beside it and every .py file under solutions/foo/.

Problems are judged one after another, each solution in a worker process of its own
(kernelab.evaluate.sandbox), so that timings never share the GPU. The suite's directory is
read-only to every worker, so that no solution rewrites a problem judged after it.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from kernelab.errors import KernelabError
from kernelab.evaluate.formats import detect_format
from kernelab.evaluate.judge import ProblemRun, run_problem
from kernelab.evaluate.problem import describe_exception
from kernelab.output import note


def _python_files(folder: Path) -> list[Path]:
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.rglob("*.py") if "__pycache__" not in p.parts)


def discover(directory: str | Path) -> list[tuple[Path, list[Path]]]:
    """(problem, solutions) for every problem in `directory`, by the naming rule above."""
    directory = Path(directory)
    if not directory.is_dir():
        raise KernelabError(f"--suite needs a directory; {directory} is not one")
    found = []
    for entry in sorted(directory.iterdir()):
        if entry.is_dir() and (entry / "reference.py").is_file():
            submission = [entry / "submission.py"] if (entry / "submission.py").is_file() else []
            found.append((entry, submission + _python_files(entry / "solutions")))
        elif entry.suffix == ".py" and "_solution" not in entry.stem:
            try:
                if detect_format(entry) != "kernelbench":
                    continue
            except KernelabError:
                continue  # a helper module (utils.py), not a problem
            siblings = sorted(directory.glob(f"{entry.stem}_solution*.py"))
            found.append((entry, siblings + _python_files(directory / "solutions" / entry.stem)))
    if not found:
        raise KernelabError(
            f"no problems in {directory}: expected GPU MODE problem directories (with "
            "reference.py) or KernelBench problem files (with class Model)"
        )
    return found


def run_suite(directory, *, device: str, scale: float, options, timeout: float) -> dict:
    """Every (problem, solution) verdict in `directory`, problem by problem."""
    rows, problems, records = [], [], []
    for problem, solutions in discover(directory):
        note(f"problem {problem.name}: {len(solutions)} solution(s)")
        entry = {"problem": str(problem), "solutions": len(solutions)}
        if not solutions:
            entry["setup_error"] = "no solutions found by the naming rule"
            problems.append(entry)
            continue
        try:
            outcome = run_problem(
                problem, solutions, device=device, scale=scale, options=options,
                timeout=timeout, protect=[str(directory)],
            )  # fmt: skip
        except Exception as exc:  # this problem's failure is not the suite's
            outcome = ProblemRun(
                verdicts={}, setup_error=f"judging it raised {describe_exception(exc)}"
            )
        entry.update(
            setup_error=outcome.setup_error, skipped=outcome.skipped,
            baselines=outcome.baselines, notes=outcome.notes,
        )  # fmt: skip
        problems.append(entry)
        records.extend(outcome.baseline_records)
        for solution in solutions:
            verdict = outcome.verdicts.get(str(solution))
            if verdict is None:  # the problem itself could not be set up
                verdict = {
                    "problem": problem.stem,
                    "format": "",
                    "solution": str(solution),
                    "status": "error",
                    "message": outcome.setup_error or "no verdict",
                }
            rows.append(verdict)
            records.extend(verdict.get("records", []))
    summary = dict(Counter(row["status"] for row in rows))
    return {
        "directory": str(directory),
        "device": device,
        "scale": scale,
        "problems": problems,
        "rows": rows,
        "summary": summary,
        "records": records,
    }
