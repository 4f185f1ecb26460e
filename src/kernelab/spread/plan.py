"""The pure half of spreading work over GPUs: which tasks there are, which are already done,
which task an idle GPU takes next, when a failed task is tried again and where. Nothing here
imports Ray, so every rule is tested without it.

A task is one unit of work judged or timed on one GPU: a (problem, solution) of a suite, or
a (kernel, shape) of a sweep with its baselines, so that a speedup never divides times taken
on two cards. Tasks of one group (a problem, a kernel) share their set-up, so a GPU prefers
the group it set up last.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

from kernelab.errors import KernelabError

# A task is tried at most this often: once, then once more on another GPU where there is
# one. A second failure is the task's verdict; a third try would let one bad solution hold
# a GPU for three timeouts.
MAX_ATTEMPTS = 2
RUN_FILE = "run.json"  # the fingerprint of the run the task records belong to
TASK_PREFIX = "task-"


@dataclasses.dataclass(frozen=True)
class Task:
    """One unit of work: `payload` is what the GPU's runner gets (JSON-able)."""

    key: str  # stable across runs of the same work: the name of its record file
    group: str  # tasks that share a set-up (a problem, a kernel)
    label: str  # for people: "relu.py <- solutions/relu/correct/model_new.py"
    payload: dict


def task_key(*parts) -> str:
    """A short stable id for the work `parts` describe (paths, shapes, settings)."""
    text = json.dumps(parts, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def fingerprint_key(fingerprint: dict) -> str:
    return task_key(fingerprint)


def default_folder(fingerprint: dict) -> Path:
    """Where a run's task records live unless --tasks-dir says: the cache, by fingerprint, so
    that the same run started again finds them (--resume)."""
    from kernelab.harness.cache import cache_dir

    return cache_dir() / "spread" / fingerprint_key(fingerprint)


# --- which GPUs -----------------------------------------------------------------------------


def wants_ray(requested: int | None, visible: int, address: str | None) -> bool:
    """Whether this run goes through Ray: a cluster was named, or more than one GPU is asked
    for (explicitly, or by default when more than one is visible). One GPU runs here, as
    without Ray."""
    if requested is not None and requested < 1:
        raise KernelabError(f"--gpus must be at least 1, got {requested}")
    if address:
        return True
    return (requested if requested is not None else visible) > 1


def check_address(address: str | None) -> str | None:
    """A --ray-address as Ray takes it: "auto", HOST:PORT or ray://HOST:PORT."""
    if address is None or address == "auto":
        return address
    host, _, port = address.split("://", 1)[-1].rpartition(":")
    if not host or not port.isdigit():
        raise KernelabError(f"--ray-address must be auto or HOST:PORT, got {address!r}")
    return address


def gpus_to_use(requested: int | None, available: int, tasks: int) -> tuple[int, str | None]:
    """How many GPU workers to start, and a note when fewer than asked: never more than the
    cluster has (a worker that waits for a GPU nobody frees would hang the run) nor more
    than there are tasks."""
    if available < 1:
        raise KernelabError(
            "the Ray cluster has no GPU resources (start it with GPUs, or run with --gpus 1)"
        )
    wanted = requested if requested is not None else available
    use = max(1, min(wanted, available, tasks))  # at least one, even for no task
    why = None
    if wanted > available:
        why = f"--gpus {wanted} but the Ray cluster has {available}: using {available}"
    return use, why


# --- which task next ------------------------------------------------------------------------


def pick_next(
    pending: list[Task],
    last_group: str | None,
    busy_groups: set[str],
    place: str | None,
    avoid: dict[str, set[str]],
) -> int | None:
    """The index in `pending` of the task a GPU at `place` takes next, or None when every
    pending task would rather wait for another GPU.

    In order: a task of the group this GPU set up last (its set-up is reused); a task of a
    group no other GPU is working on (spreads the set-ups); any task. A task tried again
    after a fault is never given to a place it failed at (`avoid[key]`), nor to a worker
    whose place is not known yet (a replacement may sit on the very GPU that failed);
    `lift_avoidance` frees it where no other GPU is left."""
    allowed = [
        i
        for i, task in enumerate(pending)
        if not avoid.get(task.key) or (place is not None and place not in avoid[task.key])
    ]
    if not allowed:
        return None
    for i in allowed:
        if last_group is not None and pending[i].group == last_group:
            return i
    for i in allowed:
        if pending[i].group not in busy_groups:
            return i
    return allowed[0]


def lift_avoidance(avoid: dict[str, set[str]], live_places: set[str]) -> dict[str, set[str]]:
    """`avoid` without the tasks that no live GPU could take: every known place is one the
    task failed at (one GPU in all, or every GPU failed it). Those run wherever there is
    room: a second try on the same GPU beats none."""
    return {key: places for key, places in avoid.items() if live_places - places}


def next_attempt(attempts: list[dict]) -> bool:
    """Whether a task that failed `attempts` times (each {"place", "reason"}) is tried again."""
    return len(attempts) < MAX_ATTEMPTS


def failed_message(attempts: list[dict]) -> str:
    """The verdict message of a task that never finished: every attempt, where and why."""
    tries = "; ".join(f"on {a['place'] or 'a GPU'}: {a['reason']}" for a in attempts)
    times = "once" if len(attempts) == 1 else f"{len(attempts)} times"
    return f"the task failed {times} ({tries})"


# --- the records of finished tasks ---------------------------------------------------------


class TaskBook:
    """Finished tasks of one run, one JSON file each in `folder`, written atomically as each
    task finishes, so that a run cut short keeps what it finished and `--resume` starts
    from there. `fingerprint` says what the run is (suite, settings): resuming a folder
    that holds another run's records is refused, never mixed in."""

    def __init__(self, folder: str | Path, fingerprint: dict, *, resume: bool):
        self.folder = Path(folder)
        self.fingerprint = json.loads(json.dumps(fingerprint, default=str))
        run_file = self.folder / RUN_FILE
        if resume and run_file.is_file():
            try:
                held = json.loads(run_file.read_text())
            except (OSError, ValueError) as exc:
                raise KernelabError(f"cannot resume from {self.folder}: {exc}") from None
            if held != self.fingerprint:
                changed = sorted(
                    k for k in {*held, *self.fingerprint} if held.get(k) != self.fingerprint.get(k)
                )
                raise KernelabError(
                    f"cannot resume from {self.folder}: its records are of a run with other "
                    f"{', '.join(changed)}; drop --resume to start again"
                )
        if not resume:
            self.clear()
        self.folder.mkdir(parents=True, exist_ok=True)
        _write_atomically(run_file, json.dumps(self.fingerprint, indent=1, sort_keys=True))

    def _path(self, key: str) -> Path:
        return self.folder / f"{TASK_PREFIX}{key}.json"

    def clear(self) -> None:
        """Drop a previous run's task records (only the files this book writes)."""
        if self.folder.is_dir():
            for path in self.folder.glob(f"{TASK_PREFIX}*.json"):
                path.unlink()

    def done(self) -> dict[str, dict]:
        """key -> record of every finished task; a damaged file counts as not done."""
        found = {}
        for path in sorted(self.folder.glob(f"{TASK_PREFIX}*.json")):
            try:
                record = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            if isinstance(record, dict) and record.get("key"):
                found[record["key"]] = record
        return found

    def write(self, key: str, record: dict) -> Path:
        path = self._path(key)
        _write_atomically(path, json.dumps({**record, "key": key}, default=str))
        return path


def _write_atomically(path: Path, text: str) -> None:
    from kernelab.harness.records import write_atomically

    write_atomically(path, text)  # a temporary file, fsync, then one rename
