"""`kernelab ladder NAME --sizes ... --gpus N`: a ladder's sizes spread over GPUs, one task
per size. A task checks the ladder's steps on its card and then times every step with the
ladder's anchors (cuBLAS, torch, CUB, the copy or read ceiling) at its size, in one run on
that one card, through the ladder's own engine (kernelab.ladders.NAME.ladder): every % of
cuBLAS, speedup over the step before and % of the ceiling divides two times taken on the
same GPU in the same process. Each row and record names the GPU it ran on (extra["ran_on"],
as the bench sweep does) and the records are kept per card model.

A step that fails its check on a task's card is not timed in that task (the local ladder
leaves it out at every size; here each size proves its own steps).
"""

from __future__ import annotations

import json

from kernelab.output import note
from kernelab.spread.plan import Task, task_key

# sgemm steps 1-3 take seconds per call above 4096^3; the local ladder skips them there too.
SGEMM_SKIP_SLOW_ABOVE = 4096
# Keys of a check row that carry measured numbers: two cards passing the same check differ
# in them, so a check is one row per (step, shape, dtype, outcome) in the merged table.
_CHECK_NUMBERS = ("error", "threshold", "message", "trials", "ran_on")


def size_label(size) -> str:
    return "x".join(str(v) for v in size) if isinstance(size, list | tuple) else str(size)


class LadderRunner:
    """One GPU's ladder: the steps built and the size-independent checks run once per
    worker, then one size per task through the ladder's engine."""

    def __init__(self, *, ladder: str, steps: str | None, mode: str, max_time: float,
                 options: dict):  # fmt: skip
        self.ladder, self.steps_spec, self.mode = ladder, steps, mode
        self.max_time, self.options = max_time, options
        self.engine = None
        self.chosen: list = []
        self.fixed_checks = None  # the checks that do not depend on the size, once per card
        self.ceiling = None  # reduce: this card's read ceiling and where it comes from

    def device_name(self) -> str:
        import torch

        return torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"

    def identity(self):
        """The card this worker times on (Ray made it the only visible one)."""
        from kernelab.harness.ceilings import this_gpu

        return this_gpu(f"kernelab ladder {self.ladder}")

    def _setup(self) -> None:
        import importlib

        self.engine = importlib.import_module(f"kernelab.ladders.{self.ladder}.ladder")
        self.chosen = self.engine.parse_steps(self.steps_spec)

    def run(self, payload: dict) -> dict:
        if self.engine is None:
            self._setup()
        size = payload["size"]
        found = getattr(self, f"_{self.ladder}")(tuple(size) if isinstance(size, list) else size)
        identity = self.identity()
        found["records"] = [record.to_dict() for record in found["records"]]
        return {**found, "gpu": identity.name, "card": identity.key}

    def _passing(self, bad: set[str]) -> list:
        if bad:
            note(f"not timing steps that gave wrong answers: {', '.join(sorted(bad))}")
        return [step for step in self.chosen if step.name not in bad]

    def _sgemm(self, size: int) -> dict:
        checks = self.engine.check_steps(self.chosen, [{"m": size, "n": size, "k": size}])
        timed = self._passing({c["step"] for c in checks if not c["ok"]})
        rows, records = self.engine.time_ladder(
            timed, [size], mode=self.mode, max_time_s=self.max_time,
            skip_slow_above=SGEMM_SKIP_SLOW_ABOVE,
        )  # fmt: skip
        return {"rows": rows, "records": records, "checks": checks, "notes": [], "extra": {}}

    def _hgemm(self, size: int) -> dict:
        engine, square = self.engine, {"m": size, "n": size, "k": size}
        if self.fixed_checks is None:
            self.fixed_checks = engine.check_steps(self.chosen, shapes=engine.check_shapes())
        checks = {name: list(rows) for name, rows in self.fixed_checks.items()}
        if square not in engine.check_shapes():
            for name, rows in engine.check_steps(self.chosen, shapes=[square]).items():
                checks.setdefault(name, []).extend(rows)
        good = engine.correct_steps(self.chosen, checks)
        grids = engine.persistent_grids(good, [size])
        rows, records = engine.time_ladder(good, [size], self.options["modes"],
                                           max_time_s=self.max_time)  # fmt: skip
        pairs = self.options.get("pairs") or 0
        paired = engine.time_paired(good, size, pairs) if pairs else []
        extra = {"grids": grids, "paired": paired}
        return {"rows": rows, "records": records, "checks": checks, "notes": [], "extra": extra}

    def _reduce(self, n: int) -> dict:
        dtypes = self.options["dtypes"]
        checks = self.engine.check_steps(self.chosen, [n], dtypes)
        timed = self._passing({c["step"] for c in checks if not c["ok"]})
        if self.ceiling is None:  # measured once per card, as the local ladder does per run
            self.ceiling = self.engine.read_ceiling()
        ceiling, source = self.ceiling
        measurements, records, cub_line = self.engine.time_ladder(
            timed, [n], dtypes, mode=self.mode, max_time_s=self.max_time
        )
        rows = self.engine.table_rows(measurements, ceiling)
        extra = {"read_ceiling": [ceiling, source], "cub": cub_line}
        return {"rows": rows, "records": records, "checks": checks, "notes": [], "extra": extra}

    def _fixed(self) -> list[dict]:
        if self.fixed_checks is None:
            self.fixed_checks = self.engine.check_steps(self.chosen, (self.options["dtype"],))
        return self.fixed_checks

    def _transpose(self, shape: tuple[int, int]) -> dict:
        checks = self._fixed()
        timed = self._passing({c["step"] for c in checks if not c["ok"]})
        rows, records = self.engine.time_ladder(timed, [shape], self.options["dtype"],
                                                mode=self.mode, max_time_s=self.max_time)  # fmt: skip
        notes = [self.engine.NO_CUB]
        return {"rows": rows, "records": records, "checks": checks, "notes": notes, "extra": {}}

    def _histogram(self, n: int) -> dict:
        checks = self._fixed()
        timed = self._passing({c["step"] for c in checks if not c["ok"]})
        rows, records, notes = self.engine.time_ladder(
            timed, [n], self.options["bins"], self.options["dtype"], mode=self.mode,
            max_time_s=self.max_time,
        )  # fmt: skip
        return {"rows": rows, "records": records, "checks": checks, "notes": notes, "extra": {}}

    def _scan(self, n: int) -> dict:
        checks = self._fixed()
        timed = self._passing({c["step"] for c in checks if not c["ok"]})
        rows, records, notes = self.engine.time_ladder(
            timed, [n], self.options["dtype"], mode=self.mode, max_time_s=self.max_time
        )
        return {"rows": rows, "records": records, "checks": checks, "notes": notes, "extra": {}}


# --- the pure half: tasks, and the ladder's result from the task records ---------------------


def plan_ladder(ladder: str, sizes: list, settings: dict) -> list[Task]:
    """One task per distinct size, in the order given; `settings` (steps, mode, dtype, ...)
    are part of every key, so a task folder never answers for other settings."""
    tasks = []
    for size in dict.fromkeys(tuple(s) if isinstance(s, list | tuple) else s for s in sizes):
        payload = {"size": list(size) if isinstance(size, tuple) else size}
        tasks.append(Task(
            key=task_key("ladder", ladder, payload["size"], settings), group=ladder,
            label=f"{ladder} {size_label(size)}", payload=payload,
        ))  # fmt: skip
    return tasks


def _check_identity(row: dict) -> str:
    return json.dumps({k: v for k, v in row.items() if k not in _CHECK_NUMBERS},
                      sort_keys=True, default=str)  # fmt: skip


def _merge_checks(into, found, ran_on):
    """Check rows of every task, one per (step, shape, dtype, outcome): a check that passed
    on every card shows once, one that failed anywhere shows with the GPU it failed on."""
    if isinstance(found, dict):  # hgemm: step -> rows
        into = into if isinstance(into, dict) else {}
        for name, rows in found.items():
            into[name] = _merge_checks(into.get(name, []), rows, ran_on)
        return into
    into = list(into or [])
    seen = {_check_identity(row) for row in into}
    for row in found:
        if _check_identity(row) not in seen:
            seen.add(_check_identity(row))
            into.append(row if row.get("ok") else {**row, "ran_on": ran_on})
    return into


def _local_order(ladder: str, options: dict, sizes: list):
    """The sort key that puts merged rows and records in the local ladder's order: reduce
    walks dtypes first, then sizes; every other ladder walks sizes first (the task order)."""
    if ladder != "reduce":
        return None
    dtypes, order = options["dtypes"], [s for s in sizes]
    return lambda row: (dtypes.index(row["dtype"]), order.index(_row_n(row)))


def _row_n(row: dict) -> int:
    return int(row["n"]) if "n" in row else int(row["shape"]["n"])


def merge_ladder(ladder: str, tasks: list[Task], records: dict, options: dict) -> dict:
    """The ladder's rows in the local order, each naming the GPU it ran on; its checks,
    notes and ladder-specific pieces; the records by card model (extra["ran_on"] in each);
    and the sizes whose task failed every attempt."""
    rows, checks, notes, by_card, gpus, failed, placed = [], None, [], {}, [], [], []
    extra: dict = {"grids": {}, "paired": [], "read_ceilings": {}, "cub": None}
    for task in tasks:
        record = records.get(task.key) or {"failed": "not run", "attempts": []}
        result = record.get("result")
        if result is None:
            failed.append({"size": task.payload["size"], "message": record["failed"],
                           "attempts": record.get("attempts", [])})  # fmt: skip
            continue
        ran_on = record.get("ran_on") or {}
        placed.append({"size": task.payload["size"], "ran_on": ran_on})
        rows += [{**row, "ran_on": ran_on} for row in result["rows"]]
        checks = _merge_checks(checks, result["checks"], ran_on)
        notes += [line for line in result["notes"] if line not in notes]
        for made in result["records"]:
            made = {**made, "extra": {**made.get("extra", {}), "ran_on": ran_on}}
            by_card.setdefault(result["card"], []).append(made)
        if result["gpu"] not in gpus:
            gpus.append(result["gpu"])
        found = result.get("extra") or {}
        for step, grid in (found.get("grids") or {}).items():
            extra["grids"].setdefault(step, {}).update({int(k): v for k, v in grid.items()})
        extra["paired"] += found.get("paired") or []
        if found.get("read_ceiling"):
            extra["read_ceilings"].setdefault(result["card"], found["read_ceiling"])
        extra["cub"] = extra["cub"] or found.get("cub")
    key = _local_order(ladder, options, [task.payload["size"] for task in tasks])
    if key is not None:
        rows.sort(key=key)
        for card in by_card:
            by_card[card].sort(key=lambda r: key({"dtype": r["dtype"], "n": r["shape"]["n"]}))
    return {"rows": rows, "checks": checks if checks is not None else [], "notes": notes,
            "by_card": by_card, "gpus": gpus, "failed": failed, "placed": placed,
            "extra": extra}  # fmt: skip


def spread_ladder(
    ladder: str,
    sizes: list,
    *,
    steps: str | None,
    mode: str,
    max_time: float,
    options: dict,
    gpus: int | None,
    address: str | None,
    deadline_s: float,
    resume: bool = False,
    folder=None,
    runner_cls=None,
    show_progress: bool = True,
) -> dict:
    """Every size of the ladder on one of `gpus` GPUs of a Ray cluster: merge_ladder's
    result plus "spread" (GPUs, tasks, resumed ones, the task folder)."""
    from kernelab.spread.engine import spread_tasks
    from kernelab.spread.progress import GpuBars

    settings = {"steps": steps, "mode": mode, "max_time": max_time, "options": options}
    tasks = plan_ladder(ladder, sizes, settings)
    fingerprint = {"kind": "ladder", "ladder": ladder,
                   "sizes": [t.payload["size"] for t in tasks], **settings}  # fmt: skip

    def succeeded(record: dict) -> bool:
        result = record.get("result") or {}
        return bool(result.get("rows")) and not _failed_checks(result.get("checks"))

    records, spread = spread_tasks(
        tasks, fingerprint, address=address, gpus=gpus, resume=resume, folder=folder,
        runner_cls=runner_cls or LadderRunner, runner_kwargs={"ladder": ladder, **settings},
        deadline_s=deadline_s, succeeded=succeeded, title=f"{ladder} ladder", unit="size",
        bars=GpuBars if show_progress else None,
    )  # fmt: skip
    result = merge_ladder(ladder, tasks, records, options)
    result["spread"] = spread
    return result


def _failed_checks(checks) -> bool:
    rows = [r for rs in checks.values() for r in rs] if isinstance(checks, dict) else checks or []
    return any(not row.get("ok") for row in rows)
