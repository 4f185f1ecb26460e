"""`kernelab ladder sgemm|hgemm`: the fp32 SGEMM ladder and the Hopper bf16 GEMM ladder
against cuBLAS.

Without a GPU (nvcc present, or a warm cubin cache) it prints the compile report: registers,
shared memory, spills and the SASS facts of every step, and says that timing needs a GPU.
With a GPU it checks every step at every size, then times every step and cuBLAS fp32 in the
same run (cold L2), and prints GFLOP/s, % of cuBLAS and the speedup over the previous step
beside the speedup that step predicted.

With --profile it profiles every step once under Nsight Compute at one size (default 4096)
and checks that the metric each step claims to improve moved the right way against the step
before: per step, the metric, the previous and the new value, the expected direction and
PASS/FAIL. --import REPORT does the same from a saved report, without a GPU.

--prebuild compiles every step and every tile candidate, then stops (no GPU used); --tune
is the tile search of the tunable steps (the winners become this GPU's tiles; --save writes
them in the committed file's form); --no-time checks every step and times nothing. Exit
status 1 when a step gave wrong answers (ladder_gemm.py reads these options).

`kernelab ladder hgemm` (ladder_hgemm.py; the engine is ladders/hgemm/ladder.py): without a
GPU, or with --prebuild, the compile report and each step's pipeline lens (Little's law at
its tiles, on the H200 or the detected GPU); with one, every step checked at the awkward
shapes and the timed sizes, then timed beside cuBLAS bf16 in each --mode (default cold and
graph), one table per mode with the lens beside each step; --bracket, --rounds N and --pairs
N add the measures that cancel the card's drift, and --save writes the run as summary.json
and records.json where `kernelab lab` reads them. --profile: each step once under ncu at one
size (tensor pipe, top stall, bottleneck) beside the evidence the step claims.

`kernelab ladder transpose|histogram` (engines in ladders/transpose/ladder.py and
ladders/histogram/ladder.py): without a GPU the compile report and one line on what needs a
GPU; with one, every step checked exactly, then timed (cold) beside torch and a copy of the
same bytes: GB/s, % of the copy bandwidth, speedup over the step before and over torch.
Transpose sizes are ROWSxCOLS or N (square); histogram sizes are value counts, timed for
uniform and skewed (one bin) data. --profile: each step's proof metric under ncu.

`kernelab ladder scan` (engine in ladders/scan/ladder.py): prefix sums, fp32 or int32.
Without a GPU the compile report of every kernel of every step; with one, every step checked
(inclusive and exclusive), then timed beside torch.cumsum, CUB and a copy of the same bytes.

`--gpus N` (2 or more) or `--ray-address ADDR`, any ladder: its sizes spread over GPUs through
Ray, one size per task with every step and anchor timed on that one card; the usual table,
rows and records naming their GPU, records saved per card (ladder_spread.py, docs/spread.md).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Annotated

import typer

from kernelab.commands.ladder_gemm import (
    SAVE_HELP,
    GemmRun,
    gemm_run,
    given_options,
    listed_are,
    nothing_saved,
    render_candidates,
    render_checks,
    render_tuning,
    save_tuning,
)
from kernelab.commands.ladder_hgemm import run_hgemm
from kernelab.commands.ladder_primitives import (
    PRIMITIVE_DEFAULT_SIZES,
    PRIMITIVE_LADDERS,
    PRIMITIVE_PROFILE_SIZES,
    REDUCE_DEFAULT_PROFILE_SIZE,
    REDUCE_DEFAULT_SIZES,
    SCAN_DEFAULT_SIZES,
    SCAN_PROFILE_SIZE,
    _or_default,
    _primitive_ladder,
    _reduce,
    _scan,
    parse_counts,  # noqa: F401  (benchmarks/reduce_ladder.py reads reduce sizes through here)
    parse_dtypes,  # noqa: F401
)
from kernelab.commands.ladder_spread import (
    DEFAULT_TIMEOUT_S,
    LadderAddress,
    LadderGpus,
    LadderResume,
    LadderTasks,
    run_spread,
    spread_from_options,
)
from kernelab.commands.ladder_tables import VERDICT_STYLE as _VERDICT_STYLE
from kernelab.commands.ladder_tables import fmt as _fmt
from kernelab.commands.ladder_tables import gpu_at
from kernelab.commands.ladder_tables import has_gpu as _has_gpu
from kernelab.commands.ladder_tables import nothing_to_write as _nothing_to_write
from kernelab.commands.ladder_tables import num as _num
from kernelab.commands.ladder_tables import print_fitted as _print_fitted
from kernelab.commands.options import (
    COUNT_FORMS,
    RECORD_SUFFIXES,
    comma_items,
    max_time_option,
    out_file_option,
    parse_count,
)
from kernelab.errors import KernelabError, NoGPUError, output_folder, positive_number, unknown
from kernelab.output import JsonOption, emit, note

LADDERS = ("sgemm", "hgemm", "reduce")
DEFAULT_SIZES = "1024,2048,4096,8192"
DEFAULT_PROFILE_SIZE = "4096"
HGEMM_DEFAULT_SIZES = "2048,4096,8192"


GEMM_MAX_SIZE = 1 << 31  # the GEMM kernels take int32 M, N and K


def parse_sizes(spec: str) -> list[int]:
    """Square GEMM sizes N: "1024,4K,2^13" -> [1024, 4096, 8192]."""
    return [
        parse_count(
            part,
            form=f"GEMM ladder sizes are positive square sizes N ({COUNT_FORMS})",
            below=GEMM_MAX_SIZE,
            too_large="GEMM ladder sizes must be below 2^31 (the kernels take int32 dimensions)",
        )
        for part in comma_items(spec, "--sizes", "1024,4096")
    ]


SIZES_HELP = (
    "Sizes, comma-separated, each a count such as 4096, 4K (K/M/G = 2^10/2^20/2^30) or 2^12. "
    f"sgemm, hgemm: square N (default {DEFAULT_SIZES}; hgemm {HGEMM_DEFAULT_SIZES}); "
    f"reduce: element counts (default {REDUCE_DEFAULT_SIZES}); scan: element counts "
    f"(default {SCAN_DEFAULT_SIZES}); histogram: value counts (default "
    f"{PRIMITIVE_DEFAULT_SIZES['histogram']}); transpose: ROWSxCOLS or N for N x N (default "
    f"{PRIMITIVE_DEFAULT_SIZES['transpose']}). With --profile one size (default "
    f"{DEFAULT_PROFILE_SIZE}; reduce {REDUCE_DEFAULT_PROFILE_SIZE}, scan {SCAN_PROFILE_SIZE}, "
    f"histogram {PRIMITIVE_PROFILE_SIZES['histogram']}, transpose "
    f"{PRIMITIVE_PROFILE_SIZES['transpose']})."
)


PLOT_SUFFIXES = (".png", ".svg")


def writable_path(path: Path, option: str) -> Path:
    """`path` when a file can be written there, else a one-line KernelabError; checked before
    any work starts. Nothing is left behind: the folders it would create are only looked at,
    and the probe file in the nearest existing folder is removed at once."""
    if path.is_dir():
        raise KernelabError(f"{option} {path} is a folder; give a file name")
    folder = path.parent.absolute()
    while not folder.exists():
        folder = folder.parent
    if not folder.is_dir():
        raise KernelabError(f"{option} {path}: {folder} is not a folder")
    try:
        fd, probe = tempfile.mkstemp(prefix=".kernelab-write-check-", dir=folder)
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise KernelabError(f"{option} {path} cannot be written ({folder}: {reason})") from None
    os.close(fd)
    os.unlink(probe)
    return path


def check_outputs(out: str | None, plot: Path | None) -> Path | None:
    """--out and --plot refused before any work when they could not be written; --out as a
    Path. --out writes records, which harness.records writes as plain JSON: a .json name."""
    if plot is not None and plot.suffix.lower() not in PLOT_SUFFIXES:
        raise KernelabError(f"--plot writes .png or .svg, not {plot.suffix or plot.name!r}")
    out_path = None
    if out is not None:
        if not out.strip():
            raise KernelabError("--out needs a path, not an empty string")
        out_path = Path(out).expanduser()
        if out_path.suffix.lower() not in RECORD_SUFFIXES and not out_path.is_dir():
            raise KernelabError(f"--out writes .json files; '{out}' ends in "
                                f"{out_path.suffix or 'no suffix'}")  # fmt: skip
    for option, path in (("--out", out_path), ("--plot", plot)):
        if path is not None:
            writable_path(path, option)
    return out_path


def check_max_time(max_time: float) -> None:
    positive_number(max_time, "--max-time", "seconds")


def _render_verification(result: dict, console) -> None:
    from kernelab.output import Table

    table = Table(
        title=f"SGEMM ladder verified with Nsight Compute at {result['size']}^3 "
        f"on {result['gpu'] or 'an unnamed GPU'}"
    )
    for column in ("step", "metric", "previous", "this step", "ratio", "expected", "verdict"):
        table.add_column(column, justify="left" if column in ("step", "metric") else "right")
    for step in result["steps"]:
        label = step["step"]
        if step["previous"]:
            label += f"\nvs {step['previous'].removeprefix('sgemm:')}"
        for i, c in enumerate(step["checks"]):
            style = _VERDICT_STYLE.get(c["verdict"], "")
            verdict = c["verdict"] if c["required"] else f"{c['verdict'].lower()} (info)"
            table.add_row(
                label if i == 0 else "", c["quantity"], _num(c["previous"]), _num(c["value"]),
                _fmt(c["ratio"], ".2f") + "x" if c["ratio"] is not None else "-",
                c["requirement"], f"[{style}]{verdict}[/{style}]" if style else verdict,
            )  # fmt: skip
        table.add_section()
    console.print(table)

    times = Table(title="per step (ncu kernel time, caches flushed, clocks unlocked)")
    for column in ("step", "technique", "ms", "speedup", "expected", "ncu diagnosis", "verdict"):
        times.add_column(
            column, justify="right" if column in ("ms", "speedup", "expected") else "left"
        )
    for step in result["steps"]:
        diagnosis = step.get("diagnosis") or {}
        where = "/".join(x for x in (diagnosis.get("bottleneck"), diagnosis.get("unit")) if x)
        style = _VERDICT_STYLE.get(step["verdict"], "")
        times.add_row(
            step["step"], step["technique"], _fmt(step["duration_ms"], ".3f"),
            _fmt(step["speedup_vs_prev"], ".2f"), _fmt(step["expected_speedup"], ".2f"),
            where or "-", f"[{style}]{step['verdict']}[/{style}]" if style else step["verdict"],
        )  # fmt: skip
    console.print(times)
    for step in result["steps"]:
        for c in step["checks"]:
            if c["required"] and c["verdict"] != "PASS":
                console.print(f"{step['step']} {c['quantity']}: {c['verdict']}. Claim: {c['why']}")
    console.print(f"ncu report: {result['report']}")
    if result.get("records"):
        console.print(f"records: {result['records']}")


def _tile_text(tiles: dict) -> str:
    """ "128x256x8, 3 stages": the block tile BM x BN x BK a step was compiled with."""
    if "BM" not in tiles or "BN" not in tiles:
        return "-"
    text = "x".join(str(tiles[k]) for k in ("BM", "BN", "BK") if k in tiles)
    stages = tiles.get("stages", 1)
    return text + (f", {stages} stages" if stages > 1 else "")


def _render_compile(rows: list[dict], console) -> None:
    columns = (
        "step",
        "technique",
        "tile",
        "regs",
        "threads",
        "smem static/dyn",
        "spills",
        "SASS",
    )
    cells = []
    for r in rows:
        sass = r["sass"]
        facts = ", ".join(
            f"{label} {sass[key]}"
            for key, label in (("ldg_128", "LDG.128"), ("lds_128", "LDS.128"), ("ldgsts", "LDGSTS"))
            if sass.get(key)
        )
        if sass and (sass.get("local_loads") or sass.get("local_stores")):
            facts += " LOCAL MEMORY"
        spills = r["spill_store_bytes"] + r["spill_load_bytes"]
        cells.append([
            r["step"], r["technique"], _tile_text(r.get("tiles") or {}), str(r["registers"]),
            str(r["threads"]), f"{r['static_smem_bytes']}/{r['dynamic_smem_bytes']}",
            "[red]" + str(spills) + "[/red]" if spills else "0", facts or "-",
        ])  # fmt: skip
    _print_fitted(
        console, "SGEMM ladder: what ptxas and the SASS say (sm_90)", columns, cells,
        left=("step", "technique", "SASS"),
    )  # fmt: skip


def _render_timing(result: dict, console) -> None:
    columns = ("step", "technique", "ms", "GFLOP/s", "% cuBLAS", "speedup", "expected")
    if not result.get("timed", True):
        by_step: dict[str, list[dict]] = {}
        for c in result["checks"]:
            by_step.setdefault(c["step"], []).append(c)
        render_checks(by_step, console)
    for size in result["sizes"] if result["rows"] else ():
        cells = [
            [
                r["step"],
                r["technique"],
                _fmt(r["median_ms"], ".3f"),
                _fmt(r["gflops"], ",.0f"),
                _fmt(r["pct_of_cublas"], ".1f"),
                _fmt(r["speedup_vs_prev"], ".2f"),
                _fmt(r["expected_speedup"], ".2f") if r["speedup_vs_prev"] is not None else "-",
            ]  # fmt: skip
            for r in result["rows"]
            if r["size"] == size
        ]
        _print_fitted(
            console, f"SGEMM fp32 {size}^3 on {gpu_at(result, size)} ({result['mode']} L2)",
            columns, cells, left=("step", "technique"),
        )  # fmt: skip
    failed = [c for c in result["checks"] if not c["ok"]]
    for c in failed:
        console.print(f"[red]{c['step']} wrong at {c['shape']}: {c['message']}[/red]")
    if result.get("records"):
        console.print(f"records: {result['records']}")
    if result.get("plot"):
        console.print(f"chart: {result['plot']}")


def register(app: typer.Typer) -> None:
    @app.command()
    def ladder(
        name: Annotated[
            str,
            typer.Argument(
                help="Which ladder: sgemm, hgemm, reduce, transpose, histogram or scan."
            ),
        ],
        sizes: Annotated[str | None, typer.Option("--sizes", help=SIZES_HELP)] = None,
        steps: Annotated[
            str | None,
            typer.Option("--steps", help='Steps to run: "1,5,10" or "6-11" (default all).'),
        ] = None,
        plot: Annotated[
            Path | None,
            typer.Option("--plot", help="sgemm: draw the bar chart to this PNG/SVG file."),
        ] = None,
        out: out_file_option("Write the timing records to this JSON file.") = None,
        mode: Annotated[
            list[str] | None,
            typer.Option(
                "--mode",
                help="Timing mode: cold, hot or graph (sgemm: one, default cold; hgemm: "
                "repeat it or give a comma list, default cold,graph).",
            ),
        ] = None,
        max_time: max_time_option("step and size") = 2.0,
        profile: Annotated[
            bool,
            typer.Option(
                "--profile",
                help="Profile each step once with Nsight Compute and check that the metric it "
                "claims to improve moved the right way against the step before.",
            ),
        ] = False,
        import_path: Annotated[
            Path | None,
            typer.Option(
                "--import",
                help="With --profile: verify a saved ncu report of the ladder (no GPU needed).",
            ),
        ] = None,
        pairs: Annotated[
            int,
            typer.Option(
                "--pairs",
                help="hgemm: then time each step against cuBLAS in N alternating pairs of calls "
                "per size, cold unless --pair-modes (the drift-free measure the gate judges; "
                "0: none).",
            ),
        ] = 0,
        prebuild: Annotated[
            bool,
            typer.Option(
                "--prebuild",
                help="sgemm, hgemm: compile every step (sgemm: and every tile candidate of a "
                "tunable step) into the kernel cache, show what ptxas says, and stop; no GPU "
                "needed or used (with KERNELAB_CACHE in the working tree, the cubins travel "
                "to a GPU machine without nvcc).",
            ),
        ] = False,
        tune: Annotated[
            bool,
            typer.Option(
                "--tune",
                help="sgemm: the tile search. Every candidate of the tunable steps is checked, "
                "then timed cold (--max-time each) at each --sizes (default 4096,1024: a large "
                "and a small shape class); the winners become this GPU's tiles.",
            ),
        ] = False,
        no_time: Annotated[
            bool,
            typer.Option(
                "--no-time", help="sgemm, hgemm: check every step at every shape, time nothing."
            ),
        ] = False,
        rounds: Annotated[
            int,
            typer.Option(
                "--rounds",
                help="hgemm: then N interleaved rounds per size, cold (cuBLAS, every step, "
                "cuBLAS again; each step against the faster cuBLAS timing around it; 0: none).",
            ),
        ] = 0,
        bracket: Annotated[
            bool,
            typer.Option(
                "--bracket",
                help="hgemm: time cuBLAS again after the steps (row 'torch.mm (again)'): how "
                "far the card's clocks drifted over the run.",
            ),
        ] = False,
        pair_modes: Annotated[
            str | None,
            typer.Option(
                "--pair-modes",
                help="hgemm: the modes of the --pairs pairs, cold and/or hot (default cold).",
            ),
        ] = None,
        save: Annotated[bool, typer.Option("--save", help=SAVE_HELP)] = False,
        save_dir: Annotated[
            str | None,
            typer.Option("--save-dir", metavar="DIR", help="--save, into this folder."),
        ] = None,
        dtype: Annotated[
            str | None,
            typer.Option(
                "--dtype",
                help="reduce: input dtypes, fp32, bf16, fp16 or a comma list (default fp32); "
                "transpose: fp32 or bf16 (default fp32); histogram: int32 or uint8 (default int32); "
                "scan: fp32 or int32 (default fp32).",
            ),
        ] = None,
        bins: Annotated[
            int | None,
            typer.Option("--bins", help="histogram: the number of bins, 1..4096 (default 256)."),
        ] = None,
        gpus: LadderGpus = None,
        ray_address: LadderAddress = None,
        resume: LadderResume = False,
        tasks_dir: LadderTasks = None,
        timeout: Annotated[
            float,
            typer.Option(
                "--timeout", help="Seconds per size on a spread ladder before its GPU is cut."
            ),
        ] = DEFAULT_TIMEOUT_S,
        as_json: JsonOption = False,
    ) -> None:
        """A kernel ladder, step by step: compile report, correctness, timing against its
        baseline in the same run (sgemm: cuBLAS fp32; hgemm: cuBLAS bf16 with the pipeline
        lens; reduce: torch.sum and CUB against the read ceiling; transpose, histogram: torch
        against the copy; scan: torch.cumsum and CUB against the copy); with --profile, each step's proving counter under Nsight Compute."""
        from kernelab.ladders.sgemm import ladder as sgemm_ladder

        # --timeout only acts on a spread run, but a script passes the same options to the run
        # here and to the spread one: its value is checked in both, never ignored unread.
        positive_number(timeout, "--timeout", "seconds")
        tasks_path = output_folder(tasks_dir, "--tasks-dir")
        spread = spread_from_options(
            gpus, ray_address, resume, tasks_path, timeout, profile=profile, plot=plot
        )
        given = given_options(prebuild=prebuild, tune=tune, no_time=no_time, rounds=rounds,
                              bracket=bracket, pair_modes=pair_modes, save=save,
                              save_dir=save_dir)  # fmt: skip
        if given and name in ("reduce", "scan", *PRIMITIVE_LADDERS):
            raise KernelabError(f"{listed_are(given)} for the GEMM ladders (sgemm, hgemm), "
                                f"not the {name} ladder")  # fmt: skip
        if name == "scan":
            if plot is not None or import_path is not None or pairs or bins is not None:
                raise KernelabError(
                    "--plot, --import, --pairs and --bins are not for the scan ladder"
                )
            if mode and len(mode) > 1:
                raise KernelabError("the scan ladder times one mode per run; give one --mode")
            check_max_time(max_time)
            out = check_outputs(out, None)
            _scan(sizes, steps, mode[0] if mode else "cold", max_time, out, dtype, profile,
                  as_json, spread=spread)  # fmt: skip
            return
        if name in PRIMITIVE_LADDERS:
            if plot is not None or import_path is not None or pairs:
                raise KernelabError(f"--plot, --import and --pairs are not for the {name} ladder")
            if mode and len(mode) > 1:
                raise KernelabError(f"the {name} ladder times one mode per run; give one --mode")
            check_max_time(max_time)
            out = check_outputs(out, None)
            _primitive_ladder(
                name, sizes, steps, mode[0] if mode else "cold", max_time, out, profile,
                dtype, bins, as_json, spread=spread,
            )  # fmt: skip
            return
        if bins is not None:
            raise KernelabError("--bins is for the histogram ladder")
        if name not in LADDERS:
            raise unknown("ladder", name, (*LADDERS, *PRIMITIVE_LADDERS, "scan"))
        check_max_time(max_time)
        out = check_outputs(out, plot)
        if name == "reduce":
            if plot is not None or import_path is not None or pairs:
                raise KernelabError("--plot, --import and --pairs are for the GEMM ladders")
            _reduce(sizes, steps, dtype, mode, max_time, out, profile, as_json, spread=spread)
            return
        if dtype is not None:
            raise KernelabError(
                "--dtype is for the reduce, transpose, histogram and scan ladders; the GEMM "
                "ladders fix theirs (sgemm fp32, hgemm bf16)"
            )
        run = gemm_run(
            name, given, rounds=rounds, pair_modes=pair_modes, save_dir=save_dir, pairs=pairs,
            profile=profile, spread=spread,
            others={"--sizes": sizes is not None, "--out": out is not None,
                    "--plot": plot is not None, "--mode": bool(mode), "--pairs": pairs != 0,
                    "--import": import_path is not None},
        )  # fmt: skip
        if name == "hgemm":
            if plot is not None or import_path is not None:
                raise KernelabError("--plot and --import are for the sgemm ladder only")
            size_list = parse_sizes(
                _or_default(sizes, DEFAULT_PROFILE_SIZE if profile else HGEMM_DEFAULT_SIZES)
            )
            run_hgemm(size_list, steps, mode, max_time, out, profile, as_json, pairs,
                      spread=spread, run=run)  # fmt: skip
            return
        if pairs:
            raise KernelabError("--pairs is for the hgemm ladder only")
        if mode and len(mode) > 1:
            raise KernelabError("the sgemm ladder times one mode per run; give one --mode")
        mode = mode[0] if mode else "cold"
        if import_path is not None and not profile:
            raise KernelabError("--import goes with --profile: it verifies a saved ncu report")
        if run.tune:
            default_sizes = ",".join(str(size) for size in sgemm_ladder.TUNE_SIZES)
        else:
            default_sizes = DEFAULT_PROFILE_SIZE if profile else DEFAULT_SIZES
        size_list = parse_sizes(_or_default(sizes, default_sizes))
        chosen = sgemm_ladder.parse_steps(steps)
        if profile:
            _verify(sgemm_ladder, chosen, size_list, import_path, out, as_json)
            return
        if run.prebuild:
            _prebuild(sgemm_ladder, chosen, as_json)
            return
        if run.tune:
            _tune(sgemm_ladder, chosen, size_list, max_time, run, as_json)
            return
        _sgemm(sgemm_ladder, chosen, size_list, steps, mode, max_time, out, plot, as_json,
               spread, run)  # fmt: skip


def _sgemm(sgemm_ladder, chosen, size_list: list[int], steps, mode: str, max_time: float, out,
           plot, as_json: bool, spread, run: GemmRun) -> None:  # fmt: skip
    """The SGEMM ladder: compile report; with a GPU every step checked, then timed beside
    cuBLAS fp32 (or, --no-time, only checked); spread over GPUs when asked."""
    from kernelab.harness.timing import MODES

    name = "sgemm"
    if spread is not None:
        spread.start()
    compiled = sgemm_ladder.compile_report(chosen, progress=note)
    if spread is not None:
        if mode not in MODES:
            raise unknown("timing mode", mode, MODES)
        run_spread(
            name, spread, size_list, steps=steps, mode=mode, max_time=max_time, options={},
            out=out, as_json=as_json, base={"ladder": name, "compile": compiled},
            render=_render_timing,
        )  # fmt: skip
        return
    if not _has_gpu():
        note("timing and checking need a CUDA GPU; showing the compile report only")
        _nothing_to_write(out, plot)
        nothing_saved(run)
        emit(
            {"ladder": name, "gpu": None, "compile": compiled, "timed": False},
            as_json,
            lambda console: _render_compile(compiled, console),
        )
        return

    if mode not in MODES:
        raise unknown("timing mode", mode, MODES)
    shapes = [{"m": s, "n": s, "k": s} for s in size_list]
    checks = sgemm_ladder.check_steps(chosen, shapes, progress=note)
    bad = {c["step"] for c in checks if not c["ok"]}
    if bad and not run.no_time:
        note(f"not timing steps that gave wrong answers: {', '.join(sorted(bad))}")
    timed_steps = [s for s in chosen if s.name not in bad]
    rows, records = [], []
    if not run.no_time:
        # Steps 1-3 take seconds per call above 4096^3; their story is told by then.
        rows, records = sgemm_ladder.time_ladder(
            timed_steps, size_list, mode=mode, max_time_s=max_time, progress=note,
            skip_slow_above=4096,
        )  # fmt: skip
    result = {
        "ladder": name,
        "gpu": records[0].gpu if records else _gpu_name(),
        "mode": mode,
        "sizes": size_list,
        "compile": compiled,
        "checks": checks,
        "rows": rows,
        "timed": not run.no_time,
    }
    if out is not None:
        from kernelab.harness.records import save_records

        result["records"] = str(save_records(records, out))
    if plot is not None:
        result["plot"] = str(sgemm_ladder.plot(rows, plot))
    emit(result, as_json, lambda console: _render_timing(result, console))
    if bad:
        raise typer.Exit(1)


def _gpu_name() -> str:
    import torch

    return torch.cuda.get_device_name()


def _prebuild(sgemm_ladder, chosen, as_json: bool) -> None:
    """--prebuild: the compile report and every tile candidate compiled; nothing runs."""
    compiled = sgemm_ladder.compile_report(chosen, progress=note)
    candidates = sgemm_ladder.prebuild(chosen, progress=note)
    result = {"ladder": "sgemm", "gpu": None, "compile": compiled, "candidates": candidates,
              "timed": False, "prebuilt": True}  # fmt: skip

    def show(console) -> None:
        _render_compile(compiled, console)
        render_candidates(candidates, console)

    emit(result, as_json, show)


def _tune(sgemm_ladder, chosen, size_list: list[int], max_time: float, run: GemmRun,
          as_json: bool) -> None:  # fmt: skip
    """--tune: the tile search of the tunable steps among `chosen`, on this GPU."""
    sgemm_ladder.tunable_steps(chosen)  # a list without one is refused before the GPU is asked
    if not _has_gpu():
        raise NoGPUError("ladder sgemm --tune needs a CUDA GPU; none found (--prebuild "
                         "compiles every candidate without one)")  # fmt: skip
    document = sgemm_ladder.tune_ladder(chosen, size_list, max_time_s=max_time, progress=note)
    result = {"ladder": "sgemm", "tuned": True, "sizes": size_list, **document}
    if run.save:
        result["saved_to"] = str(save_tuning(run, document))
    emit(result, as_json, lambda console: render_tuning(result, console))


def _verify(sgemm_ladder, chosen, size_list: list[int], import_path, out, as_json: bool) -> None:
    if len(size_list) != 1:
        raise KernelabError(
            "--profile verifies the ladder at one size (counts compare only at one shape); "
            "give one, e.g. --sizes 4096"
        )
    size = size_list[0]
    if import_path is not None:
        result, records = sgemm_ladder.verify_report(import_path, chosen, size, progress=note)
    else:
        if not _has_gpu():
            raise NoGPUError(
                "ladder sgemm --profile needs a CUDA GPU and ncu; none found "
                "(--import REPORT verifies a saved report anywhere)"
            )
        result, records = sgemm_ladder.verify_ladder(chosen, size, progress=note)
    if out is not None and records:
        from kernelab.harness.records import save_records

        result["records"] = str(save_records(records, out))
    emit(result, as_json, lambda console: _render_verification(result, console))
