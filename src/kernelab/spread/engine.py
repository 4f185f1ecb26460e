"""Ray's half of spreading work over GPUs: connect, one worker per GPU, tasks handed out as
workers come free, each task cut at its deadline, tried once more elsewhere, and every
worker stopped on the way out (Ctrl-C included).

A worker is a Ray actor holding one GPU (`num_gpus=1`; Ray sets CUDA_VISIBLE_DEVICES, so
the worker's "cuda" is its card) for the whole run. It keeps its process, its CUDA context
and its runner's set-up (a problem's references and baselines, a kernel's build) from one
task to the next: a task per (problem, solution) then costs one judged solution, not a
fresh Python with torch imported and the problem set up again. A worker that hangs or dies
is killed and replaced; its GPU goes to the replacement.

Ray is imported here, inside functions: importing kernelab never imports it.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import socket
import time
from collections.abc import Callable
from typing import Any

from kernelab.errors import KernelabError
from kernelab.output import note
from kernelab.spread.plan import (
    Task,
    TaskBook,
    check_address,
    default_folder,
    failed_message,
    gpus_to_use,
    lift_avoidance,
    next_attempt,
    pick_next,
)

MISSING = (
    "{what} needs Ray, which is not installed: pip install 'kernelab[ray]' "
    "(or --gpus 1 to run on this machine alone)"
)
# An address that does not take a TCP connection this fast is not a cluster to wait for;
# Ray's own connect would retry for about a minute before it says so.
CONNECT_TIMEOUT_S = 3.0
POLL_S = 0.25  # how often the loop looks at deadlines and idle workers between results


def import_ray(what: str):
    """The ray module, or the one-line KernelabError that says how to get it."""
    try:
        import ray
    except ImportError:
        raise KernelabError(MISSING.format(what=what)) from None
    return ray


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:200] if text else type(exc).__name__


def _probe(address: str) -> None:
    """HOST:PORT (or ray://HOST:PORT) must take a TCP connection within CONNECT_TIMEOUT_S."""
    host, _, port = check_address(address).split("://", 1)[-1].rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_TIMEOUT_S):
            pass
    except OSError as exc:
        why = "no answer" if isinstance(exc, TimeoutError) else (exc.strerror or _one_line(exc))
        raise KernelabError(
            f"cannot reach the Ray cluster at {address}: {why} within {CONNECT_TIMEOUT_S:g} s"
        ) from None


def local_gpu_count() -> int:
    """The CUDA GPUs this process sees (CUDA_VISIBLE_DEVICES honoured), as the workers of a
    Ray session started here would: 0 without torch's CUDA."""
    try:
        import torch
    except ImportError:
        return 0
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def connect(address: str | None, what: str):
    """A Ray session: the one this process already holds, the cluster at `address` ("auto":
    the one this machine belongs to, as Ray means it), or a new one on this machine. A
    cluster that cannot be reached, or a new session on a machine without a GPU, is one
    KernelabError line, before Ray starts."""
    ray = import_ray(what)
    if ray.is_initialized():
        return ray
    if address and address != "auto":
        _probe(address)
    if not address and not os.environ.get("RAY_ADDRESS"):
        # A session started here has this machine's GPUs and no more; with none, every worker
        # would wait for a GPU that never comes. A cluster's GPUs (--ray-address, or
        # RAY_ADDRESS, which ray.init follows) are known only once connected.
        if local_gpu_count() < 1:
            raise KernelabError(
                f"{what} spreads over this machine's GPUs and it has none (no CUDA GPU visible); "
                f"leave {what} out, or give --ray-address of a cluster with GPUs"
            )
    options: dict[str, Any] = {"log_to_driver": False, "logging_level": logging.WARNING}
    if not address:
        options["include_dashboard"] = False
    try:
        ray.init(address=address or None, **options)
    except Exception as exc:
        where = f"at {address}" if address else "on this machine"
        raise KernelabError(f"cannot reach the Ray cluster {where}: {_one_line(exc)}") from None
    return ray


def cluster_gpus(ray) -> int:
    return int(ray.cluster_resources().get("GPU", 0))


class GpuWorker:
    """The body of one GPU's actor: the runner (which keeps its set-up between tasks), and
    where it runs. A runner has run(payload) -> dict and device_name() -> str; place() is
    the first call a worker answers, so the loop knows when it is up."""

    def __init__(self, runner_cls, runner_kwargs: dict):
        self.runner = runner_cls(**runner_kwargs)

    def place(self) -> dict:
        import ray

        gpus = ",".join(str(i) for i in ray.get_gpu_ids())
        return {
            "node": ray.util.get_node_ip_address(),
            "gpu": gpus,
            "name": self.runner.device_name(),
        }

    def run(self, payload: dict) -> dict:
        return self.runner.run(payload)


def place_label(place: dict | None) -> str | None:
    return f"{place['node']} gpu {place['gpu']}" if place else None


@dataclasses.dataclass
class _Slot:
    """One GPU worker and the task it runs."""

    handle: Any
    place_ref: Any
    place: dict | None = None
    last_group: str | None = None
    task: Task | None = None
    ref: Any = None
    started: float = 0.0

    @property
    def where(self) -> str | None:
        return place_label(self.place)


class Progress:
    """What the loop reports; the default reports nothing."""

    def started(self, slots: list[_Slot]) -> None: ...
    def tick(self, slots: list[_Slot]) -> None: ...
    def finished(self, task: Task, where: str | None, ok: bool) -> None: ...
    def faulted(self, task: Task, where: str | None, reason: str) -> None: ...
    def close(self) -> None: ...


def run_tasks(
    ray,
    tasks: list[Task],
    *,
    runner_cls,
    runner_kwargs: dict,
    gpus: int,
    deadline_s: float,
    on_result: Callable[[Task, dict], bool],
    progress: Progress | None = None,
) -> None:
    """Run every task on one of `gpus` workers. `on_result(task, record)` is called as each
    task ends, in the driver, and returns whether it went well (for the progress counts);
    the record is {"result", "ran_on", "attempts"} or, for a task that failed every
    attempt, {"failed": why, "attempts"}. On Ctrl-C every worker is killed at once and the
    KeyboardInterrupt goes on up; the results already handed to on_result stay."""
    if not tasks:
        return
    progress = progress or Progress()
    actor = ray.remote(num_gpus=1, max_restarts=0)(GpuWorker)

    def start() -> _Slot:
        handle = actor.remote(runner_cls, runner_kwargs)
        return _Slot(handle, handle.place.remote())

    slots = [start() for _ in range(gpus)]
    pending = list(tasks)
    attempts: dict[str, list[dict]] = {}
    avoid: dict[str, set[str]] = {}

    def fault(index: int, reason: str, *, dead: bool) -> None:
        slot = slots[index]
        task, where = slot.task, slot.where
        tried = attempts.setdefault(task.key, [])
        tried.append({"place": where, "reason": reason})
        progress.faulted(task, where, reason)
        if dead:
            ray.kill(slot.handle, no_restart=True)
            slots[index] = start()
        else:
            slot.task = slot.ref = None
        if next_attempt(tried):
            pending.insert(0, task)
            avoid[task.key] = {a["place"] for a in tried if a["place"]}
        else:
            progress.finished(task, where, on_result(task, {
                "failed": failed_message(tried), "attempts": tried,
            }))  # fmt: skip

    try:
        progress.started(slots)
        while pending or any(slot.task for slot in slots):
            _learn_places(ray, slots)
            avoid = lift_avoidance(avoid, {slot.where for slot in slots if slot.where})
            busy = {slot.task.group for slot in slots if slot.task}
            for slot in slots:
                if slot.task is not None or not pending:
                    continue
                index = pick_next(pending, slot.last_group, busy, slot.where, avoid)
                if index is None:
                    continue
                slot.task = pending.pop(index)
                slot.ref = slot.handle.run.remote(slot.task.payload)
                slot.started, slot.last_group = time.monotonic(), slot.task.group
                busy.add(slot.task.group)
            progress.tick(slots)
            running = [slot.ref for slot in slots if slot.task is not None]
            if not running:
                time.sleep(POLL_S)
                continue
            ray.wait(running, num_returns=1, timeout=POLL_S)
            ready, _ = ray.wait(running, num_returns=len(running), timeout=0)
            done = set(ready)
            for index, slot in enumerate(slots):
                if slot.task is None:
                    continue
                if slot.ref in done:
                    _collect(ray, slots, index, fault, on_result, progress, attempts)
                elif time.monotonic() - slot.started > deadline_s:
                    late = "no result" if slot.place else "its GPU worker not up"
                    fault(index, f"{late} after {deadline_s:g} s: cut", dead=True)
    finally:
        for slot in slots:
            try:
                ray.kill(slot.handle, no_restart=True)
            except Exception:  # already gone
                pass
        progress.close()


def _collect(ray, slots, index, fault, on_result, progress, attempts) -> None:
    """The finished task of slots[index]: its result handed on, or its fault."""
    slot = slots[index]
    try:
        result = ray.get(slot.ref)
    except ray.exceptions.RayActorError as exc:
        fault(index, f"its GPU worker died ({_one_line(exc)})", dead=True)
        return
    except ray.exceptions.RayError as exc:
        cause = getattr(exc, "cause", None) or exc  # the runner's own exception
        fault(index, f"it raised {type(cause).__name__}: {_one_line(cause)}", dead=False)
        return
    if slot.place is None and slot.place_ref is not None:  # answered before the loop asked
        slot.place = ray.get(slot.place_ref)  # an actor answers in order: this is ready
    task = slot.task
    slot.task = slot.ref = None
    record = {"result": result, "ran_on": slot.place, "attempts": attempts.get(task.key, [])}
    progress.finished(task, slot.where, on_result(task, record))


def _learn_places(ray, slots: list[_Slot]) -> None:
    """Where each worker that has started runs (a worker's first answer)."""
    waiting = [slot.place_ref for slot in slots if slot.place is None and slot.place_ref]
    if not waiting:
        return
    ready, _ = ray.wait(waiting, num_returns=len(waiting), timeout=0)
    for slot in slots:
        if slot.place is None and slot.place_ref in ready:
            try:
                slot.place = ray.get(slot.place_ref)
            except ray.exceptions.RayError:
                slot.place_ref = None  # it died starting; its task's fault says so
                continue
            # a task's deadline runs from when its worker is up: starting a worker (a new
            # Python, Ray's own set-up) is not the task's time
            slot.started = max(slot.started, time.monotonic())


def spread_tasks(
    tasks: list[Task],
    fingerprint: dict,
    *,
    address: str | None,
    gpus: int | None,
    resume: bool,
    folder,
    runner_cls,
    runner_kwargs: dict,
    deadline_s: float,
    succeeded: Callable[[dict], bool],
    title: str,
    unit: str,
    bars=None,
    announce_folder: bool = False,
) -> tuple[dict, dict]:
    """Every task of a suite, sweep or ladder on the GPUs of a Ray cluster, each finished one
    written to the run's task book as it ends (so --resume skips it). Returns the records by
    task key and the "spread" summary (GPUs, tasks, resumed ones, the task folder).
    `succeeded(record)` says whether a finished task went well, for the progress counts;
    `bars` (spread.progress.GpuBars, or None for none) draws the progress under `title`;
    `unit` names a task in the Ctrl-C note."""
    ray = connect(address, "--gpus")  # no Ray, or no cluster: one line, before any file
    book = TaskBook(folder or default_folder(fingerprint), fingerprint, resume=resume)
    records = book.done() if resume else {}
    todo = [task for task in tasks if task.key not in records]
    if announce_folder:
        note(f"task records: {book.folder} ({len(records)} of {len(tasks)} done before)")
    use, why = gpus_to_use(gpus, cluster_gpus(ray), len(todo)) if todo else (0, None)
    if why:
        note(why)

    def on_result(task: Task, record: dict) -> bool:
        book.write(task.key, record)
        records[task.key] = record
        return succeeded(record)

    progress = bars(f"{title}: {use} GPU(s)", len(tasks), len(records)) if bars else None
    try:
        run_tasks(ray, todo, runner_cls=runner_cls, runner_kwargs=runner_kwargs, gpus=use,
                  deadline_s=deadline_s, on_result=on_result, progress=progress)  # fmt: skip
    except KeyboardInterrupt:
        note(f"interrupted: {len(records)} finished {unit}(s) kept in {book.folder}; "
             "--resume goes on from there")  # fmt: skip
        raise
    summary = {"gpus": use, "tasks": len(tasks), "resumed": len(tasks) - len(todo),
               "folder": str(book.folder)}  # fmt: skip
    return records, summary
