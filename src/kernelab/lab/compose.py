"""From what a lab run produced (and the committed GPU records) to the report's blocks."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

from kernelab.lab import charts, counters, decode
from kernelab.lab.gate import Criterion, rate_goal_note
from kernelab.lab.pytorch_view import pytorch_section
from kernelab.lab.report import Bullets, Heading, Image, Paragraph, Report, Table
from kernelab.lab.results import ResultSet, latest_per_case

RATE_OPS = {"gemm"}  # ops reported in TFLOP/s; the rest are memory-bound and read in TB/s


def _read(path: Path) -> dict:
    return json.loads(path.read_text()) if path.exists() else {}


def _fmt(value, spec: str = ".2f") -> str:
    return "-" if value is None else format(value, spec)


def shape_text(shape) -> str:
    """A shape as `m=1 n=2048 k=5632`, not as a Python or JSON dict."""
    if isinstance(shape, str):
        try:
            shape = json.loads(shape)
        except ValueError:
            return shape
    if not isinstance(shape, dict):
        return str(shape)
    return " ".join(f"{k}={v}" for k, v in shape.items())


_DICT_IN_TEXT = re.compile(r"\{[^{}]*\}")


def plain_dicts(text: str) -> str:
    """`text` with each dict written into it ("{'m': 1, 'n': 2048}") as `m=1 n=2048`."""

    def plain(match: re.Match) -> str:
        try:
            value = ast.literal_eval(match.group(0))
        except (ValueError, SyntaxError):
            return match.group(0)
        return shape_text(value) if isinstance(value, dict) else match.group(0)

    return _DICT_IN_TEXT.sub(plain, text)


def provenance_section(report: Report, state, results: ResultSet, source_note: str) -> None:
    """Which numbers this machine produced and which come from committed records, said once
    up front, so a PASS measured on the H200 never reads as this machine's own."""
    here = "; ".join(f"{k}: {v}" for k, v in state.done.items()) or "nothing yet"
    if state.on_gpu:
        items = [(0, f"This run, on this machine's GPU: {here}."), (0, source_note)]
    elif results.empty:
        items = [(0, f"This machine (no CUDA GPU): {here}."), (0, source_note)]
    else:
        items = [
            (0, f"This machine (no CUDA GPU) ran the analytic and CPU parts: {here}. They are "
                "the datasheet roofline table, the CUDA compile report and the Triton checks "
                "under the interpreter."),
            (0, f"Every timing, ceiling, profile and the exit criteria's PASS/FAIL come from "
                f"committed records, not from this machine: {shown_folder(results.folder)}, "
                f"{results.machine()}. To measure your own, see 'What to run next on a GPU' at "
                "the end."),
        ]  # fmt: skip
    items.append(
        (
            0,
            f"The GPU this report is about: {state.gpu_id}, {state.gpu_from}."
            if state.gpu_from
            else f"The GPU this report is about: {state.gpu_id}.",
        )
    )
    report.add(Heading("Where the numbers come from"), Bullets(items))


def shown_folder(folder: Path | None) -> str:
    """A results folder as a reader should see it: benchmarks/results/<card> for committed
    records (never this checkout's absolute path), else the folder as given."""
    if folder is None:
        return "no folder"
    parts = folder.parts
    if len(parts) >= 3 and parts[-3:-1] == ("benchmarks", "results"):
        return "/".join(parts[-3:])
    return str(folder)


def gate_section(
    report: Report, gate: list[Criterion], on_gpu: bool | None = None, machine: str = ""
) -> None:
    """The gate's table. on_gpu: whether this lab run measured (True) or judged committed
    records (False); None for the README, whose results are the committed records."""
    if on_gpu is None:
        report.add(
            Heading("Exit criteria"),
            Paragraph(
                "Each criterion passes or fails on the records below; 'phase' is the "
                "curriculum's bar, 'kernelab' our stricter target."
            ),
            Table(
                ["criterion", "bar", "status", "evidence"],
                [
                    [c.name, c.bar, "PASS" if c.passed else "FAIL", plain_dicts(c.evidence)]
                    for c in gate
                ],
            ),  # fmt: skip
        )
        return
    judged_on = "this run" if on_gpu else "committed records"
    report.add(
        Heading("Exit criteria" + ("" if on_gpu else ", judged on the committed records")),
        Paragraph(
            "Each criterion passes or fails on the records below; 'phase' is the "
            "curriculum's bar, 'kernelab' our stricter target."
            + (
                ""
                if on_gpu
                else f" No criterion below was measured on this machine: they are "
                f"judged on the committed records of {machine}."
            )
        ),  # fmt: skip
        Table(
            ["criterion", "bar", "status", "judged on", "evidence"],
            [
                [c.name, c.bar, "PASS" if c.passed else "FAIL", judged_on, plain_dicts(c.evidence)]
                for c in gate
            ],
        ),  # fmt: skip
    )


def next_on_gpu_section(report: Report, out: Path) -> None:
    """On a machine without a GPU: what works here, and the exact commands that measure what
    this run could not on a machine with one."""
    from kernelab.lab.paths import DEFAULT_CARD, card_folder, committed_cards

    # Only commands that work from any folder: exit-check finds the default card's records
    # itself; another card's folder is a path inside the checkout, so it is named as one.
    default = card_folder(DEFAULT_CARD)
    others = [card for card in committed_cards() if card != default]
    if default in committed_cards():
        here = (f"Here, the gate on the committed records: `kernelab exit-check` judges the "
                f"{DEFAULT_CARD}'s from any folder (kernelab installed from its checkout "
                "carries them)")  # fmt: skip
        if others:
            here += ("; another card's are a folder of that checkout: from its root, "
                     + ", ".join(f"`kernelab exit-check --results benchmarks/results/{card}`"
                                 for card in others))  # fmt: skip
        here += ". "
    else:
        here = ""
    report.add(
        Heading("What to run next on a GPU"),
        Paragraph("This machine has no CUDA GPU, so the measured sections above are the "
                  f"committed records. {here}This run's own records folder holds no "
                  "measurements, so the gate has nothing of this machine to judge. On a "
                  "machine with a GPU, from a checkout of kernelab:"),
        Bullets([
            (0, "kernelab lab --out DIR: the whole phase measured on that GPU (add --quick "
                "for minutes instead of a quarter hour); this report, rewritten with its numbers"),
            (0, "kernelab exit-check --results DIR/records: then, the exit criteria on the "
                "records that run measured"),
            (0, "kernelab ceilings: that GPU's copy bandwidth and cuBLAS peaks, the ceilings "
                "every % above is measured against"),
            (0, "kernelab ladder sgemm and kernelab ladder hgemm --pairs 200: the two CUDA "
                "ladders against cuBLAS"),
            (0, "kernelab ladder reduce, kernelab ladder scan, kernelab ladder histogram and "
                "kernelab ladder transpose: the PMPP ladders checked, then timed beside their "
                "anchors and ceilings (the lab's pmpp stage times them at its own sizes)"),
            (0, "kernelab bench triton.softmax --sizes 8192x8192 --dtype bf16: one kernel, "
                "checked and timed"),
            (0, "kernelab profile triton.softmax --rows 8192 --cols 8192 --dtype bf16: Nsight "
                "Compute's view and the bottleneck named"),
            (0, "python3 -m pytest -q -m gpu: the tests that need a GPU"),
        ]),
    )  # fmt: skip


def roofline_section(report: Report, records_dir: Path, figures: Path) -> None:
    data = _read(records_dir / "rooflines.json")
    if not data:
        return
    from kernelab.hardware.catalog import get_gpu
    from kernelab.roofline.model import Ceilings, place
    from kernelab.spec.reference import get_op

    gpu = data["gpu"]
    report.add(
        Heading(f"Roofline: every built-in kernel on {gpu} (datasheet ceilings)"),
        Table(
            [
                "kernel",
                "op",
                "shape",
                "dtype",
                "intensity (FLOP/B)",
                "ridge (FLOP/B)",
                "bound",
                "floor (ms)",
            ],
            [
                [
                    r["kernel"],
                    r["op"],
                    shape_text(r.get("input_shape") or {}),
                    r["dtype"],
                    _fmt(r["intensity"], ".1f"),
                    _fmt(r["ridge"], ".0f"),
                    r["bound"],
                    _fmt(r["floor_ms"], ".3f"),
                ]
                for r in data["rooflines"]
            ],
        ),  # fmt: skip
    )
    spec = get_gpu(gpu)
    points = [place(get_op(r["op"]).cost(r["input_shape"], r["dtype"]), Ceilings.from_spec(spec))
              for r in data["rooflines"] if r["dtype"] == "bf16"]  # fmt: skip
    path = charts.roofline_chart(Ceilings.from_spec(spec), points, figures / "roofline_builtin.png",
                                 f"Built-in bf16 kernels on the {gpu} datasheet roofline "
                                 "(attainable rates, no timing)")  # fmt: skip
    if path:
        report.add(Image(path, f"bf16 kernels on the {gpu} datasheet roofline: attainable "
                               "TFLOP/s against FLOP/byte, from the cost model alone"))  # fmt: skip


def measured_roofline(report: Report, results: ResultSet, figures: Path) -> None:
    """Each op's fastest kernelab implementation at its largest measured shape, placed with
    its measured time on the datasheet roofline of the GPU it ran on."""
    from kernelab.hardware.catalog import CATALOG
    from kernelab.roofline.model import Ceilings, place
    from kernelab.spec.reference import get_op

    ours = [r for r in results.records if r.implementation.startswith(("triton.", "sgemm:"))]
    gpu_ids = {r.gpu_id for r in results.records if r.gpu_id in CATALOG}
    if not ours or len(gpu_ids) != 1:
        return
    ceilings = Ceilings.from_spec(CATALOG[gpu_ids.pop()])
    best: dict[tuple, object] = {}
    for r in ours:
        size = r.flops + r.bytes
        key = (r.op, r.dtype)
        if (
            key not in best
            or size > best[key].flops + best[key].bytes
            or (size == best[key].flops + best[key].bytes and r.median_ms < best[key].median_ms)
        ):
            best[key] = r
    points = []
    for (op, dtype), r in sorted(best.items()):
        try:
            points.append(place(get_op(op).cost(r.shape, dtype), ceilings, time_ms=r.median_ms))
        except Exception:  # noqa: BLE001 - a shape the cost model does not take is not drawn
            continue
    for family in ("fp32", "bf16"):
        group = [p for p in points if (p.dtype == "fp32") == (family == "fp32")]
        title = (f"Measured {family}-family kernels on {charts.gpu_of(ours)}, "
                 f"{ceilings.gpu_id} datasheet roofline")  # fmt: skip
        path = charts.roofline_chart(ceilings, group, figures / f"roofline_measured_{family}.png",
                                     title, f"Cold L2, medians of the samples. Source: "
                                     f"{charts.sources_of(ours)}")  # fmt: skip
        if path:
            report.add(Image(path, f"measured {family}-family kernels (TFLOP/s against FLOP/byte) "
                                   f"on the {ceilings.gpu_id} datasheet roofline, each op's "
                                   "fastest at its largest shape; from "
                                   f"{charts.sources_of(ours)}"))  # fmt: skip


def ceilings_section(report: Report, results: ResultSet, gpu_id: str | None = None) -> None:
    """The measured ceilings beside their datasheet. With `gpu_id` (the GPU a report is
    about), only that card's: when the records hold another card's, one line says none were
    measured on this one (never the other card's figures in a report about this one)."""
    if not results.ceilings:
        return
    ceilings = results.ceilings if gpu_id is None else results.ceilings_on(gpu_id)
    if ceilings is None:
        other = results.ceilings_card() or results.ceilings.get("gpu") or "an unknown GPU"
        report.add(Heading("Measured ceilings"),
                   Paragraph(f"None measured on the {gpu_id}: the ceilings in these records are "
                             f"the {other}'s, not shown in a report about the {gpu_id} "
                             "(kernelab ceilings on one measures its own)."))  # fmt: skip
        return
    rows = []
    for name, c in ceilings["ceilings"].items():
        unit = "TB/s" if c["unit"] == "bytes/s" else "TFLOP/s"
        rows.append([name, _fmt(c["rate"] / 1e12), _fmt(c["datasheet"] / 1e12 if c["datasheet"] else None),
                     unit, _fmt(100 * c["ratio"] if c["ratio"] else None, ".1f"), shape_text(c["shape"])])  # fmt: skip
    report.add(Heading("Measured ceilings"),
               Table(["ceiling", "measured", "datasheet", "unit", "% of datasheet", "at"], rows))  # fmt: skip


def _limiter(limiter) -> str:
    return " and ".join(limiter) if isinstance(limiter, (tuple, list)) else str(limiter)


def _tuned_tile(name: str, gpu_id: str):
    """(TileConfig, ptxas registers or None) of the winner a tunable SGEMM step ran with on
    `gpu_id` (its committed tuning), or None for a fixed step or a GPU never tuned."""
    from kernelab.errors import KernelabError
    from kernelab.ladders.sgemm.steps import STEPS
    from kernelab.ladders.sgemm.tuning import committed_winner
    from kernelab.lenses.tile import tile_config_from_metadata

    step = next((s for s in STEPS if s.name == name and s.tunable), None)
    defines = committed_winner(step, gpu_id) if step else None
    if defines is None:
        return None
    config = tile_config_from_metadata({"tiles": step.tiles_with(defines)}, dtype="fp32")
    try:
        from kernelab.ladders.sgemm import build_step

        registers = build_step(step, defines).report(step.kernel).registers
    except KernelabError:  # no nvcc and no cached cubin: the lens estimates them
        registers = None
    return config, registers


def tile_lens_section(report: Report, ladder: list, registers: dict[str, int]) -> None:
    """Each step's tile seen through the tile lens, beside its measured speed: the occupancy
    it allows and what each level of tiling reuses. Tunable steps show the tile they ran with
    (the committed winner for the records' GPU at the large shape class), fixed steps their
    only tile."""
    import dataclasses

    from kernelab.hardware.catalog import CATALOG
    from kernelab.hardware.detect import DEFAULT_GPU
    from kernelab.lenses.tile import analyze_tile, ladder_tiles

    gpu_ids = {r.gpu_id for r in ladder if r.gpu_id in CATALOG}
    spec = CATALOG[gpu_ids.pop()] if len(gpu_ids) == 1 else CATALOG[DEFAULT_GPU]
    size = 4096
    speed = {r.implementation: r for r in ladder if r.shape.get("m") == size}
    rows = []
    for name, config in ladder_tiles().items():
        tuned = _tuned_tile(name, spec.id)
        if tuned is not None:
            config, tuned_registers = tuned
            if tuned_registers is not None:
                config = dataclasses.replace(config, registers=tuned_registers)
        elif name in registers:
            config = dataclasses.replace(config, registers=registers[name])
        a = analyze_tile(config, spec, m=size, n=size, k=size)
        measured = speed.get(name)
        rows.append([
            name, f"{config.bm}x{config.bn}x{config.bk}, {config.tm}x{config.tn}/thread",
            f"{a.registers_per_thread} ({'ptxas' if a.registers_source == 'given' else 'est.'})",
            f"{a.smem_per_block_bytes // 1024} KiB",
            f"{a.occupancy.blocks_per_sm} ({_limiter(a.occupancy.limiter)})", f"{a.occupancy.occupancy_pct:.0f} %",
            _fmt(a.block_flops_per_global_byte, ".0f"), _fmt(a.thread_flops_per_smem_load, ".1f"),
            _fmt(a.waves.waves if a.waves else None, ".2f"),
            "-" if measured is None else f"{measured.achieved_tflops * 1e3:,.0f}",
        ])  # fmt: skip
    if rows:
        report.add(
            Heading(f"The tile lens on each step ({spec.id}, {size}^3, the tile each step ran)", 3),
            Table(["step", "tile", "registers", "smem/block", "blocks/SM (limiter)", "occupancy",
                   "FLOP per global byte", "FLOP per smem load", "waves", "GFLOP/s"], rows),
        )  # fmt: skip


def ladder_section(report: Report, results: ResultSet, figures: Path,
                   registers: dict[str, int] | None = None) -> None:  # fmt: skip
    registers = registers or {}
    ladder = results.ladder()
    if not ladder:
        return
    sizes = sorted({r.shape["m"] for r in ladder})
    names = sorted({r.implementation for r in ladder}, key=lambda n: (not n.startswith("torch"), n))
    by = {(r.implementation, r.shape["m"]): r for r in ladder}
    rows = []
    for name in names:
        row = ["cuBLAS fp32" if name.startswith("torch") else name]
        for size in sizes:
            r = by.get((name, size))
            row.append(
                "-"
                if r is None
                else f"{r.achieved_tflops * 1e3:,.0f} ({r.extra.get('pct_of_cublas', 0):.0f} %)"
            )
        technique = next(
            (by[(name, s)].extra.get("technique", "") for s in sizes if (name, s) in by), ""
        )
        rows.append(row + [technique])
    gpu = charts.gpu_of(ladder)
    report.add(Heading(f"SGEMM ladder (fp32, no TF32) on {gpu}: GFLOP/s and % of cuBLAS"),
               Table(["step", *[f"{s}^3" for s in sizes], "technique"], rows))  # fmt: skip
    path = charts.ladder_chart(ladder, figures / "ladder.png")
    if path:
        report.add(Image(path, f"SGEMM ladder against cuBLAS fp32 on {gpu}, GFLOP/s; from "
                               f"{charts.sources_of(ladder)}"))  # fmt: skip
    tile_lens_section(report, ladder, registers)


def table_sources(shown: list, results: ResultSet) -> str:
    """Which records a table of kernelab-timer runs reads, by file and day, and, where a later
    do_bench run exists, that the exit criteria judge that run instead: the two can differ
    (other shapes, another timer, another day) without either being wrong."""
    days = sorted({r.timestamp[:10] for r in shown if r.timestamp})
    when = days[0] if len(days) == 1 else (f"{days[0]} to {days[-1]}" if days else "an unknown day")
    files = sorted({str(r.extra.get("source_file", "")) for r in shown} - {""})
    named = ", ".join(files) if 0 < len(files) <= 6 else charts.sources_of(shown)
    text = (f"Each row is the latest run that timed its case with kernelab's cold timer: from "
            f"{named}, {when}.")  # fmt: skip
    later = max((r.timestamp for r in results.pytorch_records if r.timestamp), default="")
    if results.pytorch_file and later[:10] > (days[-1] if days else ""):
        text += (f" The exit criteria judge each target by its newest run: for the targets "
                 f"timed again in {results.pytorch_file} ({later[:10]}, triton.testing.do_bench, "
                 "at the shapes of 'As PyTorch calls them' below), that run, not these rows.")  # fmt: skip
    return text


def _ours(impls: dict):
    """The Triton kernel of one case in one run: triton.<op> (the tuned default)."""
    return next((r for n, r in sorted(impls.items()) if n.startswith("triton.")), None)


def _case_order(case: tuple) -> tuple:
    op, shape, dtype = case
    return op, dtype, tuple(sorted(json.loads(shape).items()))


def baseline_kinds(names) -> str:
    """What the baselines in the Triton table are, in words, from the names the runs timed:
    the heading names only what the table holds (torch.compile only when it was timed)."""
    kinds = []
    if any(n.startswith(("eager.", "torch.")) and "compile" not in n for n in names):
        kinds.append("torch eager")
    if any("compile" in n for n in names):
        kinds.append("torch.compile")
    if any(n.startswith("cublas.") for n in names):
        kinds.append("cuBLAS")
    if any(n.startswith("triton") for n in names):
        kinds.append("other Triton variants")
    if not kinds:
        return "no baseline"
    return ", ".join(kinds[:-1]) + (" and " if len(kinds) > 1 else "") + kinds[-1]


def _host_text(ours, baselines: list) -> str:
    """The launch lens beside the device rates: host microseconds per call of ours and of the
    first baseline (harness/launch_cost.py), "-" for records made before they carried it."""

    def host(record) -> float | None:
        value = (record.extra.get("host_cost") or {}).get("host_us")
        return value if isinstance(value, (int, float)) else None

    mine = host(ours)
    if mine is None:
        return "-"
    theirs = next((h for _, r in baselines if (h := host(r)) is not None), None)
    bound = " (launch-bound)" if (ours.extra.get("host_cost") or {}).get("launch_bound") else ""
    return f"{mine:.1f} / {theirs:.1f}{bound}" if theirs is not None else f"{mine:.1f}{bound}"


def kernels_section(report: Report, results: ResultSet, figures: Path) -> None:
    others = [r for r in results.records if r not in results.ladder() and r.op != "gemm" or
              r.dtype != "fp32" and r.op == "gemm"]  # fmt: skip
    if not others:
        return
    copy = results.ceilings["ceilings"]["copy"]["rate"] / 1e9 if results.ceilings else None
    # One row per case, from the latest run that measured it: ours and its baselines always
    # come from the same run (one file), never mixed across runs.
    runs: dict[tuple, dict[str, dict]] = {}
    shapes: dict[tuple, dict] = {}  # each case's shape in its op's own key order (m, n, k)
    for r in others:
        case = (r.op, json.dumps(r.shape, sort_keys=True), r.dtype)
        shapes.setdefault(case, r.shape)
        runs.setdefault(case, {}).setdefault(r.extra.get("source_file", ""), {})[
            r.implementation
        ] = r
    rows, names, shown = [], set(), []
    for (op, shape, dtype), by_run in sorted(runs.items(), key=lambda kv: _case_order(kv[0])):
        candidates = [impls for impls in by_run.values() if _ours(impls)]
        if not candidates:
            continue
        impls = max(candidates, key=lambda i: max(r.timestamp for r in i.values()))
        ours = _ours(impls)
        shown.extend(impls.values())
        unit = "TFLOP/s" if op in RATE_OPS else "TB/s"

        def rate(r, op=op):
            return r.achieved_tflops if op in RATE_OPS else (r.achieved_gbps or 0) / 1000

        baselines = [(n, r) for n, r in sorted(impls.items()) if r is not ours]
        names.update(n for n, _ in baselines)
        base = ", ".join(f"{n}: {_fmt(rate(r))} {unit}" for n, r in baselines)
        vendor = next((impls[n] for n in ("cublas.gemm", "torch.mm") if n in impls), None)
        if op in RATE_OPS:
            pct = f"{100 * rate(ours) / rate(vendor):.1f} % of cuBLAS" if vendor else ""
        else:
            pct = (
                f"{100 * ours.achieved_gbps / copy:.1f} % of copy"
                if copy and ours.achieved_gbps
                else ""
            )
        rows.append([op, shape_text(shapes[op, shape, dtype]), dtype, f"{_fmt(rate(ours))} {unit}", pct, base,
                     _host_text(ours, baselines)])  # fmt: skip
    header = ["op", "shape", "dtype", "triton", "of the ceiling", "baselines",
              "host us/call (triton / first baseline)"]  # fmt: skip
    if all(row[-1] == "-" for row in rows):  # records made before they carried host costs
        header, rows = header[:-1], [row[:-1] for row in rows]
    report.add(Heading(f"Triton kernels against {baseline_kinds(names)}"),
               Paragraph("eager.softmax (benchmarks/triton_kernels.py's name) and torch.softmax "
                         "(the lab's) are the same baseline: torch's own op, run eagerly. "
                         + table_sources(shown, results)),
               Table(header, rows))  # fmt: skip
    latest = latest_per_case(others)
    path = charts.softmax_chart(latest, figures / "softmax.png", copy)
    if path:
        softmax = [r for r in latest if r.op == "softmax"]
        report.add(Image(path, f"softmax TB/s against row length on {charts.gpu_of(softmax)}, "
                               "kernelab's Triton kernel and torch eager, cold L2; from "
                               f"{charts.sources_of(softmax)}"))  # fmt: skip


# A timing whose samples spread more than this (IQR / median) is marked as not comparable.
NOISY_TIMING = 0.10


def hgemm_section(report: Report, results: ResultSet) -> None:
    """The Hopper bf16 ladder: each step's TFLOP/s and % of cuBLAS in the same run, per mode."""
    summary = results.hgemm_summary
    if not summary or not any(summary.get(k) for k in ("timing", "rounds", "paired")):
        return
    timing = summary.get("timing") or []  # a run may have made only rounds or pairs
    techniques = {}
    try:
        from kernelab.ladders.hgemm.steps import STEPS

        techniques = {step.name: step.technique for step in STEPS}
    except ImportError:
        pass
    sizes = sorted({row["size"] for row in timing})
    noisy_cells = 0
    for mode in ("cold", "graph", "hot"):
        cells: dict[str, dict[int, str]] = {}
        for row in timing:
            if row["mode"] != mode or row.get("tflops") is None:
                continue  # the B transpose alone is a time, not a GEMM rate
            noisy = (row.get("rel_noise") or 0) > NOISY_TIMING
            noisy_cells += noisy
            cells.setdefault(row["impl"], {})[row["size"]] = (
                f"{row['tflops']:,.0f} ({row['pct_of_cublas']:.0f} %){' †' if noisy else ''}"
            )
        if not cells:
            continue
        rows = [[name, *(by_size.get(size, "-") for size in sizes),
                 techniques.get(name, "cuBLAS bf16 (torch.mm)" if name == "torch.mm" else "")]
                for name, by_size in cells.items()]  # fmt: skip
        what = "L2 flushed before each call" if mode == "cold" else "back to back in a CUDA graph"
        report.add(
            Heading(f"Hopper bf16 GEMM ladder, {mode} ({what}): TFLOP/s (% of cuBLAS)"),
            Table(["step", *(f"{size}^3" for size in sizes), "technique"], rows),
        )
        if mode == "cold":
            report.add(Paragraph(
                f"The latest ladder run, on {summary.get('gpu') or 'an unnamed GPU'}: the steps "
                f"{', '.join(summary.get('steps') or [])} against cuBLAS in the same run."
            ))  # fmt: skip
    if noisy_cells:
        report.add(Paragraph(
            f"† a timing whose relative noise (IQR / median) is above {NOISY_TIMING:.0%}: its "
            "samples disagree, so its figure is not comparable (the records say why)."
        ))  # fmt: skip
    rounds = summary.get("rounds") or []
    if rounds:
        rows = [[r["impl"], f"{r['size']}^3", f"{r['pct_median']:.1f}",
                 f"{r['pct_min']:.1f} - {r['pct_max']:.1f}", f"{r['rounds_ahead']} / {r['rounds']}"]
                for r in rounds]  # fmt: skip
        report.add(
            Heading("Hopper bf16 GEMM ladder in interleaved rounds (cold): % of cuBLAS"),
            Paragraph(
                "Each round times cuBLAS, every step, then cuBLAS again; a step is rated "
                "against the faster of the two cuBLAS timings around it, so the card's drift "
                "over a run cancels. A round keeps its %, not the samples behind it, so the "
                "gate shows these but never judges on them."
            ),
            Table(["step", "size", "median %", "range %", "rounds ahead"], rows),
        )
    paired = summary.get("paired") or []
    if paired:
        rows = [[r["impl"], r.get("mode", "cold"), f"{r['size']}^3", f"{r['pct_median']:.1f}",
                 f"{r['pct_ci95'][0]:.1f} - {r['pct_ci95'][1]:.1f}",
                 f"{r['pct_p20']:.1f} - {r['pct_p80']:.1f}", f"{r['pairs_ahead']} / {r['pairs']}"]
                for r in paired]  # fmt: skip
        report.add(
            Heading("Hopper bf16 GEMM ladder in alternating pairs: % of cuBLAS"),
            Paragraph(
                "Each sample is a pair of calls, one of cuBLAS and one of the step, back to back "
                "(cold: the L2 flushed before each; hot: not), alternating which goes first "
                "(kernelab.harness.paired); the figure is the median over pairs of cuBLAS time "
                "/ step time, beside its 95 % interval and the band of single pairs. Both calls "
                "of a pair run at the same clocks, so the card's drift under its power cap "
                "cancels. The gate judges the cold medians when this run is the card's newest "
                "measure of the target."
            ),
            Table(
                ["step", "mode", "size", "median %", "95 % interval", "p20 - p80", "pairs ahead"],
                rows,
            ),
        )


def timeline_section(report: Report, results: ResultSet) -> None:
    """The inference example's findings: decode against prefill, and a CUDA graph."""
    example = results.timeline_example
    if not example or not example.get("findings"):
        return
    items = []
    for line in example["findings"]:
        depth = (len(line) - len(line.lstrip())) // 2
        items.append((depth, plain_dicts(line.strip().removeprefix("- "))))
    report.add(Heading("From a model to its hot kernel: the inference example"), Bullets(items))
    if example.get("misses"):
        report.add(Paragraph("Expectations missed: " + "; ".join(example["misses"])))


def _timed_gbps(results: ResultSet, profile: dict) -> float | None:
    """The latest timed DRAM rate (GB/s) of the profiled case: the same implementation,
    dtype and shape; else, for a row-wise op (softmax, norms), the same row length, since
    its rate depends on the row length, not on the row count once the rows fill the GPU."""
    shape = profile.get("shape") or {}
    same = [r for r in results.records
            if r.implementation == profile.get("implementation")
            and r.dtype == profile.get("dtype") and r.achieved_gbps]  # fmt: skip
    exact = [r for r in same if r.shape == shape]
    if not exact and set(shape) == {"rows", "cols"}:
        exact = [
            r for r in same if set(r.shape) == {"rows", "cols"} and r.shape["cols"] == shape["cols"]
        ]
    return max(exact, key=lambda r: r.timestamp).achieved_gbps if exact else None


def profiles_section(report: Report, results: ResultSet) -> None:
    if not results.profiles:
        return
    from kernelab.profiling.diagnose import AT_DRAM_ROOF_ADVICE, at_roof_summary, dram_roof_pct

    copy = results.ceilings["ceilings"]["copy"]["rate"] / 1e9 if results.ceilings else None
    rows = []
    for p in results.profiles:
        if "bottleneck" not in p:  # a profile that failed keeps its one-line reason
            rows.append([p.get("implementation", p.get("name")), "-", "-", "-", "-", "-",
                         f"not profiled: {p.get('error') or 'no diagnosis recorded'}"])  # fmt: skip
            continue
        stall = p["stalls"][0]["reason"] if p.get("stalls") else "-"
        bottleneck, step = f"{p['bottleneck']} / {p.get('unit')}", (p.get("advice") or ["-"])[0]
        # The timed rate (no profiler replays) of the same case says whether it sits on the roof.
        timed = _timed_gbps(results, p) or p.get("dram_gbps")
        if dram_roof_pct(timed, copy) is not None:
            bottleneck = "memory / DRAM (at the roof)"
            step = f"{at_roof_summary(timed, copy)} (timed). {AT_DRAM_ROOF_ADVICE}"
        rows.append([p.get("implementation", p.get("name")), bottleneck,
                     _fmt(p.get("sm_pct"), ".0f"), _fmt(p.get("dram_gbps"), ".0f"), _fmt(p.get("tensor_pct"), ".0f"),
                     stall, step])  # fmt: skip
    report.add(Heading("Nsight Compute: the bottleneck of each key kernel"),
               Table(["kernel", "bottleneck", "SM %", "DRAM GB/s", "tensor %", "top stall", "next step"], rows))  # fmt: skip


def pmpp_timing(report: Report, results: ResultSet, figures: Path, *,
                no_records: str | None) -> None:  # fmt: skip
    """Each PMPP ladder's newest run in `results`: its table and chart against its ceiling.
    A ladder without records gets the one line `no_records` (None: nothing)."""
    from kernelab.lab import pmpp

    for ladder in pmpp.LADDERS:
        run = pmpp.newest_run(results.records, ladder)
        if run is None or not run.records:
            if no_records is not None:
                why = no_records if ladder.time is not None else (
                    "not timed by the lab yet (no timing adapter in lab.pmpp.LADDERS); no "
                    "records of it here.")  # fmt: skip
                report.add(Paragraph(f"{ladder.title} ({ladder.name}): {why}"))
            continue
        header, rows = pmpp.table(run, results.ceilings)
        report.add(
            Heading(f"{ladder.title} ladder on {charts.gpu_of(run.records)}", 3),
            Paragraph(f"From {run.source} ({run.day}); GB/s = the op's minimal bytes / median "
                      f"of the samples, cold L2; the ceiling is {ladder.ceiling_words}."),
            Table(header, rows),
        )  # fmt: skip
        panels = []
        for key, case in sorted(run.cases().items()):
            ceiling, _ = run.ceiling_gbps(case, results.ceilings)
            bars = [(r.implementation, r.achieved_gbps or 0.0) for r in sorted(case, key=pmpp._order)
                    if r.implementation not in (pmpp.COPY_CEILING, pmpp.READ_CEILING)]  # fmt: skip
            panels.append((" ".join(p for p in (pmpp._shape(case[0]), *key[1:]) if p), bars,
                           ceiling))  # fmt: skip
        path = charts.primitive_chart(ladder.title, panels, figures / f"pmpp_{ladder.name}.png",
                                      records=run.records, ceiling_words=ladder.ceiling_words)  # fmt: skip
        if path:
            report.add(Image(path, f"{ladder.title} ladder, GB/s per step against its ceiling "
                                   f"on {charts.gpu_of(run.records)}; from {run.source}"))  # fmt: skip


def pmpp_section(report: Report, state, results: ResultSet, figures: Path) -> None:
    """The PMPP primitives: where they sit on the roofline, each ladder's compile report
    (this run's, nvcc) and its timed table and chart, or one line saying timing needs a GPU."""
    from kernelab.lab import pmpp

    report.add(
        Heading("PMPP primitives: reduction, scan, histogram, transpose"),
        Paragraph(f"Where each sits on the {state.gpu_id} datasheet roofline at a representative "
                  "shape: an intensity near zero (a reduction does one add per element read, "
                  "a transpose and a histogram none), far left of the ridge, so every one is "
                  "memory-bound and its floor is its minimal bytes over the bandwidth. Each "
                  "ladder is judged against a measured bandwidth ceiling, not a FLOP rate."),
        Table(["ladder", "shape", "dtype", "FLOPs", "minimal bytes", "FLOP/byte",
               "ridge (FLOP/byte)", "bound", "floor ms"], pmpp.placement_rows(state.gpu_id)),
    )  # fmt: skip
    compiled = pmpp.read_compile(state.records_dir)
    for ladder in pmpp.LADDERS:
        entry = compiled.get(ladder.name)
        if entry is None:
            continue
        if entry.get("skipped"):
            report.add(Paragraph(f"{ladder.title}: compile report skipped: {entry['skipped']}"))
            continue
        # A step of several kernels (scan:03 is three) has a row per kernel: without the
        # kernel's name two rows of one step and dtype look alike but for their figures.
        kernels = any(r.get("kernel") for r in entry.get("rows", []))
        rows = [[r["step"], *([r.get("kernel", "")] if kernels else []), r.get("dtype", ""),
                 r.get("technique", ""), r["registers"], r["static_smem_bytes"],
                 r["spill_store_bytes"] + r["spill_load_bytes"]]
                for r in entry.get("rows", [])]  # fmt: skip
        report.add(Heading(f"{ladder.title} ladder: compile report (ptxas)", 3),
                   Table(["step", *(["kernel"] if kernels else []), "dtype", "technique",
                          "registers", "static smem (B)", "spills (B)"], rows))  # fmt: skip
        if ladder.docs:
            report.add(Paragraph(f"Each step, the fix it makes and the counter that proves it: "
                                 f"{ladder.docs}."))  # fmt: skip
    report.add(Heading("PMPP ladders: checks and timings", 3))
    notes = pmpp.read_notes(state.records_dir)
    for name, lines in notes.items():
        if lines:
            report.add(Paragraph(f"{name}: " + "; ".join(lines)))
    pmpp_timing(report, results, figures,
                no_records="this run has no timing of it (see the pmpp stage's line)"
                if state.on_gpu else
                "timing needs a GPU (kernelab lab on a machine with one checks and times it "
                "beside its anchors and its ceiling); no committed records of it either.")  # fmt: skip


def cpu_sections(report: Report, records_dir: Path) -> None:
    compile_data = _read(records_dir / "compile.json")
    if compile_data.get("compile"):
        report.add(Heading("CUDA ladder: compile report (ptxas, sm_90)"),
                   Table(["step", "registers", "static smem (B)", "dynamic smem (B)", "spills (B)", "threads"],
                         [[r["step"], r["registers"], r["static_smem_bytes"], r["dynamic_smem_bytes"],
                           r["spill_store_bytes"] + r["spill_load_bytes"], r["threads"]]
                          for r in compile_data["compile"]]))  # fmt: skip
    elif compile_data.get("skipped"):
        report.add(Heading("CUDA ladder: compile report"), Paragraph(compile_data["skipped"]))
    interp = _read(records_dir / "interpreter.json")
    if interp:
        report.add(Heading("Triton kernels checked on the CPU (TRITON_INTERPRET=1)"),
                   Table(["implementation", "shape", "dtype", "check", "error"],
                         [[r["implementation"], shape_text(r.get("shape", "")), r.get("dtype", ""),
                           "PASS" if r["ok"] else "FAIL", _fmt(r.get("error"), ".2e")]
                          for r in interp["interpreter_checks"]]))  # fmt: skip


def compose(state, results: ResultSet, source_note: str, gate: list[Criterion]) -> Report:
    figures = state.out / "figures"
    report = Report("kernelab lab report")
    mode = ("on the GPU of this machine" if state.on_gpu else
            "on a machine without a GPU: analytic rooflines, compile report and interpreter "
            "checks here; timings, ceilings and profiles need a CUDA GPU and come from "
            "committed records")  # fmt: skip
    report.add(Paragraph(f"Run {mode}."))
    provenance_section(report, state, results, source_note)
    gate_section(report, gate, state.on_gpu, results.machine())
    roofline_section(report, state.records_dir, figures)
    ceilings_section(report, results, state.gpu_id)
    compiled = _read(state.records_dir / "compile.json").get("compile", [])
    ladder_section(report, results, figures, {r["step"]: r["registers"] for r in compiled})
    kernels_section(report, results, figures)
    note = rate_goal_note(results)
    pytorch_section(report, results, note=f"Note: {note}." if note else "")
    hgemm_section(report, results)
    measured_roofline(report, results, figures)
    profiles_section(report, results)
    timeline_section(report, results)
    pmpp_section(report, state, results, figures)
    counters.section(report, results, state.on_gpu)
    decode.section(report, state.gpu_id, state.on_gpu, results, figures)
    cpu_sections(report, state.records_dir)
    if not state.on_gpu:
        next_on_gpu_section(report, state.out)
    return report
