"""`kernelab bench KERNEL --sizes ... --gpus N`: a sweep spread over GPUs, one task per
shape. A task times the kernel and its baselines at its shape on one card, so a speedup
never divides times taken on two cards; each record names the GPU it ran on
(extra["ran_on"]: node, Ray's GPU id, the device's name) and the records are kept per card
model, never one file mixing cards.
"""

from __future__ import annotations

from kernelab.harness.bench import BenchSession, build_candidates, shape_rows
from kernelab.spread.plan import Task, task_key


def shape_label(shape: dict) -> str:
    return "x".join(str(v) for v in shape.values())


class SweepRunner:
    """One GPU's bench: the kernel and its baselines built once, then a shape per task."""

    def __init__(self, *, kernel: str, baselines: list[str], dtype: str, mode: str,
                 min_samples: int, max_time: float, device: str):  # fmt: skip
        self.kernel, self.baselines, self.dtype, self.mode = kernel, baselines, dtype, mode
        self.min_samples, self.max_time, self.device = min_samples, max_time, device
        self.session: BenchSession | None = None
        self.built: list = []

    def device_name(self) -> str:
        import torch

        if self.device.startswith("cuda") and torch.cuda.is_available():
            return torch.cuda.get_device_name(0)
        return self.device

    def identity(self):
        """The card this worker times on (Ray made it the only visible one)."""
        from kernelab.harness.ceilings import this_gpu

        return this_gpu("kernelab bench")

    def _setup(self) -> None:
        from kernelab.spec import registry
        from kernelab.spec.reference import get_op

        impl = registry.get(self.kernel)
        self.built = build_candidates(impl, [registry.get(name) for name in self.baselines])
        self.session = BenchSession(
            self.identity(), get_op(impl.op), self.dtype, self.mode, self.min_samples,
            self.max_time, device=self.device,
        )  # fmt: skip

    def run(self, payload: dict) -> dict:
        if self.session is None:
            self._setup()
        shape = payload["shape"]
        rows, records = shape_rows(self.session, self.built, shape, shape_label(shape))
        identity = self.session.identity
        return {
            "rows": rows,
            "records": [record.to_dict() for record in records],
            "gpu": identity.name,
            "card": identity.key,
        }


def plan_sweep(kernel: str, shapes: list[dict], settings: dict) -> list[Task]:
    return [
        Task(
            key=task_key("sweep", kernel, shape, settings),
            group=kernel,
            label=f"{kernel} {shape_label(shape)}",
            payload={"shape": shape},
        )  # fmt: skip
        for shape in shapes
    ]


def merge_sweep(kernel: str, tasks: list[Task], records: dict) -> dict:
    """The rows in shape order, the records by card (each naming the GPU it ran on), and
    the names of the cards; a shape whose task failed every attempt is a failed row."""
    rows, by_card, gpus = [], {}, []
    for task in tasks:
        record = records.get(task.key) or {"failed": "not run", "attempts": []}
        result = record.get("result")
        if result is None:
            rows.append({
                "implementation": kernel, "shape": task.payload["shape"], "check_ok": False,
                "check_error": None, "check_message": record["failed"],
                "attempts": record.get("attempts", []),
            })  # fmt: skip
            continue
        ran_on = record.get("ran_on") or {}
        for row in result["rows"]:
            rows.append({**row, "ran_on": ran_on})
        for made in result["records"]:
            made = {**made, "extra": {**made.get("extra", {}), "ran_on": ran_on}}
            by_card.setdefault(result["card"], []).append(made)
        if result["gpu"] not in gpus:
            gpus.append(result["gpu"])
    return {"rows": rows, "by_card": by_card, "gpus": gpus}


def spread_sweep(
    kernel: str,
    shapes: list[dict],
    *,
    baselines: list[str],
    dtype: str,
    mode: str,
    min_samples: int,
    max_time: float,
    device: str,
    gpus: int | None,
    address: str | None,
    deadline_s: float,
    resume: bool = False,
    folder=None,
    runner_cls=SweepRunner,
    show_progress: bool = True,
) -> dict:
    """Every shape on one of `gpus` GPUs of a Ray cluster: merge_sweep's result plus
    "spread" (GPUs, tasks, resumed ones, the task folder)."""  # fmt: skip
    from kernelab.spread.engine import spread_tasks
    from kernelab.spread.progress import GpuBars

    settings = {"baselines": baselines, "dtype": dtype, "mode": mode,
                "min_samples": min_samples, "max_time": max_time, "device": device}  # fmt: skip
    tasks = plan_sweep(kernel, shapes, settings)
    fingerprint = {"kind": "sweep", "kernel": kernel, "shapes": shapes, **settings}

    def succeeded(record: dict) -> bool:
        rows = (record.get("result") or {}).get("rows") or []
        return bool(rows) and all(row.get("check_ok") for row in rows)

    records, spread = spread_tasks(
        tasks, fingerprint, address=address, gpus=gpus, resume=resume, folder=folder,
        runner_cls=runner_cls, runner_kwargs={"kernel": kernel, **settings},
        deadline_s=deadline_s, succeeded=succeeded, title=kernel, unit="shape",
        bars=GpuBars if show_progress else None,
    )  # fmt: skip
    result = merge_sweep(kernel, tasks, records)
    result["spread"] = spread
    return result
