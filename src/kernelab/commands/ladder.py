"""`kernelab ladder sgemm`: the fp32 SGEMM ladder against cuBLAS.

Without a GPU (nvcc present, or a warm cubin cache) it prints the compile report: registers,
shared memory, spills and the SASS facts of every step, and says that timing needs a GPU.
With a GPU it checks every step at every size, then times every step and cuBLAS fp32 in the
same run (cold L2), and prints GFLOP/s, % of cuBLAS and the speedup over the previous step
beside the speedup that step predicted.

With --profile it profiles every step once under Nsight Compute at one size (default 4096)
and checks that the metric each step claims to improve moved the right way against the step
before: per step, the metric, the previous and the new value, the expected direction and
PASS/FAIL. --import REPORT does the same from a saved report, without a GPU.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from kernelab.errors import KernelabError, NoGPUError, unknown
from kernelab.output import JsonOption, emit, note

LADDERS = ("sgemm",)
DEFAULT_SIZES = "1024,2048,4096,8192"
DEFAULT_PROFILE_SIZE = "4096"


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


_SI = ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))


def _num(value) -> str:
    """A counter or ratio in 3 significant digits, from 1,000 up with an SI suffix (1.23 G)."""
    if value is None:
        return "-"
    if abs(value) >= 999.5:
        scale, suffix = next((sc, sx) for sc, sx in _SI if abs(value) >= 0.9995 * sc)
        return f"{value / scale:.3g} {suffix}"
    return f"{value:.3g}"


_VERDICT_STYLE = {
    "PASS": "green",
    "FAIL": "red",
    "MISSING": "yellow",
    "NO-PREV": "yellow",
    "INCOMPLETE": "yellow",
}


def _render_verification(result: dict, console) -> None:
    from rich.table import Table

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
            str | None,
            typer.Option(
                "--sizes",
                help=f"Square sizes to time, comma-separated (default {DEFAULT_SIZES}); "
                f"with --profile one size (default {DEFAULT_PROFILE_SIZE}).",
            ),
        ] = None,
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
        as_json: JsonOption = False,
    ) -> None:
        """The fp32 SGEMM ladder against cuBLAS: compile report, correctness, timing;
        with --profile, each step's claimed metric verified under Nsight Compute."""
        from kernelab.kernels.cuda.sgemm import ladder as sgemm_ladder

        if name != "sgemm":
            raise unknown("ladder", name, LADDERS)
        if import_path is not None and not profile:
            raise KernelabError("--import goes with --profile: it verifies a saved ncu report")
        size_list = parse_sizes(sizes or (DEFAULT_PROFILE_SIZE if profile else DEFAULT_SIZES))
        chosen = sgemm_ladder.parse_steps(steps)
        if profile:
            _verify(sgemm_ladder, chosen, size_list, import_path, out, as_json)
            return
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
                "ladder --profile needs a CUDA GPU and ncu; none found "
                "(--import REPORT verifies a saved report anywhere)"
            )
        result, records = sgemm_ladder.verify_ladder(chosen, size, progress=note)
    if out is not None and records:
        from kernelab.harness.records import save_records

        result["records"] = str(save_records(records, out))
    emit(result, as_json, lambda console: _render_verification(result, console))
