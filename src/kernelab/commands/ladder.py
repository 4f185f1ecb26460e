"""`kernelab ladder sgemm`: the fp32 SGEMM ladder against cuBLAS.

Without a GPU (nvcc present, or a warm cubin cache) it prints the compile report: registers,
shared memory, spills and the SASS facts of every step, and says that timing needs a GPU.
With a GPU it checks every step at every size, then times every step and cuBLAS fp32 in the
same run (cold L2), and prints GFLOP/s, % of cuBLAS and the speedup over the previous step
beside the speedup that step predicted.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from kernelab.errors import KernelabError, unknown
from kernelab.output import JsonOption, emit, note

LADDERS = ("sgemm",)
DEFAULT_SIZES = "1024,2048,4096,8192"


def parse_sizes(spec: str) -> list[int]:
    sizes = []
    for part in (p.strip() for p in spec.split(",")):
        if not part:
            continue
        if not part.isdigit() or int(part) <= 0:
            raise KernelabError(
                f"ladder sizes are positive integers (square problems); got '{part}'"
            )
        sizes.append(int(part))
    if not sizes:
        raise KernelabError("no sizes given; e.g. --sizes 1024,4096")
    return sizes


def _has_gpu() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def _fmt(value, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _render_compile(rows: list[dict], console) -> None:
    from rich.table import Table

    table = Table(title="SGEMM ladder: what ptxas and the SASS say (sm_90)")
    for column in ("step", "technique", "regs", "threads", "smem (static/dyn)", "spills", "SASS"):
        table.add_column(
            column, justify="left" if column in ("step", "technique", "SASS") else "right"
        )
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
        table.add_row(
            r["step"], r["technique"], str(r["registers"]), str(r["threads"]),
            f"{r['static_smem_bytes']}/{r['dynamic_smem_bytes']}",
            "[red]" + str(spills) + "[/red]" if spills else "0", facts or "-",
        )  # fmt: skip
    console.print(table)


def _render_timing(result: dict, console) -> None:
    from rich.table import Table

    for size in result["sizes"]:
        table = Table(title=f"SGEMM fp32 {size}^3 on {result['gpu']} ({result['mode']} L2)")
        for column in ("step", "technique", "ms", "GFLOP/s", "% cuBLAS", "speedup", "expected"):
            table.add_column(column, justify="left" if column in ("step", "technique") else "right")
        for r in (r for r in result["rows"] if r["size"] == size):
            table.add_row(
                r["step"], r["technique"], _fmt(r["median_ms"], ".3f"), _fmt(r["gflops"], ",.0f"),
                _fmt(r["pct_of_cublas"], ".1f"), _fmt(r["speedup_vs_prev"], ".2f"),
                _fmt(r["expected_speedup"], ".2f") if r["speedup_vs_prev"] is not None else "-",
            )  # fmt: skip
        console.print(table)
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
        name: Annotated[str, typer.Argument(help="Which ladder: sgemm.")],
        sizes: Annotated[
            str, typer.Option("--sizes", help="Square sizes to time, comma-separated.")
        ] = DEFAULT_SIZES,
        steps: Annotated[
            str | None,
            typer.Option("--steps", help='Steps to run: "1,5,10" or "6-11" (default all).'),
        ] = None,
        plot: Annotated[
            Path | None, typer.Option("--plot", help="Draw the bar chart to this PNG/SVG file.")
        ] = None,
        out: Annotated[
            Path | None, typer.Option("--out", help="Write the timing records to this JSON file.")
        ] = None,
        mode: Annotated[
            str, typer.Option("--mode", help="Timing mode: cold, hot or graph.")
        ] = "cold",
        max_time: Annotated[
            float, typer.Option("--max-time", help="Seconds of timing per step and size, at most.")
        ] = 2.0,
        # The profiling engineer adds `--profile` here: profile each step with ncu after timing.
        as_json: JsonOption = False,
    ) -> None:
        """The fp32 SGEMM ladder against cuBLAS: compile report, correctness, timing."""
        from kernelab.kernels.cuda.sgemm import ladder as sgemm_ladder

        if name != "sgemm":
            raise unknown("ladder", name, LADDERS)
        size_list = parse_sizes(sizes)
        chosen = sgemm_ladder.parse_steps(steps)
        compiled = sgemm_ladder.compile_report(chosen, progress=note)
        if not _has_gpu():
            note("timing and checking need a CUDA GPU; showing the compile report only")
            emit(
                {"ladder": name, "gpu": None, "compile": compiled, "timed": False},
                as_json,
                lambda console: _render_compile(compiled, console),
            )
            return

        from kernelab.harness.timing import MODES

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
