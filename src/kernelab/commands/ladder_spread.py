"""`kernelab ladder NAME --sizes ... --gpus N`: the ladder's sizes spread over GPUs through Ray
(kernelab.spread.ladders, docs/spread.md), one size per task. The ladder's usual table and
JSON, every row naming the GPU it ran on, the records saved per card model; `--gpus 1` (or
no --gpus) runs the ladder here, as without Ray."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import typer

from kernelab.commands.options import spread_options
from kernelab.errors import KernelabError, positive_number
from kernelab.output import emit

LadderGpus, LadderAddress, LadderResume, LadderTasks = spread_options("the sizes", "size")
DEFAULT_TIMEOUT_S = 1800.0  # a size: every step built, checked and timed in each mode


@dataclasses.dataclass
class Spread:
    gpus: int | None
    address: str | None
    resume: bool
    tasks_dir: Path | None
    timeout: float

    def start(self) -> None:
        """Ray and the cluster reachable, before any compile: one line and exit 2 if not."""
        from kernelab.spread.engine import connect

        connect(self.address, "--gpus")


def spread_from_options(gpus, ray_address, resume, tasks_dir, timeout, *, profile: bool,
                        plot) -> Spread | None:  # fmt: skip
    """The spread run the options ask for, or None for the ladder here on one GPU."""
    from kernelab.spread.plan import check_address, wants_ray

    address = check_address(ray_address)
    if not wants_ray(gpus, 1, address):
        if resume or tasks_dir is not None:
            raise KernelabError(
                "--resume and --tasks-dir apply to a ladder spread over GPUs "
                "(--gpus 2 or more, or --ray-address)"
            )
        return None
    if profile:
        raise KernelabError("--profile reads one size on one GPU: give it without --gpus")
    if plot is not None:
        raise KernelabError("--plot draws one card's ladder: give it without --gpus")
    positive_number(timeout, "--timeout", "seconds")
    return Spread(gpus, address, resume, tasks_dir, timeout)


def run_spread(name: str, spread: Spread, sizes: list, *, steps, mode: str, max_time: float,
               options: dict, out: Path | None, as_json: bool, base: dict, render) -> None:  # fmt: skip
    """Spread the ladder, save its records per card, show the ladder's own table (`render`)
    with where each size ran, and exit 1 when a size failed every attempt."""
    from kernelab.spread.ladders import spread_ladder

    found = spread_ladder(
        name, sizes, steps=steps, mode=mode, max_time=max_time, options=options,
        gpus=spread.gpus, address=spread.address, deadline_s=spread.timeout,
        resume=spread.resume, folder=spread.tasks_dir, show_progress=not as_json,
    )  # fmt: skip
    saved = _save(found["by_card"], out)
    result = {**base, **_fields(name, found, sizes, mode, options)}
    result.update(
        timed=True, spread=found["spread"], placed=found["placed"], failed=found["failed"],
        records=", ".join(saved) or None, saved_to=saved,
    )  # fmt: skip

    def show(console) -> None:
        render(result, console)
        render_spread(result, console)

    emit(result, as_json, show)
    if found["failed"]:
        raise typer.Exit(1)


def _fields(name: str, found: dict, sizes: list, mode: str, options: dict) -> dict:
    """The ladder's timed result fields, as its local path names them."""
    gpu = ", ".join(found["gpus"]) or None
    rows, checks, extra = found["rows"], found["checks"], found["extra"]
    if name == "hgemm":
        wrong = [step for step, done in checks.items() if not all(c["ok"] for c in done)]
        fields = {"gpu": gpu, "sizes": sizes, "modes": options["modes"], "checks": checks,
                  "all_correct": not wrong, "wrong": wrong, "grids": extra["grids"],
                  "timing": rows}  # fmt: skip
        if options.get("pairs"):
            fields["paired"] = extra["paired"]
        return fields
    fields = {"gpu": gpu, "mode": mode, "checks": checks, "rows": rows}
    if name in ("sgemm", "scan", "reduce"):
        fields["sizes"] = sizes
    if name in ("transpose", "histogram", "scan"):
        fields["notes"] = found["notes"]
    if name == "reduce":
        ceilings = extra["read_ceilings"]
        first = next(iter(ceilings.values()), [None, "not measured"])
        source = first[1] if len(ceilings) < 2 else "; ".join(
            f"{card}: {rate / 1e9:,.0f} GB/s, {where}" for card, (rate, where) in ceilings.items()
        )  # fmt: skip
        fields.update(dtypes=options["dtypes"], read_ceiling_bytes_per_s=first[0],
                      read_ceiling_source=source, cub=extra["cub"] or "")  # fmt: skip
    return fields


def _save(by_card: dict, out: Path | None) -> list[str]:
    """The records to --out, one file per card model: --out itself when every size ran on
    one model, else NAME.CARD.json beside it (a ratio never mixes cards)."""
    from kernelab.harness.records import Record, save_records

    if out is None:
        return []
    saved = []
    for card, made in by_card.items():
        path = out if len(by_card) == 1 else out.with_name(f"{out.stem}.{card}{out.suffix}")
        saved.append(str(save_records([Record.from_dict(r) for r in made], path)))
    return saved


def render_spread(result: dict, console) -> None:
    """Under the ladder's table: where each size ran, the spread run, the failed sizes."""
    from kernelab.spread.engine import place_label
    from kernelab.spread.ladders import size_label

    if result["placed"]:
        console.print("ran on: " + "; ".join(
            f"{size_label(p['size'])} {place_label(p['ran_on']) or '-'} ({(p['ran_on'] or {}).get('name', '-')})"
            for p in result["placed"]
        ), highlight=False)  # fmt: skip
    spread = result["spread"]
    console.print(
        f"spread over {spread['gpus']} GPU(s), {spread['resumed']} of {spread['tasks']} "
        f"size(s) resumed; task records: {spread['folder']}", highlight=False,
    )  # fmt: skip
    for failed in result["failed"]:
        console.print(f"[red]{size_label(failed['size'])}: {failed['message']}[/red]",
                      highlight=False)  # fmt: skip
