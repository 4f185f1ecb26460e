"""The GEMM ladders' run options beyond the timing table, read and checked in one place before
anything compiles: --prebuild (compile every step, and every sgemm tile candidate, then
stop: no GPU needed), --tune (the sgemm tile search), --no-time (check every step, time
nothing), --rounds, --bracket and --pair-modes (hgemm's drift-cancelling measures), and
--save / --save-dir (the run written where `kernelab lab` reads it: hgemm's summary.json and
records.json, sgemm --tune's winners file). kernelab.commands.ladder dispatches here."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from kernelab.errors import KernelabError, output_folder, unknown
from kernelab.output import note

# The options read here, as the command line spells them (a non-GEMM ladder refuses them all).
GEMM_RUN_OPTIONS = ("--prebuild", "--tune", "--no-time", "--rounds", "--bracket",
                    "--pair-modes", "--save", "--save-dir")  # fmt: skip
HGEMM_ONLY = ("--rounds", "--bracket", "--pair-modes")
# The options that do something else, what they do and the options that go with them (--steps,
# --json and --max-time always do).
ALONE = {
    "--prebuild": ("compiles every step and stops", ("--prebuild",)),
    "--tune": ("times the tile candidates of the tunable steps",
               ("--tune", "--sizes", "--save", "--save-dir")),
    "--no-time": ("checks every step and times nothing",
                  ("--no-time", "--sizes", "--save", "--save-dir")),
}  # fmt: skip
SAVE_HELP = (
    "hgemm: also write the run as summary.json and records.json, the files `kernelab lab` "
    "reads from a card's hgemm/ folder; sgemm --tune: the winners as tuned_<card>.json, the "
    "form of the committed src/kernelab/ladders/sgemm/tuned_h200.json. Into --save-dir, else "
    "$OUT, else benchmarks/results/<card>[/hgemm] in a source checkout, else "
    "./kernelab-results/<gpu>[/hgemm]."
)


@dataclass(frozen=True)
class GemmRun:
    """What a GEMM ladder run does beyond checking and timing its steps once per mode."""

    prebuild: bool = False
    tune: bool = False
    no_time: bool = False
    rounds: int = 0
    bracket: bool = False
    pair_modes: list[str] = field(default_factory=lambda: ["cold"])
    save: bool = False
    save_dir: Path | None = None


def given_options(*, prebuild: bool, tune: bool, no_time: bool, rounds: int, bracket: bool,
                  pair_modes: str | None, save: bool, save_dir: str | None) -> list[str]:  # fmt: skip
    """The GEMM run options this command line gave, in GEMM_RUN_OPTIONS order."""
    values = (prebuild, tune, no_time, rounds != 0, bracket, pair_modes is not None, save,
              save_dir is not None)  # fmt: skip
    return [option for option, on in zip(GEMM_RUN_OPTIONS, values, strict=True) if on]


def _listed(options) -> str:
    options = list(options)
    return options[0] if len(options) == 1 else ", ".join(options[:-1]) + " and " + options[-1]


def listed_are(options) -> str:
    """ "--save is" / "--rounds and --save are": the options as the subject of a sentence."""
    options = list(options)
    return f"{_listed(options)} {'is' if len(options) == 1 else 'are'}"


def gemm_run(name: str, given: list[str], *, rounds: int, pair_modes: str | None,
             save_dir: str | None, pairs: int, profile: bool, spread, others: dict) -> GemmRun:  # fmt: skip
    """The GemmRun of ladder `name` (sgemm or hgemm), or one KernelabError line for options
    that do not go together. `others`: the command line's other options that were given
    (their spelling -> given or not), which --prebuild, --tune and --no-time refuse."""
    from kernelab.commands.options import comma_items
    from kernelab.harness.paired import PAIRED_MODES

    if name == "sgemm" and any(o in given for o in HGEMM_ONLY):
        wrong = [o for o in HGEMM_ONLY if o in given]
        raise KernelabError(f"{listed_are(wrong)} for the hgemm ladder only")
    if name == "hgemm" and "--tune" in given:
        raise KernelabError("--tune searches the sgemm ladder's tile candidates; the hgemm "
                            "steps have none")  # fmt: skip
    if given and spread is not None:
        raise KernelabError(f"{listed_are(given)} for a ladder on this one GPU, not one "
                            "spread with --gpus or --ray-address")  # fmt: skip
    if given and profile:
        raise KernelabError(f"--profile does not go with {_listed(given)}")
    for alone, (does, allowed) in ALONE.items():
        if alone in given:
            refused = [o for o in [*given, *(o for o, on in others.items() if on)]
                       if o not in allowed]  # fmt: skip
            if refused:
                raise KernelabError(f"{alone} {does}: it does not go with {_listed(refused)}")
    if rounds < 0:
        raise KernelabError(f"--rounds takes a count >= 0 (0: none), got {rounds}")
    modes = ["cold"]
    if pair_modes is not None:
        if not pairs:
            raise KernelabError("--pair-modes says how --pairs N times its pairs; give --pairs")
        modes = []
        for mode in comma_items(pair_modes, "--pair-modes", "cold,hot"):
            if mode.lower() not in PAIRED_MODES:
                raise unknown("paired timing mode", mode, PAIRED_MODES)
            modes += [mode.lower()] if mode.lower() not in modes else []
    save = "--save" in given or "--save-dir" in given
    if name == "sgemm" and save and "--tune" not in given:
        raise KernelabError("--save and --save-dir write the hgemm ladder's run or the sgemm "
                            "--tune winners; the sgemm timings go to --out FILE.json")  # fmt: skip
    return GemmRun(
        prebuild="--prebuild" in given, tune="--tune" in given, no_time="--no-time" in given,
        rounds=rounds, bracket="--bracket" in given, pair_modes=modes, save=save,
        save_dir=output_folder(save_dir, "--save-dir"),
    )  # fmt: skip


def save_folder(run: GemmRun, command: str, *parts: str) -> Path:
    """--save-dir, else harness.records.default_results_dir of this GPU (`parts` below it)."""
    if run.save_dir is not None:
        return run.save_dir
    from kernelab.harness.ceilings import this_gpu
    from kernelab.harness.records import default_results_dir

    return default_results_dir(this_gpu(command).key, *parts)


def save_hgemm_run(run: GemmRun, result: dict, records: list) -> Path:
    """The hgemm run as `kernelab lab` reads a card's hgemm/ folder: records.json (one Record
    per timing, when the run timed anything) and summary.json (this result: compile report,
    checks, grids, timing rows, rounds, pairs). Returns the folder."""
    from kernelab.harness.records import save_records, write_atomically
    from kernelab.output import to_jsonable

    folder = save_folder(run, "kernelab ladder hgemm --save", "hgemm")
    folder.mkdir(parents=True, exist_ok=True)
    if records:
        save_records(records, folder / "records.json")
    result["saved_to"] = str(folder)
    write_atomically(folder / "summary.json",
                     json.dumps(to_jsonable(result), indent=2, default=str) + "\n")  # fmt: skip
    return folder


def save_tuning(run: GemmRun, document: dict) -> Path:
    """sgemm --tune's winners as tuned_<card>.json in the committed file's form (gpu, measured,
    source, winners): copied to src/kernelab/ladders/sgemm/, a card's committed winners."""
    from kernelab.harness.ceilings import this_gpu
    from kernelab.harness.records import card_folder, write_atomically

    key = this_gpu("kernelab ladder sgemm --tune").key
    folder = save_folder(run, "kernelab ladder sgemm --tune")
    path = folder / f"tuned_{card_folder(key) or key}.json"
    kept = {k: document[k] for k in ("gpu", "measured", "source", "winners")}
    write_atomically(path, json.dumps(kept, indent=2) + "\n")
    return path


def render_checks(checks: dict[str, list[dict]], console) -> None:
    """Per step: how many shapes were checked and whether every answer was right."""
    from kernelab.output import Table

    table = Table(title="correctness against the float64 reference (nothing timed: --no-time)")
    for column in ("step", "shapes", "verdict"):
        table.add_column(column, justify="left" if column == "step" else "right")
    for step, rows in checks.items():
        wrong = sum(not c["ok"] for c in rows)
        verdict = f"[red]{wrong} wrong[/red]" if wrong else "[green]all right[/green]"
        table.add_row(step, str(len(rows)), verdict)
    console.print(table)


def render_candidates(rows: list[dict], console) -> None:
    """sgemm --prebuild: every tile candidate's build."""
    from kernelab.output import Table

    if not rows:
        return
    table = Table(title="every tile candidate, compiled (--prebuild)")
    for column in ("step", "defines", "regs", "spills", "cache"):
        table.add_column(column, justify="left" if column in ("step", "defines") else "right")
    for r in rows:
        defines = " ".join(f"{k}={v}" for k, v in r["defines"].items()) or "-"
        spills = f"[red]{r['spill_bytes']}[/red]" if r["spill_bytes"] else "0"
        table.add_row(r["step"], defines, str(r["registers"]), spills,
                      "hit" if r["cached"] else "built")  # fmt: skip
    console.print(table)


def render_tuning(result: dict, console) -> None:
    """sgemm --tune: each candidate's rate per step and size, the winner marked."""
    from kernelab.output import Table

    for run in result["runs"]:
        table = Table(title=f"{run['step']} tile candidates at {run['size']}^3 on "
                            f"{result['gpu']} (cold L2): winner for the "
                            f"{run['shape_class']} shape class")  # fmt: skip
        for column in ("defines", "GFLOP/s", ""):
            table.add_column(column, justify="left" if column == "defines" else "right")
        for r in run["results"]:
            defines = " ".join(f"{k}={v}" for k, v in r["defines"].items())
            rate = (
                "[red]wrong answer: not timed[/red]" if r["ms"] is None else f"{r['gflops']:,.0f}"
            )
            table.add_row(defines, rate, "winner" if r["defines"] == run["winner"] else "")
        console.print(table)
    console.print("the winners are this GPU's tiles from now on (the kernelab cache's tuning "
                  "file)")  # fmt: skip
    if result.get("saved_to"):
        console.print(f"winners: {result['saved_to']}")


def nothing_saved(run: GemmRun) -> None:
    if run.save:
        note("--save: nothing written (no checks or timings without a GPU)")
