"""The judge and its workers: the solution runs in a process of its own, the verdict never does.

The judge is the process that calls run_problem (the `kernelab eval` command itself). It
loads the problem, generates every input, computes the references and times the baselines;
it never imports a solution. For each solution it starts a fresh worker,
`python -m kernelab.evaluate.worker`, behind a wall (kernelab.evaluate.wall: its own PID,
mount and network namespaces, its own uid, the judge's files read-only), talking over two
pipes that only the two of them hold (kernelab.evaluate.channel): the judge sends inputs,
the worker sends back what the solution made of them, as tensors, and the judge compares
them with its own torch. Nothing the worker writes is a verdict, and nothing the worker can
reach (a file, a patched function, the stack of its timer) is read as one. What the wall
holds, and what the kernel refused of it, goes into the verdict.

Limits: the worker's setup (importing torch, loading the problem) gets max(timeout,
SETUP_SECONDS); from then on the solution has `timeout` seconds in all. When they pass, or
when the judge is interrupted (Ctrl-C) or fails, the worker is killed, and with it its PID
namespace: every process the solution started. When the worker dies, the verdict is a crash
with the exit code or signal and its log's last words. The log (the solution's prints,
faulthandler's report of a segfault) is read from a pipe and capped: its first
LOG_HEAD_BYTES and last LOG_TAIL_BYTES are kept.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import kernelab
from kernelab.evaluate import wall
from kernelab.evaluate.channel import (
    ChannelClosed,
    ChannelTimeout,
    ReplyRefused,
    receive,
    send,
)
from kernelab.evaluate.problem import describe_exception

SETUP_SECONDS = 120.0
LOG_HEAD_BYTES = 8 * 1024
LOG_TAIL_BYTES = 32 * 1024
LOG_TAIL_CHARS = 400
STOP_SECONDS = 5.0
UNREADABLE_CHARS = 160
_UNTRACEABLE: str | None = None  # "" once the judge is undumpable, else why it is not


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


def secure_import_folders() -> list[str]:
    """The folders the judge may still import a module from, made read-only for the worker: a
    module the solution planted there would run inside the judge at its next lazy import.

    A world-writable one (the working folder of `python -m`, when it is /tmp or the like)
    cannot be trusted even read-only for the worker, since other users can write it: the judge
    stops importing from it. kernelab itself is imported by then, and its own modules are
    found through the package's path, not sys.path."""
    folders = []
    for entry in list(sys.path):
        folder = os.path.abspath(entry or os.curdir)
        try:
            mode = os.stat(folder).st_mode
        except OSError:
            continue
        if not stat.S_ISDIR(mode):
            continue  # a zip or egg file: read-only as part of its folder, or not importable
        if mode & stat.S_IWOTH:
            sys.path.remove(entry)
            continue
        folders.append(folder)
    return folders


class WorkerGone(Exception):
    """The worker cannot answer any more: status "crash" or "timeout", and why."""

    def __init__(self, status: str, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


class Worker:
    """One solution's process, as the judge sees it: ask() sends a request, waits for the
    reply within the solution's time, and turns a death or an overrun into WorkerGone.

    It starts behind the wall (kernelab.evaluate.wall): `wall` holds what the launcher
    applied and what the kernel refused, for the verdict."""

    def __init__(self, problem, solution: str | Path, timeout: float, *, protect=(),
                 pass_fds=()):  # fmt: skip
        self.problem = problem
        self.solution = str(solution)
        self.timeout = timeout
        self.protect = list(protect)  # more paths the worker must not write (a suite's)
        self.pass_fds = tuple(pass_fds)
        self.process: subprocess.Popen | None = None
        self.log: CappedLog | None = None
        self.deadline = 0.0
        self.wall: dict = {"applied": [], "refused": []}
        self.inner_pid: int | None = None
        self.uid: int | None = None
        self.scratch: str | None = None
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

    def _plan(self) -> dict:
        global _UNTRACEABLE
        if _UNTRACEABLE is None:
            try:
                wall.forbid_tracing()
                _UNTRACEABLE = ""
            except OSError as exc:
                _UNTRACEABLE = (
                    f"the judge could not make itself undumpable ({exc}): a worker of its uid "
                    "outside a PID namespace could ptrace it"
                )
        if _UNTRACEABLE:
            self.wall["refused"].append(_UNTRACEABLE)
        self.scratch = tempfile.mkdtemp(prefix="kernelab-worker-")
        problem_path = Path(self.problem.path).resolve()
        read_only = [
            str(problem_path), str(problem_path.parent), str(Path(self.solution).resolve()),
            str(Path(kernelab.__file__).resolve().parent), sys.prefix, sys.base_prefix,
            *secure_import_folders(), *self.protect,
        ]  # fmt: skip
        plan, notes = wall.plan(
            read_only=read_only,
            scratch=self.scratch,
            on_gpu=str(self.problem.device).startswith("cuda"),
            cpu_seconds=max(self.timeout, SETUP_SECONDS) + self.timeout,
        )
        self.wall["refused"].extend(notes)
        self.uid = plan["uid"]
        for name in ("tmp", "cache", "triton", "inductor", "nv"):
            os.mkdir(os.path.join(self.scratch, name))
        if self.uid is not None:
            for folder, dirs, _ in os.walk(self.scratch):
                for name in (folder, *(os.path.join(folder, d) for d in dirs)):
                    os.chown(name, self.uid, self.uid)
        return plan

    def _start(self) -> None:
        plan = self._plan()
        child_reads, self._to_worker = os.pipe()
        self._from_worker, child_writes = os.pipe()
        log_read, log_write = os.pipe()
        report_read, report_write = os.pipe()
        worker = [*wall.python_command(), "-m", "kernelab.evaluate.worker", str(child_reads),
                  str(child_writes), *(str(fd) for fd in self.pass_fds)]  # fmt: skip
        try:
            self.process = subprocess.Popen(
                [*wall.python_command(), "-m", "kernelab.evaluate.wall", json.dumps(plan),
                 str(report_write), "--", *worker],
                stdin=subprocess.DEVNULL,
                stdout=log_write,
                stderr=log_write,
                pass_fds=(child_reads, child_writes, report_write, *self.pass_fds),
                start_new_session=True,
                env={**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": wall.import_path()},
                # `python -m` puts its working folder first on sys.path, and the launcher
                # runs as root before any namespace: a folder an earlier worker could write
                # (the judge's own, if anyone may write it) would lend it the launcher's
                # imports. The new worker's scratch folder is empty and the judge's.
                cwd=self.scratch,
            )  # fmt: skip
        finally:
            for fd in (child_reads, child_writes, log_write, report_write):
                os.close(fd)
        self.log = CappedLog(log_read)
        self.deadline = time.monotonic() + max(self.timeout, SETUP_SECONDS)
        self._read_wall_report(report_read)
        os.set_blocking(self._to_worker, False)
        setup = {
            "problem": str(Path(self.problem.path).resolve()),  # the worker's folder differs
            "device": str(self.problem.device),
            "scale": self.problem.scale,
        }
        try:
            send(self._to_worker, setup)
        except ChannelClosed:
            self._died()
        ready = self._receive(setting_up=True)
        if "failed" in ready:
            raise WorkerGone("crash", ready["failed"])
        self.deadline = time.monotonic() + self.timeout  # the solution's clock starts

    def _read_wall_report(self, fd: int) -> None:
        """The launcher's lines: the worker's pid, then what the wall holds (both written
        before the solution's code exists in the process)."""
        text = b""
        try:
            while time.monotonic() < self.deadline:
                ready, _, _ = select.select([fd], [], [], 0.5)
                if not ready:
                    continue
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    break
                text += chunk
        finally:
            os.close(fd)
        for line in text.decode(errors="replace").splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if isinstance(entry.get("pid"), int):
                self.inner_pid = entry["pid"]
            self.wall["applied"].extend(entry.get("applied", []))
            self.wall["refused"].extend(entry.get("refused", []))

    def ask(self, request: dict) -> dict:
        if request.get("kind") == "solution":  # the worker works in its own folder
            request = {**request, "path": str(Path(request["path"]).resolve())}
        self._send(request)
        return self._receive(setting_up=False)

    def ask_made(self, make: Callable[[], dict]) -> dict:
        """ask(make()), the request made here and dropped once it is sent: tensors that only
        travel in it (a call's inputs) are not held beside the reply while it is read."""
        request = make()
        self._send(request)
        del request
        return self._receive(setting_up=False)

    def _send(self, message: dict) -> None:
        try:
            send(self._to_worker, message, deadline=self.deadline)
        except ChannelTimeout:
            self._overrun(setting_up=False)
        except ChannelClosed:
            self._died()

    def converse(self, request: dict, answer: Callable[[dict], dict]) -> dict:
        """ask(request), where before its reply the worker may send messages with "need",
        each answered with answer(message) (which raises ValueError, with the reason, for a
        message the protocol does not allow: the worker is then closed and the solution
        fails)."""
        reply = self.ask(request)
        while "need" in reply:
            try:
                response = answer(reply)
            except ValueError as exc:
                self.close()
                message = f"the worker broke the timed calls' protocol: {exc}"
                raise WorkerGone("fail", message) from None
            self._send(response)
            reply = self._receive(setting_up=False)
        return reply

    def _receive(self, setting_up: bool) -> dict:
        try:
            reply = receive(self._from_worker, trusted=False, deadline=self.deadline)
        except ChannelTimeout:
            self._overrun(setting_up)
        except ChannelClosed:
            self._died()
        except ReplyRefused as exc:
            self.close()
            raise WorkerGone(
                "fail", f"the worker sent a reply the judge will not read: {exc}"
            ) from None
        except Exception as exc:  # a reply the judge refuses to unpickle
            self.close()
            words = describe_exception(exc).splitlines()[0][:UNREADABLE_CHARS]
            raise WorkerGone(
                "fail",
                "the worker sent a reply the judge will not read (only tensors, numbers, "
                "strings and plain containers are unpickled; a tensor subclass or a class of "
                f"the solution's is refused): {words}",
            ) from None
        if not isinstance(reply, dict):
            self.close()
            raise WorkerGone("fail", "the worker sent a reply that is not a message")
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
        """Kill the worker and everything it started, whatever state they are in, and free
        its pipes and scratch directory.

        The worker is PID 1 of its PID namespace: its death takes every process in the
        namespace with it, a setsid() daemon included. The launcher's process group, and
        every process of the worker's dedicated uid, are killed as well, for where the kernel
        refused the namespace."""
        try:
            if self.inner_pid is not None:
                # Still the launcher's unreaped child while the launcher lives: not a reused pid.
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(self.inner_pid, signal.SIGKILL)
            if self.process is not None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
            wall.sweep(self.uid)
            if self.uid is not None:
                wall.sweep_files(self.uid)
        finally:
            # whatever the sweep met, the pipes and the scratch folder go
            for fd in (self._to_worker, self._from_worker):
                if fd >= 0:
                    with contextlib.suppress(OSError):
                        os.close(fd)
            self._to_worker = self._from_worker = -1
            if self.log is not None:
                self.log.close()
            if self.scratch is not None:
                wall.remove_tree(self.scratch)
                self.scratch = None
