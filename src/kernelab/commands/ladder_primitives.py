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
from kernelab.commands.options import COUNT_FORMS, comma_items, parse_count
from kernelab.errors import KernelabError, NoGPUError, unknown
from kernelab.output import emit, note

# --- what every primitives ladder checks first ----------------------------------------------


def ladder_counts(ladder: str, spec: str, *, noun: str, below: int, limit: str,
                  example: str) -> list[int]:  # fmt: skip
    """The counts of a --sizes list, each as options.parse_count reads it ("1048576", "1M",
    "2^20"), below `below` (`limit` says why, in words); one line otherwise."""
    return [
        parse_count(
            part,
            form=f"{ladder} sizes are positive {noun} ({COUNT_FORMS})",
            below=below,
            too_large=f"{ladder} sizes must be below {limit}",
        )
        for part in comma_items(spec, "--sizes", example)
    ]


def _or_default(given: str | None, default: str) -> str:
    """`given` unless the option was left out: an empty --sizes is an error, not the default."""
    return default if given is None else given


def one_dtype(ladder: str, given: str | None, default: str, dtypes) -> str:
    """The one --dtype a ladder that times one dtype a run takes: a list or an empty value
    is refused as such, not as an unknown name."""
    if given is None:
        return default
    text = given.strip().lower()
    choices = " or ".join(dtypes)
    if not text:
        raise KernelabError(f"--dtype needs a value, not an empty string; the {ladder} ladder "
                            f"takes {choices}")  # fmt: skip
    if "," in text:
        raise KernelabError(f"the {ladder} ladder takes one --dtype ({choices}) per run, "
                            f"not the list '{given}'")  # fmt: skip
    if text not in dtypes:
        raise unknown(f"dtype for the {ladder} ladder", text, dtypes)
    return text


def profile_needs_gpu(ladder: str) -> None:
    """--profile runs ncu on this machine's GPU: without one, one line before any compile."""
    if not _has_gpu():
        raise NoGPUError(f"ladder {ladder} --profile needs a CUDA GPU and ncu; none found")


# --- the sum-reduction ladder (`kernelab ladder reduce`) ------------------------------------

REDUCE_DEFAULT_SIZES = "2^20,2^24,2^26,2^28"
REDUCE_DEFAULT_PROFILE_SIZE = "2^26"


def parse_counts(spec: str) -> list[int]:
    """Element counts: "1048576,1M,2^26" -> [1048576, 1048576, 67108864], each below
    ladders.reduce.steps.MAX_N."""
    from kernelab.ladders.reduce.steps import MAX_N, MAX_N_WHY

    return ladder_counts("reduce", spec, noun="element counts", below=MAX_N, limit=MAX_N_WHY,
                         example="2^20,2^26")  # fmt: skip


def parse_dtypes(spec: str | None) -> list[str]:
    from kernelab.ladders.reduce.steps import DTYPES

    names = [name.lower() for name in comma_items(spec, "--dtype", "fp32,bf16") or ["fp32"]]
    for name in names:
        if name not in DTYPES:
            raise unknown("reduce dtype", name, DTYPES)
    return list(dict.fromkeys(names))


def _reduce(sizes, steps, dtype, modes, max_time: float, out, profile: bool, as_json: bool,
            spread=None):  # fmt: skip
    from kernelab.ladders.reduce import ladder as reduce_ladder

    size_list = parse_counts(
        _or_default(sizes, REDUCE_DEFAULT_PROFILE_SIZE if profile else REDUCE_DEFAULT_SIZES)
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
    if profile:
        profile_needs_gpu("reduce")
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
PRIMITIVE_DEFAULT_SIZES = {"transpose": "4096,8192", "histogram": "1M,64M"}
PRIMITIVE_PROFILE_SIZES = {"transpose": "8192", "histogram": "64M"}
PRIMITIVE_DEFAULT_DTYPE = {"transpose": "fp32", "histogram": "int32"}
HISTOGRAM_DEFAULT_BINS = 256
TRANSPOSE_MAX_DIM = 1 << 31  # the kernels take int32 rows and cols


def _primitive_sizes(name: str, spec: str) -> list:
    """transpose: [(rows, cols)] from "8192", "4K" or "1000x3"; histogram: [n] (below 2^40)."""
    from kernelab.ladders.histogram.steps import MAX_N as HISTOGRAM_MAX_N

    example = PRIMITIVE_DEFAULT_SIZES[name]
    if name == "histogram":
        return ladder_counts("histogram", spec, noun="value counts N", below=HISTOGRAM_MAX_N,
                             limit="2^40 values", example=example)  # fmt: skip
    found = []
    for part in comma_items(spec, "--sizes", example):
        pieces = part.lower().split("x")
        form = f"transpose sizes are positive N or ROWSxCOLS ({COUNT_FORMS} each)"
        if len(pieces) > 2:
            raise KernelabError(f"{form}; got '{part}'")
        numbers = [
            parse_count(
                piece,
                form=form,
                below=TRANSPOSE_MAX_DIM,
                too_large="transpose dimensions must be below 2^31",
            )
            for piece in pieces
        ]
        rows, cols = numbers if len(numbers) == 2 else numbers * 2
        found.append((rows, cols))
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
    dtype = one_dtype(name, dtype, PRIMITIVE_DEFAULT_DTYPE[name], dtypes)
    if name == "transpose" and bins is not None:
        raise KernelabError("--bins is for the histogram ladder")
    bins = (
        check_bins(HISTOGRAM_DEFAULT_BINS if bins is None else bins)
        if name != "transpose"
        else None
    )
    default = PRIMITIVE_PROFILE_SIZES if profile else PRIMITIVE_DEFAULT_SIZES
    size_list = _primitive_sizes(name, _or_default(sizes, default[name]))
    if profile and len(size_list) != 1:
        raise KernelabError("--profile runs at one size; give one --sizes value")
    chosen = engine.parse_steps(steps)
    from kernelab.harness.timing import MODES

    if mode not in MODES:
        raise unknown("timing mode", mode, MODES)
    if profile:
        profile_needs_gpu(name)
    if spread is not None:
        spread.start()

    compile_rows = (
        transpose_ladder.compile_transpose(chosen, progress=note)
        if name == "transpose"
        else histogram_ladder.compile_histogram(chosen, progress=note)
    )
    # every dtype's kernels are in one build: the report shows the dtype asked for
    compile_rows = [row for row in compile_rows if row["dtype"] == dtype]
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
    from kernelab.ladders.engine import profile_steps

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
    # "% of read": against the read-only ceiling, the roof of a kernel that reads and barely
    # writes (the histogram); shown where it was measured
    with_read = any(r.get("pct_of_read") is not None for r in result["rows"])
    columns = ("size", "data", "step", "ms", "GB/s", "% of copy",
               *(("% of read",) if with_read else ()), "x prev", "x torch")  # fmt: skip
    cells = []
    for r in result["rows"]:
        shape = "x".join(str(v) for v in r["shape"].values())
        cells.append([
            shape, r.get("distribution", "-"), r["step"], _fmt(r["median_ms"], ".4f"),
            _fmt(r["gbps"], ".0f"), _fmt(r["pct_of_copy"], ".1f"),
            *((_fmt(r.get("pct_of_read"), ".1f"),) if with_read else ()),
            _num(r["speedup_vs_prev"]), _num(r["speedup_vs_anchor"]),
        ])  # fmt: skip
    title = f"{result['ladder']} ladder, {result['dtype']}, {result['mode']} ({result['gpu']})"
    _print_fitted(console, title, columns, cells, left=("size", "data", "step"))
    for line in result.get("notes", []):
        console.print(line, style="dim")


def _render_primitive_profile(result: dict, console) -> None:
    columns = ("step", "proof metric", "previous", "value", "per load", "expected", "verdict")
    cells = [
        [r["step"], r["proof"], _num(r["previous"]), _num(r["value"]),
         "-" if r.get("per_load") is None else f"{r['per_load']:.2f}", r["direction"],
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

SCAN_DEFAULT_SIZES = "1M,64M"
SCAN_PROFILE_SIZE = "64M"


def _scan_sizes(spec: str) -> list[int]:
    from kernelab.ladders.scan.steps import MAX_N

    return ladder_counts("scan", spec, noun="element counts N", below=MAX_N,
                         limit="2^38 elements", example=SCAN_DEFAULT_SIZES)  # fmt: skip


def _scan(sizes, steps, mode, max_time, out, dtype, profile, as_json, spread=None):
    """Validate everything first (one line, exit 2), then compile, and with a GPU check and
    time, or profile each step's proof metric (summed over all its launches) at one size."""
    from kernelab.harness.timing import MODES
    from kernelab.ladders.scan import ladder as scan_ladder
    from kernelab.ladders.scan.steps import DTYPES as SCAN_DTYPES

    dtype = one_dtype("scan", dtype, "fp32", SCAN_DTYPES)
    size_list = _scan_sizes(
        _or_default(sizes, SCAN_PROFILE_SIZE if profile else SCAN_DEFAULT_SIZES)
    )
    if profile and len(size_list) != 1:
        raise KernelabError("--profile runs at one size; give one --sizes value")
    chosen = scan_ladder.parse_steps(steps)
    if mode not in MODES:
        raise unknown("timing mode", mode, MODES)
    if profile:
        profile_needs_gpu("scan")
    if spread is not None:
        spread.start()
    # every dtype's kernels are in one build: the report shows the dtype asked for
    compile_rows = [row for row in scan_ladder.compile_scan(chosen, progress=note)
                    if row["dtype"] == dtype]  # fmt: skip
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
