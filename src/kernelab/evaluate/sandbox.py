"""Each problem in its own process, with a time limit: a crash or a hang is a verdict.

The parent writes a job (problem, solutions, options) to a file and starts
`python -m kernelab.evaluate.sandbox JOB` in a new session. The worker loads the problem,
computes its references and baselines, then evaluates the solutions one after another,
appending one JSON line per event to the job's events file:

    {"event": "ready", ...}                 setup done (references, baselines)
    {"event": "setup_failed", "message"}    the problem itself could not be evaluated
    {"event": "start", "solution": P}       P is being evaluated: its clock starts
    {"event": "verdict", "solution": P, "verdict": {...}}

The worker's stdout and stderr (the candidate's prints, faulthandler's report of a
segfault) go to a log file, never to the parent's output. The parent watches the events:
setup gets max(timeout, SETUP_SECONDS), each solution `timeout` seconds from its start.
When the limit passes the whole process group is killed and the solution is reported as a
timeout; when the worker dies without a verdict the solution is reported as a crash, with
the exit code or signal and the log's last words. A fresh worker then takes the solutions
left, reusing the baselines already measured.

The solutions of one problem share its worker: the references are computed before any of
them is imported, but a solution that patches torch could affect those evaluated after it.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SETUP_SECONDS = 120.0
POLL_SECONDS = 0.05
LOG_TAIL_CHARS = 400


@dataclasses.dataclass
class ProblemRun:
    """What the workers reported for one problem."""

    verdicts: dict  # solution path -> verdict dict
    setup_error: str | None = None  # the problem could not be set up: why
    baselines: dict | None = None
    baseline_records: list = dataclasses.field(default_factory=list)
    notes: list = dataclasses.field(default_factory=list)


def _placeholder(problem: str, solution: str, status: str, message: str) -> dict:
    from kernelab.evaluate.formats import detect_format
    from kernelab.evaluate.verdict import Verdict

    return Verdict(problem=Path(problem).stem, format=detect_format(problem), solution=solution,
                   status=status, message=message).to_dict()  # fmt: skip


def _log_words(log_path: Path, prefer: str | None = None) -> str:
    """The last meaningful lines of a worker's log, on one line; after a fatal error, the
    error and the innermost frame in the file `prefer` (else the innermost frame)."""
    try:
        text = log_path.read_text(errors="replace")
    except OSError:
        return ""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    fatal = next((i for i, line in enumerate(lines) if line.startswith("Fatal Python error")), None)
    if fatal is not None:
        frames = [line for line in lines[fatal + 1 :] if line.startswith("File ")]
        mine = [line for line in frames if prefer and Path(prefer).name in line]
        where = (mine or frames or [""])[0]
        words = f"{lines[fatal]} {where}".strip()
    else:
        words = " | ".join(lines[-2:])
    return words[-LOG_TAIL_CHARS:]


def _exit_description(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


def _crash_message(code: int | None, log_words: str) -> str:
    if code == 0:
        head = "the process exited (code 0) before a verdict: the solution ended it"
    else:
        head = f"the process died while evaluating it ({_exit_description(code or 0)})"
    return f"{head}: {log_words}" if log_words else head


def _read_events(path: Path, offset: int) -> tuple[list[dict], int]:
    """Complete JSON lines appended since `offset`; the new offset."""
    try:
        with path.open("rb") as handle:
            handle.seek(offset)
            chunk = handle.read()
    except FileNotFoundError:
        return [], offset
    end = chunk.rfind(b"\n") + 1
    events = [json.loads(line) for line in chunk[:end].splitlines() if line.strip()]
    return events, offset + end


def _run_worker(job: dict, workdir: Path, timeout: float, on_event):
    """Run one worker until it ends or overruns; return (how, exit code, the solution being
    evaluated or None, the log's path): how is "done", "died" or "timeout"."""
    job_path = workdir / f"job-{time.monotonic_ns()}.json"
    events_path = job_path.with_suffix(".events")
    log_path = job_path.with_suffix(".log")
    job = {**job, "events": str(events_path)}
    job_path.write_text(json.dumps(job))
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "kernelab.evaluate.sandbox", str(job_path)],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=env,
        )
    offset, current = 0, None
    deadline = time.monotonic() + max(timeout, SETUP_SECONDS)
    how = "done"
    while True:
        code = process.poll()
        events, offset = _read_events(events_path, offset)
        for event in events:
            if event["event"] == "start":
                current = event["solution"]
                deadline = time.monotonic() + timeout
            elif event["event"] == "verdict":
                current = None
                deadline = time.monotonic() + timeout
            on_event(event)
        if code is not None:
            how = "done" if current is None and code == 0 else "died"
            break
        if time.monotonic() > deadline:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            how = "timeout"
            break
        time.sleep(POLL_SECONDS)
    return how, process.returncode, current, log_path


def run_problem(
    problem: str | Path,
    solutions: list[str | Path],
    *,
    device: str,
    scale: float,
    options,
    timeout: float,
) -> ProblemRun:
    """Evaluate `solutions` of `problem` in worker processes; every solution gets a verdict."""
    from kernelab.output import note

    remaining = [str(s) for s in solutions]
    outcome = ProblemRun(verdicts={})
    with tempfile.TemporaryDirectory(prefix="kernelab-eval-") as folder:
        workdir = Path(folder)
        while remaining:
            ready = False

            def on_event(event):
                nonlocal ready
                kind = event["event"]
                if kind == "ready":
                    ready = True
                    outcome.baselines = event.get("baselines") or outcome.baselines
                    if not outcome.baseline_records:
                        outcome.baseline_records = event.get("baseline_records", [])
                    outcome.notes = event.get("notes", [])
                elif kind == "setup_failed":
                    outcome.setup_error = event["message"]
                elif kind == "start":
                    note(f"evaluating {event['solution']}")
                elif kind == "verdict":
                    outcome.verdicts[event["solution"]] = event["verdict"]
                    remaining.remove(event["solution"])

            job = {
                "problem": str(problem),
                "solutions": list(remaining),
                "device": device,
                "scale": scale,
                "options": dataclasses.asdict(options),
                "baselines": outcome.baselines,
            }
            how, code, current, log_path = _run_worker(job, workdir, timeout, on_event)
            if outcome.setup_error is not None:
                break
            log_words = _log_words(log_path, prefer=current)
            if not ready:
                limit = max(timeout, SETUP_SECONDS)
                outcome.setup_error = (
                    f"setting up the problem timed out after {limit:g} s"
                    if how == "timeout"
                    else f"the worker died while setting up the problem ({_exit_description(code)}): {log_words}"
                )
                break
            if current is not None:
                if how == "timeout":
                    verdict = _placeholder(
                        problem, current, "timeout",
                        f"no verdict after {timeout:g} s: the solution hangs or is far too slow",
                    )  # fmt: skip
                else:
                    verdict = _placeholder(
                        problem, current, "crash", _crash_message(code, log_words)
                    )
                outcome.verdicts[current] = verdict
                remaining.remove(current)
            elif how != "done" and remaining:
                outcome.setup_error = (
                    f"the worker ended unexpectedly ({_exit_description(code)}): {log_words}"
                )
                break
    return outcome


# --- the worker --------------------------------------------------------------------------


def _worker(job_path: str) -> int:
    import faulthandler

    faulthandler.enable()
    job = json.loads(Path(job_path).read_text())
    events = open(job["events"], "a")  # noqa: SIM115 - kept open for the worker's life

    def emit(event: dict) -> None:
        events.write(json.dumps(event) + "\n")
        events.flush()
        os.fsync(events.fileno())

    from kernelab.errors import KernelabError
    from kernelab.evaluate.formats import describe_exception, load_problem
    from kernelab.evaluate.verdict import Evaluator, Options

    try:
        problem = load_problem(job["problem"], device=job["device"], scale=job["scale"])
        evaluator = Evaluator(problem, Options(**job["options"]))
        if job.get("baselines"):
            evaluator.baselines = job["baselines"]
        evaluator.prepare()
        evaluator.measure_baselines()
    except KernelabError as exc:
        emit({"event": "setup_failed", "message": str(exc)})
        return 0
    except Exception as exc:
        emit(
            {
                "event": "setup_failed",
                "message": f"setting up the problem raised {describe_exception(exc)}",
            }
        )
        return 0
    emit(
        {
            "event": "ready",
            "baselines": evaluator.baselines,
            "baseline_records": evaluator.baseline_records,
            "notes": evaluator.notes,
        }
    )
    for solution in job["solutions"]:
        emit({"event": "start", "solution": solution})
        try:
            verdict = evaluator.evaluate(solution).to_dict()
        except KernelabError as exc:
            verdict = _placeholder(job["problem"], solution, "error", str(exc))
        except Exception as exc:
            verdict = _placeholder(
                job["problem"], solution, "fail",
                f"evaluating it raised {describe_exception(exc)}",
            )  # fmt: skip
        verdict["format"] = problem.format
        verdict["problem"] = problem.name
        emit({"event": "verdict", "solution": solution, "verdict": verdict})
    return 0


if __name__ == "__main__":
    sys.exit(_worker(sys.argv[1]))
