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

`kernelab ladder hgemm` (the engine is ladders/hgemm/ladder.py): without a GPU the
compile report and each step's pipeline lens (Little's law at its tiles, on the H200 or the
detected GPU); with one, every step checked at the awkward shapes and the timed sizes, then
timed beside cuBLAS bf16 in each --mode (default cold and graph), one table per mode with the
lens beside each step. --profile: each step once under ncu at one size (tensor pipe, top
stall, bottleneck) beside the evidence the step claims.

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
    for size in result["sizes"]:
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
                "per size, cold (the drift-free measure the gate judges; 0: none).",
            ),
        ] = 0,
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
        if name == "hgemm":
            if plot is not None or import_path is not None:
                raise KernelabError("--plot and --import are for the sgemm ladder only")
            _hgemm(sizes, steps, mode, max_time, out, profile, as_json, pairs, spread=spread)
            return
        if pairs:
            raise KernelabError("--pairs is for the hgemm ladder only")
        if mode and len(mode) > 1:
            raise KernelabError("the sgemm ladder times one mode per run; give one --mode")
        mode = mode[0] if mode else "cold"
        if import_path is not None and not profile:
            raise KernelabError("--import goes with --profile: it verifies a saved ncu report")
        size_list = parse_sizes(
            _or_default(sizes, DEFAULT_PROFILE_SIZE if profile else DEFAULT_SIZES)
        )
        chosen = sgemm_ladder.parse_steps(steps)
        if profile:
            _verify(sgemm_ladder, chosen, size_list, import_path, out, as_json)
            return
        if spread is not None:
            spread.start()
        compiled = sgemm_ladder.compile_report(chosen, progress=note)
        from kernelab.harness.timing import MODES

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
        if bad:
            note(f"not timing steps that gave wrong answers: {', '.join(sorted(bad))}")
        timed_steps = [s for s in chosen if s.name not in bad]
        # Steps 1-3 take seconds per call above 4096^3; their story is told by then.
        rows, records = sgemm_ladder.time_ladder(
            timed_steps, size_list, mode=mode, max_time_s=max_time, progress=note,
            skip_slow_above=4096,
        )  # fmt: skip
        result = {
            "ladder": name,
            "gpu": records[0].gpu if records else None,
            "mode": mode,
            "sizes": size_list,
            "compile": compiled,
            "checks": checks,
            "rows": rows,
            "timed": True,
        }
        if out is not None:
            from kernelab.harness.records import save_records

            result["records"] = str(save_records(records, out))
        if plot is not None:
            result["plot"] = str(sgemm_ladder.plot(rows, plot))
        emit(result, as_json, lambda console: _render_timing(result, console))


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


# --- the Hopper bf16 ladder (`kernelab ladder hgemm`) ----------------------------------------


def _lens_spec():
    """The GPU the pipeline lens describes: this one when it is in the catalog, else the
    default card every command describes."""
    from kernelab.hardware import get_gpu, resolve_gpu
    from kernelab.hardware.detect import DEFAULT_GPU

    if _has_gpu():
        try:
            return resolve_gpu("auto")
        except KernelabError as exc:
            note(f"{exc}; the pipeline lens describes the default card, {DEFAULT_GPU}")
    return get_gpu(DEFAULT_GPU)


def _hgemm(sizes, steps, modes, max_time: float, out, profile: bool, as_json: bool,
           pairs: int = 0, spread=None) -> None:  # fmt: skip
    from kernelab.ladders.hgemm import ladder as hgemm_ladder

    size_list = parse_sizes(
        _or_default(sizes, DEFAULT_PROFILE_SIZE if profile else HGEMM_DEFAULT_SIZES)
    )
    chosen = hgemm_ladder.parse_steps(steps)
    for given in modes or ():
        comma_items(given, "--mode", "cold,graph")  # a blank is refused, not skipped
    mode_list = hgemm_ladder.parse_modes(modes)
    if pairs < 0 or (pairs and profile):
        raise KernelabError("--pairs takes a count >= 0 and does not go with --profile")
    if profile and len(size_list) != 1:
        raise KernelabError("--profile runs the ladder at one size; give one, e.g. --sizes 4096")
    if profile and not _has_gpu():
        raise NoGPUError("ladder hgemm --profile needs a CUDA GPU and ncu; none found")
    if spread is not None:
        spread.start()

    compiled = hgemm_ladder.compile_report(chosen, progress=note)
    spec = _lens_spec()
    lenses = hgemm_ladder.ladder_lenses(chosen, spec, compiled)
    result = {
        "ladder": "hgemm",
        "gpu": None,
        "lens_gpu": spec.id,
        "steps": [s.name for s in chosen],
    }
    if profile:
        rows = hgemm_ladder.profile_steps(chosen, size_list[0], progress=note)
        result.update(
            gpu=next((r["device"] for r in rows if r.get("device")), None),
            size=size_list[0],
            profile=rows,
            lens=lenses,
        )
        emit(result, as_json, lambda console: _render_hgemm_profile(result, console))
        return
    if spread is not None:
        result.update(compile=compiled, lens=lenses)
        run_spread(
            "hgemm", spread, size_list, steps=steps, mode=mode_list[0], max_time=max_time,
            options={"modes": mode_list, "pairs": pairs}, out=out, as_json=as_json, base=result,
            render=_render_hgemm_timing,
        )  # fmt: skip
        return
    if not _has_gpu():
        note("timing and checking need a CUDA GPU; showing the compile report and the lens only")
        _nothing_to_write(out, None)
        result.update(compile=compiled, lens=lenses, timed=False)
        emit(result, as_json, lambda console: _render_hgemm_compile(result, console))
        return

    import torch

    checks = hgemm_ladder.check_steps(
        chosen, progress=note, shapes=hgemm_ladder.check_shapes(size_list)
    )
    good = hgemm_ladder.correct_steps(chosen, checks)
    wrong = [s.name for s in chosen if s not in good]
    if wrong:
        note(f"not timing steps that gave wrong answers: {', '.join(wrong)}")
    grids = hgemm_ladder.persistent_grids(good, size_list, progress=note)
    rows, records = hgemm_ladder.time_ladder(
        good, size_list, mode_list, max_time_s=max_time, progress=note
    )
    if pairs:
        result["paired"] = [row for size in size_list
                            for row in hgemm_ladder.time_paired(good, size, pairs, progress=note)]  # fmt: skip
    result.update(
        gpu=records[0].gpu if records else torch.cuda.get_device_name(),
        sizes=size_list,
        modes=mode_list,
        compile=compiled,
        lens=lenses,
        checks=checks,
        all_correct=not wrong,
        wrong=wrong,
        grids=grids,
        timing=rows,
        timed=True,
    )
    if out is not None and records:
        from kernelab.harness.records import save_records

        result["records"] = str(save_records(records, out))
    emit(result, as_json, lambda console: _render_hgemm_timing(result, console))


_LENS_COLUMNS = ("stages", "KiB/SM in flight", "x Little", "stages for HBM/L2", "load TB/s (L2)")


def _lens_cells(lens: dict | None) -> list[str]:
    if not lens or "error" in lens:
        return ["-" if lens else ""] * len(_LENS_COLUMNS)
    cover = "" if lens["covers_hbm_latency"] else " [red]short[/red]"
    return [
        f"{lens['stages']} x {lens['blocks_per_sm']} blk",
        f"{lens['bytes_in_flight_per_sm'] / 1024:.0f}",
        f"{lens['in_flight_over_needed']:.1f}",
        f"{lens['stages_needed_hbm']}/{lens['stages_needed_l2']}{cover}",
        f"{lens['load_tbps_demanded']:.1f} ({lens['l2_load_tbps_demanded']:.1f})",
    ]


def _lens_footnote(result: dict, console) -> None:
    some = next((v for v in result["lens"].values() if "error" not in v), None)
    if some is None:
        return
    console.print(
        f"pipeline lens on {result['lens_gpu']}: HBM latency {some['hbm_latency_ns']:.0f} ns, "
        f"L2 {some['l2_latency_ns']:.0f} ns ({some['latency_source']}); Little's law needs "
        f"{some['hbm_in_flight_needed_per_sm'] / 1024:.1f} KiB in flight per SM; 'load TB/s' is "
        "what the tiles read at the full MMA rate, all SMs together"
    )


def _render_hgemm_compile(result: dict, console) -> None:
    from kernelab.output import Table

    columns = ("step", "technique", "regs", "threads", "smem static/dyn", "spills", "SASS")
    cells = []
    for r in result["compile"]:
        claims = r["sass_claims"]
        sass = (
            ", ".join(c if ok else f"[red]no {c}[/red]" for c, ok in claims.items())
            if claims
            else "- (no cuobjdump)"
        )
        spills = r["spill_store_bytes"] + r["spill_load_bytes"]
        cells.append([
            r["step"], r["technique"], str(r["registers"]), str(r["threads"]),
            f"{r['static_smem_bytes']}/{r['dynamic_smem_bytes']}",
            f"[red]{spills}[/red]" if spills else "0", sass,
        ])  # fmt: skip
    _print_fitted(
        console, "Hopper bf16 GEMM ladder: what ptxas and the SASS say (sm_90a)", columns, cells,
        left=("step", "technique", "SASS"),
    )  # fmt: skip

    lens = Table(title=f"pipeline lens at each step's block tile ({result['lens_gpu']})")
    for column in ("step", "block tile", *_LENS_COLUMNS, "HBM bandwidth kept"):
        lens.add_column(column, justify="left" if column == "step" else "right")
    for name, entry in result["lens"].items():
        if "error" in entry:
            lens.add_row(name, "-", *_lens_cells(entry), "-")
            continue
        tile = "x".join(str(x) for x in entry["block_tile"])
        lens.add_row(name, tile, *_lens_cells(entry), f"{entry['hbm_bandwidth_kept_pct']:.0f} %")
    console.print(lens)
    for entry in (e for e in result["lens"].values() if "error" in e):
        console.print(f"[yellow]{entry['error']}[/yellow]")
    _lens_footnote(result, console)


def _render_hgemm_timing(result: dict, console) -> None:
    from kernelab.ladders.hgemm.ladder import same_mode
    from kernelab.output import Table

    names = list(dict.fromkeys(r["impl"] for r in result["timing"]))
    for mode in result["modes"]:
        fallback = any(r["mode"] == "batch" for r in result["timing"] if same_mode(r, mode))
        title = (
            f"bf16 GEMM on {result['gpu']}, {mode} mode"
            + (" (graph capture failed: a plain back-to-back loop)" if fallback else "")
            + ": TFLOP/s (% of cuBLAS, same mode)"
        )
        columns = ("step", *(f"{size}^3" for size in result["sizes"]), *_LENS_COLUMNS)
        rows = []
        for name in names:
            cells = []
            for size in result["sizes"]:
                row = next(
                    (r for r in result["timing"]
                     if (r["impl"], r["size"]) == (name, size) and same_mode(r, mode)),
                    None,
                )  # fmt: skip
                if row is None:
                    cells.append("-")
                elif row["tflops"] is None:  # the B transpose alone: a time and a rate
                    cells.append(f"{row['median_ms'] * 1e3:.0f} us, {row['gbps']:.0f} GB/s")
                else:
                    cells.append(f"{row['tflops']:.0f} ({row['pct_of_cublas']:.1f} %)")
            rows.append([name, *cells, *_lens_cells(result["lens"].get(name))])
        _print_fitted(console, title, columns, rows, left=("step",), drop=_LENS_COLUMNS)
    _lens_footnote(result, console)
    if result["grids"]:
        console.print(
            "persistent grids (blocks): "
            + "; ".join(f"{step} {grid}" for step, grid in result["grids"].items())
        )
    for step, checks in result["checks"].items():
        for c in (c for c in checks if not c["ok"]):
            console.print(f"[red]{step} wrong at {c['shape']}: {c['message']}[/red]")
    if result.get("paired"):
        table = Table(title="cold, in alternating pairs of calls: % of cuBLAS (cuBLAS time / "
                      "step time, median over pairs)")  # fmt: skip
        for column in ("step", "size", "median %", "95 % interval", "pairs ahead"):
            table.add_column(column, justify="left" if column == "step" else "right")
        for r in result["paired"]:
            low, high = r["pct_ci95"]
            table.add_row(r["impl"], f"{r['size']}^3", f"{r['pct_median']:.1f}",
                          f"{low:.1f} - {high:.1f}", f"{r['pairs_ahead']} / {r['pairs']}")  # fmt: skip
        console.print(table)
    if result.get("records"):
        console.print(f"records: {result['records']}")


def _render_hgemm_profile(result: dict, console) -> None:
    from kernelab.output import Table

    table = Table(
        title=f"Hopper bf16 GEMM ladder under Nsight Compute at {result['size']}^3 on "
        f"{result['gpu'] or 'an unnamed GPU'} (one launch each, caches flushed)"
    )
    columns = ("step", "ms", "TFLOP/s", "speedup", "expected", "tensor %", "wgmma %",
               "top stall", "bottleneck", "DRAM GB/s", "L2 hit %")  # fmt: skip
    for column in columns:
        table.add_column(
            column, justify="left" if column in ("step", "top stall", "bottleneck") else "right"
        )
    for r in result["profile"]:
        if not r["found"]:
            table.add_row(r["step"], *["-"] * 4, "[red]no kernel in the report[/red]", *[""] * 5)
            continue
        where = "/".join(x for x in (r["bottleneck"], r["unit"]) if x) or "-"
        table.add_row(
            r["step"], _fmt(r["duration_ms"], ".3f"), _fmt(r["tflops"], ".0f"),
            _fmt(r["speedup_vs_prev"], ".2f"), _fmt(r["expected_speedup"], ".2f"),
            _fmt(r["tensor_pct"], ".1f"), _fmt(r["wgmma_pct"], ".1f"), r["top_stall"] or "-",
            where, _fmt(r["dram_gbps"], ".0f"), _fmt(r["l2_hit_pct"], ".1f"),
        )  # fmt: skip
    console.print(table)
    for r in result["profile"]:
        console.print(f"{r['step']} claims: {r['claimed_evidence']}")
    _lens_footnote(result, console)
    report = next((r.get("report") for r in result["profile"] if r.get("report")), None)
    if report:
        console.print(f"ncu report: {report}")
