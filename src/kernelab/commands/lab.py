"""`kernelab lab`, `kernelab exit-check` and `kernelab drill`: the phase as one command."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from kernelab.output import JsonOption, emit, note


def drill(
    rounds: Annotated[int, typer.Option(help="How many questions.")] = 6,
    seed: Annotated[int | None, typer.Option(help="Seed for a repeatable drill.")] = None,
    answers: Annotated[
        str | None,
        typer.Option(help="Answers separated by ';' (non-interactive: scripts and tests)."),
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """A 30-second-per-question quiz: ridge points, bounds, numbers to know cold."""
    from kernelab.errors import KernelabError
    from kernelab.lab import drill as d

    if rounds < 1:
        raise KernelabError("--rounds must be at least 1")
    questions = d.make_questions(rounds, seed)
    if answers is not None:
        scripted = iter(answers.split(";"))

        def ask(q: d.Question) -> str | None:
            return next(scripted, None)

    else:

        def ask(q: d.Question) -> str | None:
            print(f"{q.prompt} ", end="", file=sys.stderr, flush=True)
            line = sys.stdin.readline()
            return line if line else None

    outcomes = d.run_drill(questions, ask)
    score = d.save_score(d.score_path(), d.load_score(d.score_path()), outcomes)
    data = {
        "questions": [
            {
                "prompt": o.question.prompt,
                "answer": o.question.answer,
                "unit": o.question.unit,
                "reply": o.reply,
                "correct": o.correct,
                "too_slow": o.too_slow,
                "explanation": o.question.explanation,
            }
            for o in outcomes
        ],
        "correct": sum(o.correct for o in outcomes),
        "asked": len(outcomes),
        "all_time": {"asked": score.asked, "correct": score.correct},
    }

    def render(console) -> None:
        for o in outcomes:
            mark = (
                "[green]right[/]"
                if o.correct
                else ("[red]too slow[/]" if o.too_slow else "[red]wrong[/]")
            )
            console.print(
                f"{mark}  {o.question.prompt}  answer: {o.question.answer} {o.question.unit}"
            )
            if o.question.explanation:
                console.print(f"       {o.question.explanation}", style="dim")
        console.print(
            f"score {data['correct']}/{data['asked']}; all time {score.correct}/{score.asked}"
        )

    emit(data, as_json, render)


def lab(
    out: Annotated[Path, typer.Option(help="Where the report, charts and records go.")] = Path(
        "lab-report"
    ),
    quick: Annotated[
        bool, typer.Option(help="Fewer sizes: minutes instead of a quarter hour on a GPU.")
    ] = False,
    gpu: Annotated[
        str | None,
        typer.Option(help="Catalog GPU for the analytic part (default: this GPU, else h100-sxm)."),
    ] = None,
    fresh: Annotated[
        bool, typer.Option(help="Start over instead of resuming an interrupted run in OUT.")
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """The whole phase on this machine: measure, check, time, profile, then write the report."""
    from kernelab.errors import KernelabError

    if out.exists() and not out.is_dir():
        raise KernelabError(f"--out {out} is a file; give a folder for the report")
    from kernelab.lab import run as lab_run
    from kernelab.lab.compose import compose
    from kernelab.lab.gate import evaluate_gate
    from kernelab.lab.report import write_report
    from kernelab.lab.results import load_results
    from kernelab.output import err_console

    with err_console.status("kernelab lab", spinner="dots") as status:

        def progress(message: str) -> None:
            status.update(f"kernelab lab: {message}")
            if is_stage_line(message):
                note(message)

        state = lab_run.run_lab(out, quick=quick, gpu=gpu, fresh=fresh, progress=progress)
        if state.on_gpu:
            results = load_results(state.records_dir)
            source = f"Every measured number below comes from this run ({results.machine()})."
        else:
            committed = lab_run.committed_results_dir()
            results = load_results(committed)
            source = (
                f"No CUDA GPU here. Measured numbers below are the committed records in "
                f"{committed}, from {results.machine()}."
                if not results.empty
                else "No CUDA GPU here and no committed GPU records found: only the analytic parts."
            )
        gate = evaluate_gate(results, lab_run.docs_dir())
        report = compose(state, results, source, gate)
        md, page = write_report(report, out)
    data = {
        "out": str(out),
        "on_gpu": state.on_gpu,
        "gpu": state.gpu_id,
        "stages": state.done,
        "failed": state.failed,
        "report": {"markdown": str(md), "html": str(page)},
        "gate": [c.to_dict() for c in gate],
        "results_from": source,
    }

    def render(console) -> None:
        console.print(source)
        for name, error in state.failed.items():
            console.print(f"[red]stage {name} failed: {error}[/] (the next run tries it again)")
        for c in gate:
            mark = "[green]PASS[/]" if c.passed else "[red]FAIL[/]"
            console.print(f"{mark}  ({c.bar}) {c.name}")
        console.print(f"report: {md} and {page}")

    emit(data, as_json, render)


def exit_check(
    results: Annotated[
        Path | None, typer.Option(help="A results folder (default: the committed H200 records).")
    ] = None,
    strict: Annotated[
        bool,
        typer.Option(help="Exit 1 when a kernelab-bar criterion fails too, not only a phase one."),
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """The phase's exit criteria, PASS or FAIL each with its evidence, from measured records.

    Each criterion carries a bar: [phase] is the curriculum's exit criterion, [kernelab] our
    own stricter target. Exit status: 0 when every [phase] criterion passes (a [kernelab]
    FAIL is shown but is a target, not a gate); 1 when a [phase] criterion fails, or with
    --strict when any criterion fails; 2 for a missing results folder.
    """
    from kernelab.errors import KernelabError
    from kernelab.lab import run as lab_run
    from kernelab.lab.gate import evaluate_gate
    from kernelab.lab.results import load_results

    folder = results or lab_run.committed_results_dir()
    if folder is None or not folder.is_dir():
        raise KernelabError("no results folder: pass --results DIR (a lab run's DIR/records)")
    loaded = load_results(folder)
    gate = evaluate_gate(loaded, lab_run.docs_dir())
    data = {"results": str(folder), "machine": loaded.machine(), "gate": [c.to_dict() for c in gate],
            "phase_passed": all(c.passed for c in gate if c.bar == "phase"),
            "all_passed": all(c.passed for c in gate), "strict": strict,
            "unreadable": loaded.unreadable}  # fmt: skip

    def render(console) -> None:
        from rich.markup import escape

        console.print(f"results: {escape(str(folder))} ({escape(loaded.machine())})")
        for c in gate:
            mark = "[green]PASS[/]" if c.passed else "[red]FAIL[/]"
            line = escape(f"[{c.bar}] {c.name}\n       {c.evidence}")
            console.print(f"{mark}  {line}", highlight=False)
        rule = "every criterion" if strict else "every [phase] criterion (--strict: all)"
        console.print(escape(f"exit 1 unless {rule} passes"), style="dim", highlight=False)

    emit(data, as_json, render)
    if not (data["all_passed"] if strict else data["phase_passed"]):
        raise typer.Exit(1)


def readme(
    gpu: Annotated[str, typer.Option(help="Which committed results folder to render.")] = "h200",
    as_json: JsonOption = False,
) -> None:
    """Regenerate the README's results tables and charts from the committed GPU records."""
    from kernelab.errors import KernelabError
    from kernelab.lab.paths import repo_root
    from kernelab.lab.readme import update_readme

    root = repo_root()
    if root is None:
        raise KernelabError("kernelab readme works in a source checkout (pip install -e .)")
    path = update_readme(root, gpu)
    emit(
        {"readme": str(path)}, as_json, lambda c: c.print(f"rewrote the results section of {path}")
    )


def is_stage_line(message: str) -> bool:
    """Whether a progress message is a stage's own line ("hgemm: started", "triton: 28
    timings (39 s)"), printed to stay; the rest only updates the spinner. The names come
    from the lab's stage lists, so a new stage is never silent (the hgemm stage was, on the
    H200 in session 5, while this was a hand-kept set)."""
    from kernelab.lab.run import CPU_STAGES, GPU_STAGES

    names = {name for name, _ in CPU_STAGES + GPU_STAGES}
    return ": " in message and message.split(": ", 1)[0] in names


def register(app: typer.Typer) -> None:
    app.command()(lab)
    app.command("exit-check")(exit_check)
    app.command()(drill)
    app.command()(readme)
