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
    """A 30-second-per-question quiz: ridge points, bounds, numbers to know cold, and the PMPP
    primitives (bytes, bank conflicts, scan passes, histogram atomics)."""
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
    # Only a person answering at a terminal adds to the all-time tally; scripted answers
    # (--answers, a pipe, a closed stdin) are scored for this run alone.
    counted = answers is None and d.typed_at_a_terminal()
    score = d.save_score(d.score_path(), d.load_score(d.score_path()), outcomes, counted=counted)
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
        "all_time": {"asked": score.asked, "correct": score.correct, "counted": counted},
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
        tally = f"all typed runs {score.correct}/{score.asked}"
        if not counted:
            tally += " (this run was scripted, so it is not counted)"
        console.print(f"score {data['correct']}/{data['asked']}; {tally}")

    emit(data, as_json, render)


def writable_out(out: str, option: str = "--out") -> Path:
    """The folder `out` names, created, checked before any work: one-line KernelabError for an
    empty name, a file, or a place this process cannot create or write (nothing written)."""
    import os

    from kernelab.errors import KernelabError

    if not out.strip():
        raise KernelabError(f"{option} is empty; give a folder for the report")
    path = Path(out).expanduser()
    if path.exists() and not path.is_dir():
        raise KernelabError(f"{option} {out} is a file; give a folder for the report")
    if not path.exists():
        try:
            path.mkdir(parents=True)
        except OSError as exc:
            raise KernelabError(f"cannot create {option} {out}: {exc.strerror or exc}") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise KernelabError(f"cannot write into {option} {out}: permission denied")
    return path


def results_folder(results: str | None) -> Path:
    """The results folder exit-check judges: --results, checked (one line for an empty name or
    a missing folder), else the committed records of the default card."""
    from kernelab.errors import KernelabError
    from kernelab.lab.paths import DEFAULT_CARD, committed_results_dir

    if results is None:
        folder = committed_results_dir(DEFAULT_CARD)
        if folder is None:
            raise KernelabError("no committed records in this install: pass --results DIR "
                                "(a lab run's DIR/records, or benchmarks/results/<card>)")  # fmt: skip
        return folder
    if not results.strip():
        raise KernelabError("--results is empty; give a results folder")
    folder = Path(results).expanduser()
    if folder.exists() and not folder.is_dir():
        raise KernelabError(f"--results {results} is a file, not a folder; give the folder "
                            "that holds the record files")  # fmt: skip
    if not folder.is_dir():
        raise KernelabError(f"--results {results}: no such folder")
    return folder


def lab(
    out: Annotated[str, typer.Option(help="Where the report, charts and records go.")] = (
        "lab-report"
    ),
    quick: Annotated[
        bool, typer.Option(help="Fewer sizes: minutes instead of a quarter hour on a GPU.")
    ] = False,
    gpu: Annotated[
        str | None,
        typer.Option(help="Catalog GPU the report is about (default: this GPU, else h200)."),
    ] = None,
    fresh: Annotated[
        bool, typer.Option(help="Start over instead of resuming an interrupted run in OUT.")
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """The whole phase on this machine: measure, check, time, profile, then write the report."""
    if gpu is not None:
        from kernelab.hardware import resolve_gpu

        resolve_gpu(gpu)  # an unknown name is one line before any work
    folder = writable_out(out)
    from kernelab.lab import run as lab_run
    from kernelab.lab.compose import compose
    from kernelab.lab.gate import evaluate_gate
    from kernelab.lab.paths import DEFAULT_CARD, card_folder
    from kernelab.lab.report import write_report
    from kernelab.lab.results import load_results
    from kernelab.output import err_console

    with err_console.status("kernelab lab", spinner="dots") as status:

        def progress(message: str) -> None:
            from rich.text import Text

            # the spinner reads a str as markup without the console's guard: hand it plain text
            status.update(Text(f"kernelab lab: {message}"))
            if is_stage_line(message):
                note(message)

        state = lab_run.run_lab(folder, quick=quick, gpu=gpu, fresh=fresh, progress=progress)
        if state.on_gpu:
            results = load_results(state.records_dir)
            source = f"Every measured number below comes from this run ({results.machine()})."
        else:
            card = card_folder(state.gpu_id)
            committed = lab_run.committed_results_dir(card) if card else None
            instead = ""
            if committed is None:
                committed = lab_run.committed_results_dir(DEFAULT_CARD)
                instead = f" (none are committed for the {state.gpu_id}: the default card's)"
            results = load_results(committed)
            shown = f"benchmarks/results/{committed.name}" if committed else ""
            source = (
                f"No CUDA GPU here. Measured numbers below are the committed records in "
                f"{shown}{instead}, from {results.machine()}."
                if not results.empty
                else "No CUDA GPU here and no committed GPU records found: only the analytic parts."
            )
        gate = evaluate_gate(results, lab_run.docs_dir(), this_run=state.on_gpu)
        report = compose(state, results, source, gate)
        md, page = write_report(report, folder)
    data = {
        "out": str(folder),
        "on_gpu": state.on_gpu,
        "gpu": state.gpu_id,
        "gpu_from": state.gpu_from,
        "stages": state.done,
        "failed": state.failed,
        "report": {"markdown": str(md), "html": str(page)},
        "gate": [c.to_dict() for c in gate],
        "results_from": source,
    }

    def render(console) -> None:
        from rich.markup import escape

        console.print(f"GPU of the report: {state.gpu_id}, {state.gpu_from}", highlight=False)
        console.print(escape(source), highlight=False)
        for name, error in state.failed.items():
            console.print(f"[red]stage {name} failed:[/] {escape(error)} (the next run tries it "
                          "again)", highlight=False)  # fmt: skip
        for c in gate:
            mark = "[green]PASS[/]" if c.passed else "[red]FAIL[/]"
            console.print(f"{mark}  {escape(f'({c.bar}) {c.name}')}", highlight=False)
        console.print(escape(f"report: {md} and {page}"), highlight=False)

    emit(data, as_json, render)


def exit_check(
    results: Annotated[
        str | None,
        typer.Option(
            help="A results folder: a lab run's DIR/records or benchmarks/results/<card> "
            "(default: the committed records of the h200)."
        ),  # fmt: skip
    ] = None,
    strict: Annotated[
        bool,
        typer.Option(help="Exit 1 when a kernelab-bar criterion fails too, not only a phase one."),
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """The phase's exit criteria, PASS or FAIL each with its evidence, from measured records.

    Each criterion carries a bar: [phase] is the curriculum's exit criterion, [kernelab] our
    own stricter target. Each target is judged once, from the newest records of it in the
    folder, and its evidence names them. Exit status: 0 when every [phase] criterion passes
    (a [kernelab] FAIL is shown but is a target, not a gate); 1 when a [phase] criterion
    fails, or with --strict when any criterion fails; 2 for an empty or missing folder.
    """
    from kernelab.errors import KernelabError
    from kernelab.lab import run as lab_run
    from kernelab.lab.gate import evaluate_gate
    from kernelab.lab.results import load_results

    folder = results_folder(results)
    loaded = load_results(folder)
    if not loaded.files and not loaded.unreadable:  # nothing to judge: not a verdict of FAILs
        raise KernelabError(
            f"--results {folder} holds no record files (.json or .json.xz); give a lab run's "
            "DIR/records or benchmarks/results/<card>"
        )
    if loaded.empty and loaded.files and not loaded.unreadable:  # files, none a measurement
        raise KernelabError(
            f"--results {folder} holds no measured records (a lab run without a GPU measures "
            "nothing); judge a card's committed records: --results benchmarks/results/h200"
        )
    # a lab run's records folder (its stages.json beside them) is judged as that run
    this_run = (folder / "stages.json").is_file()
    gate = evaluate_gate(loaded, lab_run.docs_dir(), this_run=this_run)
    data = {"results": str(folder), "machine": loaded.machine(), "files": loaded.files,
            "gate": [c.to_dict() for c in gate],
            "phase_passed": all(c.passed for c in gate if c.bar == "phase"),
            "all_passed": all(c.passed for c in gate), "strict": strict,
            "unreadable": loaded.unreadable}  # fmt: skip

    def render(console) -> None:
        from rich.markup import escape

        console.print(escape(f"results: {folder} ({loaded.machine()}), {len(loaded.files)} "
                             "record files read"), highlight=False)  # fmt: skip
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
    check: Annotated[
        bool,
        typer.Option(
            help="Write nothing; exit 1 when README.md or docs/results.md is not what "
            "the committed records give."
        ),
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """Regenerate the README's headline results and docs/results.md (the full tables) from the
    committed records of every card (benchmarks/results/<card>/)."""
    from kernelab.errors import KernelabError
    from kernelab.lab.paths import repo_root
    from kernelab.lab.readme import render_pages, stale_pages, write_pages

    root = repo_root()
    if root is None:
        raise KernelabError("kernelab readme works in a source checkout (pip install -e .)")
    if check:  # the figures drawn aside: a check writes nothing into the checkout
        import tempfile

        with tempfile.TemporaryDirectory(prefix="kernelab-readme-") as scratch:
            pages = render_pages(root, Path(scratch))
    else:
        pages = render_pages(root)
    stale = stale_pages(root, pages)
    if not check:
        write_pages(root, pages)
    data = {
        "pages": [p.relative_to(root).as_posix() for p in pages],
        "stale": [p.relative_to(root).as_posix() for p in stale],
        "check": check,
    }

    def render(console) -> None:  # paths as the checkout names them, never absolute
        shown = [p.relative_to(root).as_posix() for p in (stale if check else pages)]
        if check:
            console.print("stale: " + ", ".join(shown) if stale else "up to date")
        else:
            console.print(f"rewrote {', '.join(shown)}")

    emit(data, as_json, render)
    if check and stale:
        raise typer.Exit(1)


def is_stage_line(message: str) -> bool:
    """Whether a progress message is a stage's own line ("hgemm: started", "triton: 28
    timings (39 s)"), printed to stay; the rest only updates the spinner. The names come
    from the lab's stage lists, so a new stage is never silent."""
    from kernelab.lab.run import CPU_STAGES, GPU_STAGES

    names = {name for name, _ in CPU_STAGES + GPU_STAGES}
    return ": " in message and message.split(": ", 1)[0] in names


def register(app: typer.Typer) -> None:
    app.command()(lab)
    app.command("exit-check")(exit_check)
    app.command()(drill)
    app.command()(readme)
