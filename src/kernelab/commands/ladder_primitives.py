"""`kernelab ladder reduce|scan|transpose|histogram`: the PMPP primitives' ladders on the
command line (the GEMM ladders are kernelab.commands.ladder, which dispatches here)."""

from __future__ import annotations

from kernelab.commands.ladder_spread import run_spread
from kernelab.commands.ladder_tables import VERDICT_STYLE as _VERDICT_STYLE
from kernelab.commands.ladder_tables import fmt as _fmt
from kernelab.commands.ladder_tables import gpu_at
from kernelab.commands.ladder_tables import has_gpu as _has_gpu
from kernelab.commands.ladder_tables import nothing_to_write as _nothing_to_write
from kernelab.commands.ladder_tables import num as _num
from kernelab.commands.ladder_tables import print_fitted as _print_fitted
from kernelab.errors import KernelabError, unknown
from kernelab.output import emit, note

# --- the sum-reduction ladder (`kernelab ladder reduce`) ------------------------------------

REDUCE_DEFAULT_SIZES = "2^20,2^24,2^26,2^28"
REDUCE_DEFAULT_PROFILE_SIZE = "2^26"


def parse_counts(spec: str) -> list[int]:
    """Element counts: "1048576,2^26" -> [1048576, 67108864]; positive integers only."""
    counts = []
    for part in (p.strip() for p in spec.split(",")):
        if not part:
            continue
        base, caret, exponent = part.partition("^")
        valid = base.isdigit() and (not caret or exponent.isdigit())
        value = int(base) ** int(exponent) if valid and caret else int(base) if valid else 0
        if not valid or value <= 0:
            raise KernelabError(
                f"reduce sizes are positive element counts (e.g. 1048576 or 2^20); got '{part}'"
            )
        counts.append(value)
    if not counts:
        raise KernelabError("no sizes given; e.g. --sizes 2^20,2^26")
    return counts


def parse_dtypes(spec: str | None) -> list[str]:
    from kernelab.ladders.reduce.steps import DTYPES

    names = [p.strip().lower() for p in (spec or "fp32").split(",") if p.strip()]
    if not names:
        raise KernelabError("no dtype given; e.g. --dtype fp32,bf16")
    for name in names:
        if name not in DTYPES:
            raise unknown("reduce dtype", name, DTYPES)
    return list(dict.fromkeys(names))


def _reduce(sizes, steps, dtype, modes, max_time: float, out, profile: bool, as_json: bool,
            spread=None):  # fmt: skip
    from kernelab.ladders.reduce import ladder as reduce_ladder

    size_list = parse_counts(
        sizes or (REDUCE_DEFAULT_PROFILE_SIZE if profile else REDUCE_DEFAULT_SIZES)
    )
    dtypes = parse_dtypes(dtype)
    chosen = reduce_ladder.parse_steps(steps)
    if modes and len(modes) > 1:
        raise KernelabError("the reduce ladder times one mode per run; give one --mode")
    mode = modes[0] if modes else "cold"
    from kernelab.harness.timing import MODES

    if mode not in MODES:
        raise unknown("timing mode", mode, MODES)
    if profile and (len(size_list) != 1 or len(dtypes) != 1):
        raise KernelabError("--profile reads the counters at one size and dtype; e.g. --sizes 2^26")
    if spread is not None:
        spread.start()
    compiled = [row for d in dtypes for row in reduce_ladder.compile_report(chosen, d, note)]
    if spread is not None:
        run_spread(
            "reduce", spread, size_list, steps=steps, mode=mode, max_time=max_time,
            options={"dtypes": dtypes}, out=out, as_json=as_json,
            base={"ladder": "reduce", "compile": compiled}, render=render_reduce_table,
        )  # fmt: skip
        return
    if not _has_gpu():
        note("checking, timing and the ncu counters need a CUDA GPU; showing the compile report")
        _nothing_to_write(out, None)
        emit({"ladder": "reduce", "gpu": None, "compile": compiled, "timed": False}, as_json,
             lambda console: _render_reduce_compile(compiled, console))  # fmt: skip
        return
    checks = reduce_ladder.check_steps(chosen, size_list, dtypes, progress=note)
    bad = {c["step"] for c in checks if not c["ok"]}
    if bad:
        note(f"not timing steps that gave wrong answers: {', '.join(sorted(bad))}")
    timed = [s for s in chosen if s.name not in bad]
    counters = {}
    if profile:
        counters = reduce_ladder.profile_steps(timed, size_list[0], dtypes[0], progress=note)
    ceiling, ceiling_source = reduce_ladder.read_ceiling(progress=note)
    measurements, records, cub_line = reduce_ladder.time_ladder(
        timed, size_list, dtypes, mode=mode, max_time_s=max_time, progress=note
    )
    for m in measurements:
        found = counters.get(m["step"])
        if found is not None and m["n"] == size_list[0] and m["dtype"] == dtypes[0]:
            m["counter"] = found
    rows = reduce_ladder.table_rows(measurements, ceiling)
    result = {
        "ladder": "reduce",
        "gpu": records[0].gpu if records else None,
        "mode": mode,
        "sizes": size_list,
        "dtypes": dtypes,
        "read_ceiling_bytes_per_s": ceiling,
        "read_ceiling_source": ceiling_source,
        "cub": cub_line,
        "compile": compiled,
        "checks": checks,
        "rows": rows,
        "timed": True,
    }
    if out is not None:
        from kernelab.harness.records import save_records

        result["records"] = str(save_records(records, out))
    emit(result, as_json, lambda console: render_reduce_table(result, console))


def _render_reduce_compile(rows: list[dict], console) -> None:
    columns = ("step", "dtype", "technique", "regs", "smem", "spills", "SASS")
    cells = []
    for r in rows:
        sass = r["sass"]
        facts = ", ".join(
            f"{label} {sass[key]}"
            for key, label in (
                ("ldg_128", "LDG.128"),
                ("ldg", "LDG"),
                ("shfl", "SHFL"),
                ("bar", "BAR"),
            )
            if sass.get(key)
        )
        spills = r["spill_store_bytes"] + r["spill_load_bytes"]
        cells.append([
            r["step"], r["dtype"], r["technique"], str(r["registers"]), str(r["static_smem_bytes"]),
            "[red]" + str(spills) + "[/red]" if spills else "0", facts or "-",
        ])  # fmt: skip
    _print_fitted(
        console, "reduce ladder: what ptxas and the SASS say (sm_90)", columns, cells,
        left=("step", "dtype", "technique", "SASS"),
    )  # fmt: skip


def _counter_text(counter: dict | None) -> str:
    if not counter:
        return "-"
    return f"{counter['label']} {_num(counter['value'])}"


def render_reduce_table(result: dict, console) -> None:
    """One table per dtype and size: time, GB/s, % of the read ceiling, speedup over the step
    before (and the one predicted), the proving counter."""
    columns = ("step", "ms", "GB/s", "% read roof", "speedup", "expected", "counter")
    for dtype in result["dtypes"]:
        for n in result["sizes"]:
            cells = [
                [
                    r["step"],
                    _fmt(r["median_ms"], ".4f"),
                    _fmt(r["gb_per_s"], ",.0f"),
                    _fmt(r["pct_of_read_ceiling"], ".1f"),
                    _fmt(r["speedup_vs_prev"], ".2f"),
                    _fmt(r["expected_speedup"], ".2f") if r["speedup_vs_prev"] is not None else "-",
                    _counter_text(r.get("counter")),
                ]  # fmt: skip
                for r in result["rows"]
                if r["n"] == n and r["dtype"] == dtype
            ]
            _print_fitted(
                console, f"sum of n={n:,} {dtype} on {gpu_at(result, n)} ({result['mode']} L2)",
                columns, cells, left=("step", "counter"), drop=("counter",),
            )  # fmt: skip
    ceiling = result.get("read_ceiling_bytes_per_s")
    if ceiling:
        console.print(f"read ceiling {ceiling / 1e9:,.0f} GB/s, {result['read_ceiling_source']}")
    console.print(result["cub"])
    for c in result["checks"]:
        if not c["ok"]:
            console.print(
                f"[red]{c['step']} wrong at n={c['n']} {c['dtype']}: {c['message']}[/red]"
            )
    if result.get("records"):
        console.print(f"records: {result['records']}")


# --- `kernelab ladder transpose|histogram`: the primitives ladders ---------------------------

PRIMITIVE_LADDERS = ("transpose", "histogram")
PRIMITIVE_DEFAULT_SIZES = {"transpose": "4096,8192", "histogram": "1048576,67108864"}
PRIMITIVE_PROFILE_SIZES = {"transpose": "8192", "histogram": "67108864"}
PRIMITIVE_DEFAULT_DTYPE = {"transpose": "fp32", "histogram": "int32"}
HISTOGRAM_DEFAULT_BINS = 256
INT32_MAX = 2**31 - 1


def _primitive_sizes(name: str, spec: str) -> list:
    """transpose: [(rows, cols)] from "8192" or "1000x3"; histogram: [n] (below 2^40)."""
    found = []
    for part in (p.strip().lower() for p in spec.split(",")):
        if not part:
            continue
        pieces = part.split("x") if name == "transpose" else [part]
        if len(pieces) > 2 or not all(p.isdigit() and int(p) > 0 for p in pieces):
            form = "N or ROWSxCOLS" if name == "transpose" else "value counts N"
            raise KernelabError(f"{name} sizes are positive {form}; got '{part}'")
        numbers = [int(p) for p in pieces]
        if name == "transpose":
            rows, cols = numbers if len(numbers) == 2 else numbers * 2
            if max(rows, cols) > INT32_MAX:
                raise KernelabError(f"transpose dimensions must be below 2^31; got '{part}'")
            found.append((rows, cols))
        else:
            if numbers[0] >= 1 << 40:
                raise KernelabError(f"histogram sizes must be below 2^40 values; got '{part}'")
            found.append(numbers[0])
    if not found:
        raise KernelabError(f"no sizes given; e.g. --sizes {PRIMITIVE_DEFAULT_SIZES[name]}")
    return found


def _primitive_ladder(name, sizes, steps, mode, max_time, out, profile, dtype, bins, as_json,
                      spread=None):  # fmt: skip
    """Validate everything first (one line, exit 2), then compile, and with a GPU check, time
    or profile."""
    from kernelab.ladders.histogram import ladder as histogram_ladder
    from kernelab.ladders.histogram.steps import DTYPES as HISTOGRAM_DTYPES
    from kernelab.ladders.histogram.steps import check_bins
    from kernelab.ladders.transpose import ladder as transpose_ladder
    from kernelab.ladders.transpose.steps import DTYPES as TRANSPOSE_DTYPES

    engine = transpose_ladder if name == "transpose" else histogram_ladder
    dtypes = TRANSPOSE_DTYPES if name == "transpose" else HISTOGRAM_DTYPES
    dtype = (dtype or PRIMITIVE_DEFAULT_DTYPE[name]).strip().lower()
    if dtype not in dtypes:
        raise unknown(f"dtype for the {name} ladder", dtype, dtypes)
    if name == "transpose" and bins is not None:
        raise KernelabError("--bins is for the histogram ladder")
    bins = (
        check_bins(HISTOGRAM_DEFAULT_BINS if bins is None else bins)
        if name != "transpose"
        else None
    )
    default = PRIMITIVE_PROFILE_SIZES if profile else PRIMITIVE_DEFAULT_SIZES
    size_list = _primitive_sizes(name, sizes or default[name])
    if profile and len(size_list) != 1:
        raise KernelabError("--profile runs at one size; give one --sizes value")
    chosen = engine.parse_steps(steps)
    from kernelab.harness.timing import MODES

    if mode not in MODES:
        raise unknown("timing mode", mode, MODES)
    if spread is not None:
        spread.start()

    compile_rows = (
        transpose_ladder.compile_transpose(chosen, progress=note)
        if name == "transpose"
        else histogram_ladder.compile_histogram(chosen, progress=note)
    )
    result = {"ladder": name, "dtype": dtype, "bins": bins, "compile": compile_rows}
    if spread is not None:
        run_spread(
            name, spread, size_list, steps=steps, mode=mode, max_time=max_time,
            options={"dtype": dtype, "bins": bins}, out=out, as_json=as_json, base=result,
            render=_render_primitive_timing,
        )  # fmt: skip
        return
    if not _has_gpu():
        note("checking, timing and --profile need a CUDA GPU; showing the compile report only")
        if out is not None:
            note("--out: nothing written (no timings without a GPU)")
        result.update(gpu=None, timed=False)
        emit(result, as_json, lambda console: _render_primitive_compile(result, console))
        return
    if profile:
        result["profile"] = _primitive_profile(name, engine, chosen, size_list[0], dtype, bins)
        emit(result, as_json, lambda console: _render_primitive_profile(result, console))
        return
    checks = engine.check_steps(chosen, (dtype,), progress=note)
    bad = {c["step"] for c in checks if not c["ok"]}
    if bad:
        note(f"not timing steps that gave wrong answers: {', '.join(sorted(bad))}")
    timed = [s for s in chosen if s.name not in bad]
    notes = []
    if name == "transpose":
        rows, records = transpose_ladder.time_ladder(
            timed, size_list, dtype, mode=mode, max_time_s=max_time, progress=note
        )
        notes.append(transpose_ladder.NO_CUB)
    else:
        rows, records, notes = histogram_ladder.time_ladder(
            timed, size_list, bins, dtype, mode=mode, max_time_s=max_time, progress=note
        )
    result.update(gpu=records[0].gpu if records else None, mode=mode, checks=checks, rows=rows,
                  notes=notes, timed=True)  # fmt: skip
    if out is not None:
        from kernelab.harness.records import save_records

        result["records"] = str(save_records(records, out))
    emit(result, as_json, lambda console: _render_primitive_timing(result, console))


def _primitive_profile(name, engine, chosen, size, dtype, bins) -> list[dict]:
    from kernelab.ladders.transpose.ladder import profile_steps

    if name == "transpose":
        rows, cols = size
        args = ["--rows", str(rows), "--cols", str(cols)]
    else:
        args = ["--n", str(size), "--bins", str(bins)]
    args += ["--dtype", dtype, "--steps", ",".join(str(s.number) for s in chosen)]
    return profile_steps(name, chosen, args, lambda step: step.kernel_for(dtype), progress=note)


def _render_primitive_compile(result: dict, console) -> None:
    from rich.markup import escape

    columns = ("step", "dtype", "technique", "regs", "smem", "spills", "proof metric")
    cells = [
        [r["step"], r["dtype"], escape(r["technique"]), str(r["registers"]), str(r["static_smem_bytes"]),
         str(r["spill_store_bytes"] + r["spill_load_bytes"]), r["proof"]]
        for r in result["compile"]
    ]  # fmt: skip
    title = f"{result['ladder']} ladder: what ptxas says (sm_90)"
    _print_fitted(console, title, columns, cells, left=("step", "technique", "proof metric"),
                  drop=("technique", "proof metric"))  # fmt: skip


def _render_primitive_timing(result: dict, console) -> None:
    for check in result["checks"]:
        if not check["ok"]:
            console.print(f"[red]{check['step']} {check['dtype']} WRONG at "
                          f"{', '.join(check['wrong_at'][:4])}[/red]")  # fmt: skip
    columns = ("size", "data", "step", "ms", "GB/s", "% of copy", "x prev", "x torch")
    cells = []
    for r in result["rows"]:
        shape = "x".join(str(v) for v in r["shape"].values())
        cells.append([
            shape, r.get("distribution", "-"), r["step"], _fmt(r["median_ms"], ".4f"),
            _fmt(r["gbps"], ".0f"), _fmt(r["pct_of_copy"], ".1f"), _num(r["speedup_vs_prev"]),
            _num(r["speedup_vs_anchor"]),
        ])  # fmt: skip
    title = f"{result['ladder']} ladder, {result['dtype']}, {result['mode']} ({result['gpu']})"
    _print_fitted(console, title, columns, cells, left=("size", "data", "step"))
    for line in result.get("notes", []):
        console.print(line, style="dim")


def _render_primitive_profile(result: dict, console) -> None:
    columns = ("step", "proof metric", "previous", "value", "expected", "verdict")
    cells = [
        [r["step"], r["proof"], _num(r["previous"]), _num(r["value"]), r["direction"],
         f"[{_VERDICT_STYLE.get(r['verdict'], 'white')}]{r['verdict']}[/]"]
        for r in result["profile"]
    ]  # fmt: skip
    _print_fitted(console, f"{result['ladder']} ladder under ncu", columns, cells,
                  left=("step", "proof metric"))  # fmt: skip


# --- `kernelab ladder scan`: prefix sums against torch.cumsum, CUB and the copy -------------
#
# Without a GPU the compile report of every kernel of every step; with one, every step
# checked (inclusive and exclusive, exact for int32), then timed (inclusive, cold) beside
# torch.cumsum, CUB where cuda.compute or CuPy imports, and a copy of the same bytes: GB/s,
# % of the copy, speedup over the step before, over torch and over CUB. Sizes are element
# counts below 2^38. --profile: each step's proof metric under ncu, summed over every launch
# of the step (its recursion levels, its three kernels), against the step before.

SCAN_DEFAULT_SIZES = "1048576,67108864"
SCAN_PROFILE_SIZE = "67108864"
SCAN_MAX_N = 1 << 38


def _scan_sizes(spec: str) -> list[int]:
    found = []
    for part in (p.strip() for p in spec.split(",")):
        if not part:
            continue
        if not part.isdigit() or int(part) <= 0:
            raise KernelabError(f"scan sizes are positive element counts N; got '{part}'")
        if int(part) >= SCAN_MAX_N:
            raise KernelabError(f"scan sizes must be below 2^38 elements; got '{part}'")
        found.append(int(part))
    if not found:
        raise KernelabError(f"no sizes given; e.g. --sizes {SCAN_DEFAULT_SIZES}")
    return found


def _scan(sizes, steps, mode, max_time, out, dtype, profile, as_json, spread=None):
    """Validate everything first (one line, exit 2), then compile, and with a GPU check and
    time, or profile each step's proof metric (summed over all its launches) at one size."""
    from kernelab.harness.timing import MODES
    from kernelab.ladders.scan import ladder as scan_ladder
    from kernelab.ladders.scan.steps import DTYPES as SCAN_DTYPES

    dtype = (dtype or "fp32").strip().lower()
    if dtype not in SCAN_DTYPES:
        raise unknown("dtype for the scan ladder", dtype, SCAN_DTYPES)
    size_list = _scan_sizes(sizes or (SCAN_PROFILE_SIZE if profile else SCAN_DEFAULT_SIZES))
    if profile and len(size_list) != 1:
        raise KernelabError("--profile runs at one size; give one --sizes value")
    chosen = scan_ladder.parse_steps(steps)
    if mode not in MODES:
        raise unknown("timing mode", mode, MODES)
    if spread is not None:
        spread.start()
    compile_rows = scan_ladder.compile_scan(chosen, progress=note)
    result = {"ladder": "scan", "dtype": dtype, "compile": compile_rows}
    if spread is not None:
        run_spread(
            "scan", spread, size_list, steps=steps, mode=mode, max_time=max_time,
            options={"dtype": dtype}, out=out, as_json=as_json, base=result,
            render=_render_scan_timing,
        )  # fmt: skip
        return
    if not _has_gpu():
        note("checking, timing and --profile need a CUDA GPU; showing the compile report only")
        if out is not None:
            note("--out: nothing written (no timings without a GPU)")
        result.update(gpu=None, timed=False)
        emit(result, as_json, lambda console: _render_scan_compile(result, console))
        return
    if profile:
        result["profile"] = scan_ladder.profile_steps(chosen, size_list[0], dtype, progress=note)
        emit(result, as_json, lambda console: _render_primitive_profile(result, console))
        return
    checks = scan_ladder.check_steps(chosen, (dtype,), progress=note)
    bad = {c["step"] for c in checks if not c["ok"]}
    if bad:
        note(f"not timing steps that gave wrong answers: {', '.join(sorted(bad))}")
    timed = [s for s in chosen if s.name not in bad]
    rows, records, notes = scan_ladder.time_ladder(
        timed, size_list, dtype, mode=mode, max_time_s=max_time, progress=note
    )
    result.update(gpu=records[0].gpu if records else None, mode=mode, sizes=size_list,
                  checks=checks, rows=rows, notes=notes, timed=True)  # fmt: skip
    if out is not None:
        from kernelab.harness.records import save_records

        result["records"] = str(save_records(records, out))
    emit(result, as_json, lambda console: _render_scan_timing(result, console))


def _render_scan_compile(result: dict, console) -> None:
    columns = ("step", "kernel", "dtype", "regs", "smem", "spills", "proof metric")
    cells = [
        [r["step"], r["kernel"], r["dtype"], str(r["registers"]), str(r["static_smem_bytes"]),
         str(r["spill_store_bytes"] + r["spill_load_bytes"]), r["proof"]]
        for r in result["compile"]
    ]  # fmt: skip
    _print_fitted(console, "scan ladder: what ptxas says (sm_90)", columns, cells,
                  left=("step", "kernel", "proof metric"), drop=("proof metric",))  # fmt: skip


def _render_scan_timing(result: dict, console) -> None:
    for check in result["checks"]:
        if not check["ok"]:
            console.print(f"[red]{check['step']} {check['dtype']} WRONG at "
                          f"{', '.join(check['wrong_at'][:4])}[/red]")  # fmt: skip
    columns = ("n", "step", "ms", "GB/s", "% of copy", "x prev", "x torch", "x CUB")
    cells = [
        [str(r["shape"]["n"]), r["step"], _fmt(r["median_ms"], ".4f"), _fmt(r["gbps"], ".0f"),
         _fmt(r["pct_of_copy"], ".1f"), _num(r["speedup_vs_prev"]),
         _num(r["speedup_vs_anchor"]), _num(r.get("speedup_vs_cub"))]
        for r in result["rows"]
    ]  # fmt: skip
    title = f"scan ladder, {result['dtype']}, inclusive, {result['mode']} ({result['gpu']})"
    _print_fitted(console, title, columns, cells, left=("n", "step"))
    for line in result.get("notes", []):
        console.print(line, style="dim")
