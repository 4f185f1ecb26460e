"""`kernelab ladder hgemm`: the Hopper bf16 GEMM ladder against cuBLAS bf16 (the engine is
kernelab.ladders.hgemm.ladder; kernelab.commands.ladder reads the options and dispatches here).

Without a GPU, or with --prebuild, the compile report and each step's pipeline lens (Little's
law at its tiles, on the H200 or the detected GPU). With one, every step checked at the
awkward shapes and the timed sizes, then timed beside cuBLAS bf16 in each --mode, one table
per mode with the lens beside each step; --bracket times cuBLAS again after the steps,
--rounds N in interleaved rounds, --pairs N in alternating pairs of calls (--pair-modes),
--no-time checks only; --save writes the run where `kernelab lab` reads it. Exit status 1
when a step gave wrong answers. --profile: each step once under ncu at one size (tensor
pipe, top stall, bottleneck) beside the evidence the step claims.
"""

from __future__ import annotations

import typer

from kernelab.commands.ladder_gemm import (
    GemmRun,
    nothing_saved,
    render_checks,
    save_hgemm_run,
)
from kernelab.commands.ladder_spread import run_spread
from kernelab.commands.ladder_tables import fmt as _fmt
from kernelab.commands.ladder_tables import has_gpu as _has_gpu
from kernelab.commands.ladder_tables import nothing_to_write as _nothing_to_write
from kernelab.commands.ladder_tables import print_fitted as _print_fitted
from kernelab.commands.options import comma_items
from kernelab.errors import KernelabError, NoGPUError
from kernelab.output import emit, note


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


def run_hgemm(size_list: list[int], steps, modes, max_time: float, out, profile: bool,
              as_json: bool, pairs: int = 0, spread=None, run: GemmRun | None = None) -> None:  # fmt: skip
    """The hgemm ladder at the square sizes `size_list` (parsed by the caller), the other
    options as the command line gave them; `run`: --prebuild, --no-time, --rounds, --bracket,
    --pair-modes and --save, read and checked by ladder_gemm.gemm_run."""
    from kernelab.ladders.hgemm import ladder as hgemm_ladder

    run = run or GemmRun()
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
    if run.prebuild or not _has_gpu():
        if not run.prebuild:
            note("timing and checking need a CUDA GPU; showing the compile report and the lens "
                 "only")  # fmt: skip
            _nothing_to_write(out, None)
            nothing_saved(run)
        result.update(compile=compiled, lens=lenses, timed=False, prebuilt=run.prebuild)
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
    rows, records = [], []
    if not run.no_time:
        rows, records = hgemm_ladder.time_ladder(
            good, size_list, mode_list, max_time_s=max_time, progress=note, bracket=run.bracket
        )
    if run.rounds:
        result["rounds"] = [row for size in size_list
                            for row in hgemm_ladder.time_rounds(good, size, run.rounds,
                                                                progress=note)]  # fmt: skip
    if pairs:
        result["paired"] = [row for mode in run.pair_modes for size in size_list
                            for row in hgemm_ladder.time_paired(good, size, pairs, mode=mode,
                                                                progress=note)]  # fmt: skip
    result.update(
        gpu=records[0].gpu if records else torch.cuda.get_device_name(),
        torch=torch.__version__,
        sizes=size_list,
        modes=[] if run.no_time else mode_list,
        compile=compiled,
        lens=lenses,
        checks=checks,
        all_correct=not wrong,
        wrong=wrong,
        grids=grids,
        timing=rows,
        timed=not run.no_time,
    )
    if out is not None and records:
        from kernelab.harness.records import save_records

        result["records"] = str(save_records(records, out))
    if run.save:
        save_hgemm_run(run, result, records)
    emit(result, as_json, lambda console: _render_hgemm_timing(result, console))
    if wrong:
        raise typer.Exit(1)


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

    if not result.get("timed", True):
        render_checks(result["checks"], console)
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
    if result.get("rounds"):
        table = Table(title="cold, in interleaved rounds (cuBLAS, every step, cuBLAS again): % "
                      "of the faster cuBLAS timing around each round")  # fmt: skip
        for column in ("step", "size", "median %", "range %", "rounds ahead"):
            table.add_column(column, justify="left" if column == "step" else "right")
        for r in result["rounds"]:
            table.add_row(r["impl"], f"{r['size']}^3", f"{r['pct_median']:.1f}",
                          f"{r['pct_min']:.1f} - {r['pct_max']:.1f}",
                          f"{r['rounds_ahead']} / {r['rounds']}")  # fmt: skip
        console.print(table)
    if result.get("paired"):
        table = Table(title="in alternating pairs of calls: % of cuBLAS (cuBLAS time / step "
                      "time, median over pairs)")  # fmt: skip
        for column in ("step", "mode", "size", "median %", "95 % interval", "pairs ahead"):
            table.add_column(column, justify="left" if column == "step" else "right")
        for r in result["paired"]:
            low, high = r["pct_ci95"]
            table.add_row(r["impl"], r.get("mode", "cold"), f"{r['size']}^3",
                          f"{r['pct_median']:.1f}", f"{low:.1f} - {high:.1f}",
                          f"{r['pairs_ahead']} / {r['pairs']}")  # fmt: skip
        console.print(table)
    if result.get("records"):
        console.print(f"records: {result['records']}")
    if result.get("saved_to"):
        console.print(f"saved for kernelab lab: {result['saved_to']}")


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
