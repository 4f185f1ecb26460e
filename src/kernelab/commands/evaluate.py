"""`kernelab eval PROBLEM SOLUTION` and `kernelab eval --suite DIR`: a user's kernel against
a reference, in KernelBench or GPU MODE format (kernelab.evaluate says how).

Exit code 0 when every verdict is "pass", 1 when any is not (wrong, suspect, crash,
timeout), 2 for bad input (no such file, an unrecognised format, a problem that cannot be
set up, --device cuda without a GPU), 3 when nothing failed but a problem was skipped: it
does not fit the device's memory even with one input set (`skipped: needs N GB, ...`).

`--suite DIR --gpus N` (by default every visible GPU, when Ray is installed) or
`--ray-address ADDR` spreads the suite over GPUs through Ray (kernelab.spread.suites,
docs/spread.md): the same verdicts, table and exit code, each verdict naming its GPU.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from kernelab.commands.options import (
    max_time_option,
    out_file_option,
    record_file,
    spread_options,
)
from kernelab.errors import KernelabError, NoGPUError, output_folder, positive_number
from kernelab.output import JsonOption, emit, note

_, SpreadAddress, SpreadResume, SpreadTasks = spread_options("--suite", "task")

DEVICES = ("auto", "cuda", "cpu")
COLOURS = {
    "pass": "green",
    "fail": "red",
    "suspect": "yellow",
    "crash": "red",
    "timeout": "red",
    "error": "red",
    "skipped": "yellow",
}
MESSAGE_WIDTH = 160


def resolve_device(device: str) -> str:
    """ "auto" -> "cuda" with a GPU, else "cpu" (with a note that timing is skipped)."""
    import torch

    device = device.strip().lower()
    if device not in DEVICES:
        raise KernelabError(f"--device must be one of {', '.join(DEVICES)}, got {device!r}")
    has_gpu = torch.cuda.is_available()
    if device == "cuda" and not has_gpu:
        raise NoGPUError("--device cuda needs a CUDA GPU; none found (use --device cpu)")
    if device == "auto":
        device = "cuda" if has_gpu else "cpu"
        if not has_gpu:
            note("no CUDA GPU: correctness runs on the CPU and timing is skipped")
    return device


def spread_device(device: str) -> str:
    """The device a spread run's tasks judge on: "auto" is each task's GPU ("cuda"), never
    this machine's (the driver of a cluster may have none)."""
    device = device.strip().lower()
    if device not in DEVICES:
        raise KernelabError(f"--device must be one of {', '.join(DEVICES)}, got {device!r}")
    return "cuda" if device == "auto" else device


def goes_spread(gpus: int | None, address: str | None) -> bool:
    """Whether the suite is spread through Ray: a cluster named, --gpus above 1, or by
    default every visible GPU when there are several and Ray is installed (without Ray the
    suite runs here as before, with a note)."""
    import importlib.util

    from kernelab.spread.plan import check_address, wants_ray

    check_address(address)
    visible = 0
    if gpus is None and not address:
        import torch

        visible = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if not wants_ray(gpus, visible, address):
        return False
    if gpus is None and not address and importlib.util.find_spec("ray") is None:
        note(
            f"{visible} GPUs visible, judging on one: pip install 'kernelab\\[ray]' to use them all"
        )
        return False
    return True


def _fmt(value, spec: str, suffix: str = "") -> str:
    if value is None:
        return "-"
    if isinstance(value, str):  # the verdict keeps inf and nan as strings, as JSON must
        return f"{value}{suffix}"
    return f"{value:{spec}}{suffix}"


def _status(status: str) -> str:
    colour = COLOURS.get(status, "white")
    return f"[{colour}]{status.upper()}[/{colour}]"


def _short(text: str) -> str:
    return text if len(text) <= MESSAGE_WIDTH else text[: MESSAGE_WIDTH - 3] + "..."


def _sol_pct(timed: dict) -> float | None:
    placement = timed.get("placement") or {}
    sheet = placement.get("datasheet") or {}
    return sheet.get("sol_pct")


def _render_verdict(verdict: dict):
    from rich.table import Table

    def render(console) -> None:
        console.print(
            f"{verdict['problem']} ({verdict['format']}) <- {verdict['solution']} on "
            f"{verdict.get('device', '?')}: {_status(verdict['status'])}"
        )
        console.print(verdict["message"], highlight=False, markup=False)
        if verdict.get("cases"):
            table = Table(title="correctness")
            for column in ("case", "kind", "seed", "ok", "error", "threshold", "own check"):
                table.add_column(column)
            for case in verdict["cases"]:
                table.add_row(
                    case["case"],
                    case["kind"],
                    str(case["seed"]),
                    "yes" if case["ok"] else "[red]no[/red]",
                    _fmt(case["error"], ".2e"),
                    _fmt(case["threshold"], ".2e"),
                    case.get("format_check") or "-",
                )
            console.print(table)
        if verdict.get("timings"):
            table = Table(
                title="timing (mean ms per call, host launch path + device time; "
                "speedup = baseline / solution)"
            )
            for column in (
                "case",
                "solution",
                "eager",
                "torch.compile",
                "x eager",
                "x compile",
                "% SOL",
            ):
                table.add_column(column, justify="left" if column == "case" else "right")
            for timed in verdict["timings"]:
                table.add_row(
                    timed["case"],
                    _fmt(timed["solution_ms"], ".4f"),
                    _fmt(timed["eager_ms"], ".4f"),
                    _fmt(timed["compiled_ms"], ".4f"),
                    _fmt(timed["speedup_vs_eager"], ".2f", "x"),
                    _fmt(timed["speedup_vs_compiled"], ".2f", "x"),
                    _fmt(_sol_pct(timed), ".1f", " %"),
                )
            console.print(table)
            for timed in verdict["timings"]:
                for warning in timed.get("warnings", []):
                    console.print(f"[yellow]{timed['case']}: {warning}[/yellow]", highlight=False)
        for entry in verdict.get("roofline", []):
            cost = entry.get("cost")
            if cost:
                console.print(
                    f"roofline {entry['case']}: {cost['op']} {cost['dtype']}, "
                    f"{cost['flops']:.3g} FLOP, {cost['bytes']:.3g} B, "
                    f"{cost['intensity']:.3g} FLOP/B ({entry['reason']})",
                    highlight=False,
                )
            else:
                console.print(f"roofline {entry['case']}: not placed ({entry['reason']})")
        for line in verdict.get("notes", []):
            console.print(f"note: {line}", highlight=False, markup=False)

    return render


def _render_suite(result: dict):
    from rich.table import Table

    def render(console) -> None:
        table = Table(title=f"kernelab eval --suite {result['directory']} on {result['device']}")
        numbers = ("ms", "x eager", "x compile", "% SOL")
        spread = result.get("spread")
        for column in ("problem", "solution", "status", *numbers, *(["GPU"] if spread else [])):
            table.add_column(column, justify="right" if column in numbers else "left")
        for row in result["rows"]:
            timings = row.get("timings") or []
            first = timings[0] if timings else {}
            ran_on = row.get("ran_on") or {}
            table.add_row(
                row["problem"],
                "/".join(Path(row["solution"]).parts[-2:]),
                _status(row["status"]),
                _fmt(first.get("solution_ms"), ".4f"),
                _fmt(first.get("speedup_vs_eager"), ".2f", "x"),
                _fmt(first.get("speedup_vs_compiled"), ".2f", "x"),
                _fmt(_sol_pct(first) if first else None, ".1f", " %"),
                *([f"{ran_on['node']} gpu {ran_on['gpu']}" if ran_on else "-"] if spread else []),
            )
        console.print(table)
        for row in result["rows"]:
            if row["status"] != "pass":
                name = "/".join(Path(row["solution"]).parts[-2:])
                console.print(
                    f"{row['problem']} {name}: {_short(row['message'])}",
                    highlight=False,
                    markup=False,
                )
        for problem in result["problems"]:
            if problem.get("setup_error"):
                console.print(f"[red]{problem['problem']}: {problem['setup_error']}[/red]")
        counts = ", ".join(f"{n} {status}" for status, n in sorted(result["summary"].items()))
        console.print(f"{len(result['rows'])} verdicts: {counts}")
        if spread:
            console.print(
                f"spread over {spread['gpus']} GPU(s), {spread['resumed']} of "
                f"{spread['tasks']} task(s) resumed; task records: {spread['folder']}",
                highlight=False,
            )
        if result.get("saved_to"):
            console.print(f"records: {result['saved_to']}")

    return render


def _exit_code(statuses: list[str]) -> int:
    """0 when every verdict passes; 1 when any is fail, suspect, crash, timeout or error;
    3 when none of those but some problem was skipped (too large for the device)."""
    if any(status not in ("pass", "skipped") for status in statuses):
        return 1
    return 3 if "skipped" in statuses else 0


def _save(records: list[dict], out: Path | None) -> str | None:
    if out is None:
        return None
    if not records:
        note("no timings (no GPU or nothing correct): no records written")
        return None
    from kernelab.harness.records import Record, save_records

    return str(save_records([Record.from_dict(r) for r in records], out))


def _save_per_card(records: list[dict], out: Path | None) -> str | None:
    """A spread suite's records: --out itself when they were all taken on one card model,
    else one file per model beside it (OUT.h100-sxm.json, ...), never one file of two."""
    from kernelab.harness.cache import safe_name

    cards: dict[str, list[dict]] = {}
    for record in records:
        card = record.get("gpu_id") or safe_name(record.get("gpu") or "unknown")
        cards.setdefault(card, []).append(record)
    if out is None or len(cards) <= 1:
        return _save(records, out)
    saved = [
        _save(made, out.with_name(f"{out.stem}.{card}{out.suffix}")) for card, made in cards.items()
    ]
    return ", ".join(saved)


def register(app: typer.Typer) -> None:
    @app.command("eval")
    def evaluate(
        problem: Annotated[
            Path | None,
            typer.Argument(help="A KernelBench problem file or a GPU MODE problem directory."),
        ] = None,
        solution: Annotated[
            Path | None,
            typer.Argument(help="A KernelBench ModelNew file or a GPU MODE submission.py."),
        ] = None,
        suite: Annotated[
            str | None,  # a str: "" must be refused, not read as the current folder
            typer.Option("--suite", help="Evaluate every problem in this directory instead."),
        ] = None,
        device: Annotated[
            str, typer.Option("--device", help="auto (the GPU if any), cuda or cpu.")
        ] = "auto",
        scale: Annotated[
            float, typer.Option("--scale", help="Shrink every size by this factor (0 < s <= 1).")
        ] = 1.0,
        seeds: Annotated[int, typer.Option("--seeds", help="Seeds per test case.")] = 3,
        seed: Annotated[
            int | None, typer.Option("--seed", help="Fix the extra seeds (random by default).")
        ] = None,
        timeout: Annotated[
            float, typer.Option("--timeout", help="Seconds per solution before it counts as hung.")
        ] = 300.0,
        mode: Annotated[
            str, typer.Option("--mode", help="Timing mode: cold (L2 flushed), hot or graph.")
        ] = "cold",
        max_time: max_time_option("measurement") = 1.0,
        no_compile: Annotated[
            bool, typer.Option("--no-compile", help="Skip the torch.compile baseline.")
        ] = False,
        out: out_file_option("Write the timing records to this JSON file.") = None,
        gpus: Annotated[
            int | None,
            typer.Option(
                "--gpus",
                help="Spread --suite over this many GPUs through Ray (default: every visible "
                "GPU; 1 judges here, without Ray).",
            ),
        ] = None,
        ray_address: SpreadAddress = None,
        resume: SpreadResume = False,
        tasks_dir: SpreadTasks = None,
        as_json: JsonOption = False,
    ) -> None:
        """Judge a kernel against its reference: correct?, how fast?, where on the roofline?"""
        from kernelab.evaluate.formats import check_scale, detect_format
        from kernelab.evaluate.verdict import Options

        positive_number(timeout, "--timeout", "seconds")
        positive_number(max_time, "--max-time", "seconds")
        out = record_file(out)
        tasks_dir = output_folder(tasks_dir, "--tasks-dir")
        options = Options(
            seeds=seeds,
            seed=seed,
            mode=mode,
            max_time_s=max_time,
            compile=not no_compile,
        ).validate()
        scale = check_scale(scale)
        if suite is not None:
            if not suite.strip():
                raise KernelabError("--suite needs a directory, not an empty string")
            suite = Path(suite).expanduser()
            if problem is not None or solution is not None:
                raise KernelabError("give either PROBLEM SOLUTION or --suite DIR, not both")
            from kernelab.evaluate.suite import discover, run_suite

            discover(suite)  # a bad directory fails here, before any device work
            if goes_spread(gpus, ray_address):
                from kernelab.spread.suites import spread_suite

                result = spread_suite(
                    suite, device=spread_device(device), scale=scale, options=options,
                    timeout=timeout, gpus=gpus, address=ray_address, resume=resume,
                    folder=tasks_dir, show_progress=not as_json,
                )  # fmt: skip
            else:
                if resume or tasks_dir is not None:
                    raise KernelabError(
                        "--resume and --tasks-dir apply to a suite spread over GPUs "
                        "(--gpus 2 or more, or --ray-address)"
                    )
                result = run_suite(
                    suite, device=resolve_device(device), scale=scale, options=options,
                    timeout=timeout,
                )  # fmt: skip
            if result.get("spread"):
                result["saved_to"] = _save_per_card(result["records"], out)
            else:
                result["saved_to"] = _save(result["records"], out)
            emit(result, as_json, _render_suite(result))
            raise typer.Exit(_exit_code([row["status"] for row in result["rows"]]))
        if gpus is not None or ray_address or resume or tasks_dir is not None:
            raise KernelabError("--gpus, --ray-address, --resume and --tasks-dir apply to --suite")
        if problem is None or solution is None:
            raise KernelabError("kernelab eval needs PROBLEM and SOLUTION (or --suite DIR)")
        detect_format(problem)
        if not solution.is_file():
            raise KernelabError(f"no such solution file: {solution}")
        from kernelab.evaluate.judge import run_problem

        outcome = run_problem(
            problem,
            [solution],
            device=resolve_device(device),
            scale=scale,
            options=options,
            timeout=timeout,
        )
        if outcome.setup_error is not None:
            raise KernelabError(f"problem {problem}: {outcome.setup_error}")
        verdict = outcome.verdicts[str(solution)]
        verdict["baselines"] = outcome.baselines
        verdict["saved_to"] = _save(outcome.baseline_records + verdict.get("records", []), out)
        emit(verdict, as_json, _render_verdict(verdict))
        raise typer.Exit(_exit_code([verdict["status"]]))
