"""The judge and its workers: the solution runs in a process of its own, the verdict never does.

The judge is the process that calls run_problem (the `kernelab eval` command itself). It
loads the problem, generates every input, computes the references and times the baselines;
it never imports a solution. For each solution it starts a fresh worker,
`python -m kernelab.evaluate.worker`, in a new session, talking over two pipes that only the
two of them hold (kernelab.evaluate.channel): the judge sends inputs, the worker sends back
what the solution made of them, as tensors, and the judge compares them with its own torch.
Nothing the worker writes is a verdict, and nothing the worker can reach (a file, a patched
function, the stack of its timer) is read as one.

Limits: the worker's setup (importing torch, loading the problem) gets max(timeout,
SETUP_SECONDS); from then on the solution has `timeout` seconds in all. When they pass, or
when the judge is interrupted (Ctrl-C) or fails, the worker's whole process group is killed.
When the worker dies, the verdict is a crash with the exit code or signal and its log's last
words. The log (the solution's prints, faulthandler's report of a segfault) is read from a
pipe and capped: its first LOG_HEAD_BYTES and last LOG_TAIL_BYTES are kept.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

SETUP_SECONDS = 120.0
LOG_HEAD_BYTES = 8 * 1024
LOG_TAIL_BYTES = 32 * 1024
LOG_TAIL_CHARS = 400
STOP_SECONDS = 5.0


class CappedLog:
    """A reader thread that drains a pipe and keeps its head and tail, never more."""

    def __init__(self, fd: int):
        self.fd = fd
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._drain, daemon=True)
        self._thread.start()

    def _drain(self) -> None:
        while True:
            try:
                chunk = os.read(self.fd, 1 << 16)
            except OSError:
                return
            if not chunk:
                return
            with self._lock:
                self.total += len(chunk)
                room = LOG_HEAD_BYTES - len(self.head)
                if room > 0:
                    self.head += chunk[:room]
                    chunk = chunk[room:]
                self.tail += chunk
                if len(self.tail) > LOG_TAIL_BYTES:
                    del self.tail[: len(self.tail) - LOG_TAIL_BYTES]

    def text(self) -> str:
        with self._lock:
            dropped = self.total - len(self.head) - len(self.tail)
            gap = f"\n[... {dropped} bytes of output dropped ...]\n" if dropped > 0 else ""
            return (bytes(self.head).decode(errors="replace") + gap
                    + bytes(self.tail).decode(errors="replace"))  # fmt: skip

    def close(self) -> None:
        self._thread.join(timeout=STOP_SECONDS)
        with contextlib.suppress(OSError):
            os.close(self.fd)


def log_words(text: str, prefer: str | None = None) -> str:
    """The last meaningful lines of a worker's log, on one line; after a fatal error, the
    error and the innermost frame in the file `prefer` (else the innermost frame)."""
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


def exit_description(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


def crash_message(code: int | None, words: str) -> str:
    if code == 0:
        head = "the process exited (code 0) before a verdict: the solution ended it"
    else:
        head = f"the process died while evaluating it ({exit_description(code or 0)})"
    return f"{head}: {words}" if words else head


class WorkerGone(Exception):
    """The worker cannot answer any more: status "crash" or "timeout", and why."""

    def __init__(self, status: str, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


class Worker:
    """One solution's process, as the judge sees it: ask() sends a request, waits for the
    reply within the solution's time, and turns a death or an overrun into WorkerGone."""

    def __init__(self, problem, solution: str | Path, timeout: float):
        self.problem = problem
        self.solution = str(solution)
        self.timeout = timeout
        self.process: subprocess.Popen | None = None
        self.log: CappedLog | None = None
        self.deadline = 0.0
        self._to_worker = self._from_worker = -1

    def __enter__(self) -> Worker:
        try:
            self._start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _start(self) -> None:
        from kernelab.evaluate.channel import send

        child_reads, self._to_worker = os.pipe()
        self._from_worker, child_writes = os.pipe()
        log_read, log_write = os.pipe()
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "kernelab.evaluate.worker", str(child_reads),
                 str(child_writes)],
                stdin=subprocess.DEVNULL,
                stdout=log_write,
                stderr=log_write,
                pass_fds=(child_reads, child_writes),
                start_new_session=True,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )  # fmt: skip
        finally:
            for fd in (child_reads, child_writes, log_write):
                os.close(fd)
        self.log = CappedLog(log_read)
        os.set_blocking(self._to_worker, False)
        self.deadline = time.monotonic() + max(self.timeout, SETUP_SECONDS)
        setup = {
            "problem": str(self.problem.path),
            "device": str(self.problem.device),
            "scale": self.problem.scale,
        }
        send(self._to_worker, setup)
        ready = self._receive(setting_up=True)
        if "failed" in ready:
            raise WorkerGone("crash", ready["failed"])
        self.deadline = time.monotonic() + self.timeout  # the solution's clock starts

    def ask(self, request: dict) -> dict:
        from kernelab.evaluate.channel import ChannelClosed, ChannelTimeout, send

        try:
            send(self._to_worker, request, deadline=self.deadline)
        except ChannelTimeout:
            self._overrun(setting_up=False)
        except ChannelClosed:
            self._died()
        return self._receive(setting_up=False)

    def _receive(self, setting_up: bool) -> dict:
        from kernelab.evaluate.channel import ChannelClosed, ChannelTimeout, receive

        try:
            reply = receive(self._from_worker, trusted=False, deadline=self.deadline)
        except ChannelTimeout:
            self._overrun(setting_up)
        except ChannelClosed:
            self._died()
        except Exception as exc:  # a reply the judge refuses to unpickle
            from kernelab.evaluate.formats import describe_exception

            self.close()
            raise WorkerGone(
                "crash", f"the worker sent a reply the judge cannot read: {describe_exception(exc)}"
            ) from None
        if not isinstance(reply, dict):
            self.close()
            raise WorkerGone("crash", "the worker sent a reply that is not a message")
        return reply

    def _overrun(self, setting_up: bool):
        self.close()
        if setting_up:
            limit = max(self.timeout, SETUP_SECONDS)
            raise WorkerGone("timeout", f"the worker's setup timed out after {limit:g} s")
        raise WorkerGone(
            "timeout", f"no verdict after {self.timeout:g} s: the solution hangs or is far too slow"
        )

    def _died(self):
        code = None
        if self.process is not None:
            try:
                code = self.process.wait(timeout=STOP_SECONDS)
            except subprocess.TimeoutExpired:
                pass
        self.close()
        words = log_words(self.log.text(), prefer=self.solution) if self.log else ""
        raise WorkerGone("crash", crash_message(code, words))

    def close(self) -> None:
        """Kill the worker's whole process group (whatever state it is in) and free its pipes."""
        if self.process is not None:
            # The group outlives its leader when the solution started processes of its own.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        for fd in (self._to_worker, self._from_worker):
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._to_worker = self._from_worker = -1
        if self.log is not None:
            self.log.close()


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
) -> ProblemRun:
    """Judge `solutions` of `problem`, each in its own worker; every solution gets a verdict
    unless the problem itself cannot be set up (then setup_error says why)."""
    from kernelab.errors import KernelabError
    from kernelab.evaluate.formats import describe_exception, load_problem
    from kernelab.evaluate.verdict import Evaluator
    from kernelab.output import note

    outcome = ProblemRun(verdicts={})
    try:
        evaluator = Evaluator(load_problem(problem, device=device, scale=scale), options)
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
        outcome.verdicts[str(solution)] = evaluator.evaluate(solution, timeout=timeout).to_dict()
    return outcome
