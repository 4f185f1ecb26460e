"""`kernelab bench KERNEL`: check a registered implementation, time it, place it on the roofline.

For every shape: fresh inputs, the correctness check first (a failed check is reported and
that shape is not timed), then the timer, then FLOP/s, bytes/s and the share of the
datasheet roofline (and of the measured one, when `kernelab ceilings` has run). The torch
baselines of the same op are timed in the same run and the speedup over each is reported.
Records go to --out and are appended to the user's cache.

A time under the roofline's floor is flagged "faster than speed of light": a broken kernel
or cost model, never a win.

`--gpus N` (2 or more) or `--ray-address ADDR` spreads the shapes over GPUs through Ray
(kernelab.spread.sweeps, docs/spread.md), a shape per task, the records saved per card.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated

import typer

from kernelab.commands.options import (
    comma_items,
    max_time_option,
    out_file_option,
    parse_count,
    record_file,
    spread_options,
)
from kernelab.errors import KernelabError, output_file, output_folder, positive_number, unknown
from kernelab.harness.bench import BenchSession, build_candidates, shape_rows
from kernelab.output import JsonOption, emit, note

SpreadGpus, SpreadAddress, SpreadResume, SpreadTasks = spread_options("the shapes", "shape")

DEFAULT_SIZES = {
    "gemm": "4096",
    "vector_add": "256M",
    "softmax": "4096x4096",
    "layernorm": "4096x4096",
    "rmsnorm": "4096x4096",
    "softmax_backward": "4096x4096",
    "rmsnorm_backward": "4096x4096",
}
DEVICE = "cuda"  # where inputs live and the check runs (a CPU test points it elsewhere)


def parse_sizes(op: str, shape_keys: tuple[str, ...], spec: str) -> list[dict]:
    """The shapes a --sizes spec names: comma-separated, each "AxBxC" in the op's key order,
    each number a count as options.parse_count reads it ("4096", "1M", "2^20"); a single
    number for gemm means a square problem."""
    form = "x".join(key.upper() for key in shape_keys)
    shapes = []
    for item in comma_items(spec, "--sizes", DEFAULT_SIZES.get(op, form)):
        parts = re.split("[xX]", item)
        if len(parts) == 1 and op == "gemm":
            parts = parts * 3
        if len(parts) != len(shape_keys):
            hint = " or one number for a square problem" if op == "gemm" else ""
            raise KernelabError(f"{op} sizes are {form}{hint}; got '{item}'")
        try:
            counts = [parse_count(part) for part in parts]
        except KernelabError as exc:
            if len(parts) == 1:
                raise
            raise KernelabError(f"{exc} in {op} size '{item}' ({form})") from None
        shapes.append(dict(zip(shape_keys, counts, strict=True)))
    if not shapes:
        raise KernelabError(f"no sizes given; {op} sizes look like {form}")
    return shapes


def check_shape(impl, op_spec, shape: dict, dtype: str) -> None:
    """`shape` refused in one line, before any GPU is looked for, when the op's specification
    or `impl` cannot take it: the cost model's checks (heads a multiple of kv_heads, an int4
    group dividing K, ...), the checks of the spec's input maker, run on fake tensors that
    hold no memory (an even head_dim for rope, ...), inputs larger than any GPU's memory, and
    a limit the implementation states beside its tiles (a ladder histogram's max_bins)."""
    where = f"{impl.name} at {shape_text(shape)}"
    op_spec.cost(shape, dtype)
    nbytes = _input_bytes(op_spec, shape, dtype)
    if nbytes is not None:
        largest = _largest_gpu()
        if nbytes > largest.memory_gb * 1e9:
            raise KernelabError(
                f"{where}: its inputs alone take {nbytes / 1e9:,.0f} GB, more than any GPU "
                f"holds (the most in the catalog: {largest.memory_gb:g} GB, {largest.name})"
            )
    tiles = impl.metadata.get("tiles") if isinstance(impl.metadata, dict) else None
    for key, value in shape.items():
        limit = (tiles or {}).get(f"max_{key}")
        if isinstance(limit, int) and value > limit:
            raise KernelabError(f"{where}: {key} must be at most {limit} (the limit of "
                                f"{impl.name}'s kernels), got {value}")  # fmt: skip


def _input_bytes(op_spec, shape: dict, dtype: str) -> int | None:
    """The bytes of the inputs op_spec.make_inputs would draw for `shape`, found by drawing
    them on torch's fake tensors (shapes and dtypes, no storage): a KernelabError the maker
    raises is the shape's, as on a GPU. None where the maker cannot run on fake tensors (it
    reads values back, e.g. to normalise) or torch has no fake tensors: the GPU run decides."""
    import logging

    import torch

    try:
        from torch._subclasses.fake_tensor import FakeTensorMode
    except ImportError:
        return None
    # torch logs a traceback for an op that fails on fake tensors; that failure is no error
    # here, so it is kept off the user's screen
    fake_log = logging.getLogger("torch._subclasses.fake_tensor")
    level = fake_log.level
    fake_log.setLevel(logging.CRITICAL)
    try:
        with FakeTensorMode():
            inputs = op_spec.make_inputs(shape, dtype, seed=0, device="cpu")
    except KernelabError:
        raise
    except Exception:  # a maker fake tensors cannot follow is no verdict on the shape
        return None
    finally:
        fake_log.setLevel(level)
    return sum(x.numel() * x.element_size() for x in inputs if isinstance(x, torch.Tensor))


def _largest_gpu():
    from kernelab.hardware.catalog import CATALOG

    return max(CATALOG.values(), key=lambda spec: spec.memory_gb)


def default_dtype(impl) -> str:
    return "bf16" if "bf16" in impl.dtypes else impl.dtypes[0]


def pick_baselines(impl, dtype: str, names: list[str] | None, candidates) -> list:
    """The baselines to time beside `impl`: the named ones, or by default every registered
    baseline of the same op, dtype and math mode (torch eager, torch.compile, cuBLAS)."""
    from kernelab.spec import registry

    if names:
        chosen = [registry.get(name) for name in names]
        for other in chosen:
            if other.op != impl.op:
                raise KernelabError(f"baseline {other.name} computes {other.op}, not {impl.op}")
            if dtype not in other.dtypes:
                raise unknown(f"dtype for {other.name}", dtype, other.dtypes)
        return chosen
    return [
        other
        for other in candidates
        if other.is_baseline
        and other.name != impl.name
        and dtype in other.dtypes
        and other.math_mode == impl.math_mode
    ]


def shape_text(shape: dict) -> str:
    return "x".join(str(v) for v in shape.values())


def _fmt(value, spec: str, suffix: str = "") -> str:
    return "-" if value is None else f"{value:{spec}}{suffix}"


def _render(result: dict):
    from kernelab.output import Table

    def render(console) -> None:
        table = Table(
            title=f"{result['kernel']} ({result['op']}, {result['dtype']}, {result['mode']}) on {result['gpu']}"
        )
        columns = (
            "implementation",
            "shape",
            "median ms",
            "host us/call",
            "TFLOP/s",
            "GB/s",
            "% roof",
            "% measured",
            "noise",
            "check err",
        )
        spread = result.get("spread")
        if spread:
            columns = (*columns, "GPU")
        for column in columns:
            left = column in ("implementation", "shape", "GPU")
            table.add_column(column, justify="left" if left else "right", no_wrap=left)
        for row in result["rows"]:
            name = row["implementation"]
            if not row["check_ok"]:
                table.add_row(
                    name,
                    shape_text(row["shape"]),
                    "[red]check failed[/red]",
                    *["-"] * 6,
                    _fmt(row["check_error"], ".2e"),
                    *([_ran_on(row)] if spread else []),
                )
                continue
            table.add_row(
                name,
                shape_text(row["shape"]),
                _fmt(row["median_ms"], ".4f"),
                _fmt(row.get("host_us"), ".1f")
                + (" (launch-bound)" if row.get("launch_bound") else ""),
                _fmt(row["tflops"], ",.2f"),
                _fmt(row["gbps"], ",.0f"),
                _fmt(row["pct_of_datasheet"], ".1f", " %"),
                _fmt(row["pct_of_measured"], ".1f", " %"),
                _fmt(100 * row["rel_noise"], ".1f", " %"),
                _fmt(row["check_error"], ".1e"),
                *([_ran_on(row)] if spread else []),
            )
        console.print(table)
        for row in result["rows"]:
            for other, speedup in row.get("speedup_vs", {}).items():
                console.print(
                    f"{row['implementation']} {shape_text(row['shape'])}: {speedup:.2f}x vs {other}"
                )
            if not row["check_ok"]:
                console.print(
                    f"[red]{row['implementation']} {shape_text(row['shape'])}: {row['check_message']}[/red]"
                )
            for warning in row.get("warnings", []):
                colour = (
                    "red"
                    if row.get("faster_than_light") and "speed of light" in warning
                    else "yellow"
                )
                console.print(
                    f"[{colour}]{row['implementation']} {shape_text(row['shape'])}: {warning}[/{colour}]"
                )
        if spread:
            console.print(
                f"spread over {spread['gpus']} GPU(s), {spread['resumed']} of "
                f"{spread['tasks']} shape(s) resumed; task records: {spread['folder']}",
                highlight=False,
            )
        if result.get("saved_to"):
            console.print(f"records: {', '.join(result['saved_to'])}")

    return render


def _ran_on(row: dict) -> str:
    ran_on = row.get("ran_on") or {}
    return f"{ran_on['node']} gpu {ran_on['gpu']}" if ran_on else "-"


def register(app: typer.Typer) -> None:
    @app.command()
    def bench(
        kernel: Annotated[
            str, typer.Argument(help="A registered implementation, e.g. torch.softmax.")
        ],
        sizes: Annotated[
            str | None,
            typer.Option(
                "--sizes",
                help='Comma-separated shapes in the op key order: gemm "4096" or "MxNxK"; '
                'softmax/norms "ROWSxCOLS"; vector_add "N"; each number like 4096, 4K '
                "(K/M/G = 2^10/2^20/2^30) or 2^12.",
            ),
        ] = None,
        dtype: Annotated[
            str | None, typer.Option("--dtype", help="Input dtype (default bf16 where supported).")
        ] = None,
        mode: Annotated[
            str, typer.Option("--mode", help="cold (L2 flushed), hot, or graph.")
        ] = "cold",
        baseline: Annotated[
            list[str] | None,
            typer.Option("--baseline", help="A baseline to time beside it (repeatable)."),
        ] = None,
        no_baselines: Annotated[
            bool, typer.Option("--no-baselines", help="Time only KERNEL.")
        ] = False,
        out: out_file_option("Write the records to this JSON file.") = None,
        plot: Annotated[
            str | None,
            typer.Option(
                "--plot",
                metavar="FILE",
                help="Chart of the rate against size, ceiling drawn (.png/.svg).",
            ),
        ] = None,
        min_samples: Annotated[int, typer.Option("--min-samples", help="Fewest timed calls.")] = 10,
        max_time: max_time_option("shape") = 2.0,
        gpus: SpreadGpus = None,
        ray_address: SpreadAddress = None,
        resume: SpreadResume = False,
        tasks_dir: SpreadTasks = None,
        timeout: Annotated[
            float,
            typer.Option(
                "--timeout", help="Seconds per shape on a spread sweep before its GPU is cut."
            ),
        ] = 600.0,
        as_json: JsonOption = False,
    ) -> None:
        """Check and time a kernel at given sizes; report TFLOP/s, GB/s and % of the roofline."""
        from kernelab.harness.ceilings import this_gpu
        from kernelab.harness.timing import MODES
        from kernelab.spec import registry
        from kernelab.spec.reference import get_op

        impl = registry.get(kernel)
        plot_path = output_file(plot, "--plot", suffixes=(".png", ".svg"))
        out_path = record_file(out)
        tasks_path = output_folder(tasks_dir, "--tasks-dir")
        if mode not in MODES:
            raise unknown("timing mode", mode, MODES)
        if min_samples < 1:
            raise KernelabError(f"--min-samples must be at least 1, got {min_samples}")
        positive_number(max_time, "--max-time", "seconds")
        # --timeout acts on a spread sweep only; a script passing the same options to a sweep
        # here gets its value checked all the same.
        positive_number(timeout, "--timeout", "seconds")
        if baseline and no_baselines:
            raise KernelabError("--baseline names baselines to time and --no-baselines times "
                                "none: give one of them")  # fmt: skip
        op_spec = get_op(impl.op)
        if dtype is not None and not dtype.strip():
            raise KernelabError(f"--dtype needs a value, not an empty string; {impl.name} "
                                f"takes {', '.join(impl.dtypes)}")  # fmt: skip
        dtype = (dtype or default_dtype(impl)).strip().lower()
        if dtype not in impl.dtypes:
            raise unknown(f"dtype for {impl.name}", dtype, impl.dtypes)
        if sizes is None:
            sizes = DEFAULT_SIZES.get(impl.op)
            if sizes is None:
                form = "x".join(key.upper() for key in op_spec.shape_keys)
                raise KernelabError(f"{impl.op} has no default sizes; give --sizes {form}")
        shapes = [op_spec.validate(s) for s in parse_sizes(impl.op, op_spec.shape_keys, sizes)]
        for shape in shapes:
            check_shape(impl, op_spec, shape, dtype)
        others = (
            []
            if no_baselines
            else pick_baselines(impl, dtype, baseline, registry.implementations(impl.op))
        )
        from kernelab.spread.plan import check_address, wants_ray

        if wants_ray(gpus, 1, check_address(ray_address)):
            if plot_path is not None:
                raise KernelabError("--plot draws one card's sweep: give it without --gpus")
            _spread(
                impl, shapes, others, dtype, mode, min_samples, max_time, gpus, ray_address,
                resume, tasks_path, timeout, out_path, as_json,
            )  # fmt: skip
            return
        if resume or tasks_path is not None:
            raise KernelabError("--resume and --tasks-dir apply to a sweep spread over GPUs")
        identity = this_gpu("kernelab bench")

        run = BenchSession(identity, op_spec, dtype, mode, min_samples, max_time, device=DEVICE)
        built = build_candidates(impl, others)
        rows, records = [], []
        for shape in shapes:
            found, made = shape_rows(run, built, shape, shape_text(shape))
            rows.extend(found)
            records.extend(made)

        saved = _save(records, out_path, identity.key)
        if plot_path is not None:
            _plot(records, plot_path, run, impl, dtype)
        result = {
            "kernel": impl.name,
            "op": impl.op,
            "dtype": dtype,
            "mode": mode,
            "gpu": identity.name,
            "gpu_id": identity.gpu_id,
            "rows": rows,
            "records": [r.to_dict() for r in records],
            "saved_to": saved,
            "plot": str(plot_path) if plot_path is not None and records else None,
        }
        emit(result, as_json, _render(result))
        if any(not row["check_ok"] for row in rows):
            raise typer.Exit(1)


def _plot(records, path: Path, run: BenchSession, impl, dtype: str) -> None:
    """The sweep chart, with the measured ceiling where one is cached, else the datasheet's."""
    from kernelab.lab.charts import sweep_chart
    from kernelab.roofline.model import math_dtype

    ceilings = run.measured or run.datasheet
    ceiling = None
    if ceilings is not None:
        if impl.op == "gemm":
            peak = ceilings.peak_flops.get(math_dtype(dtype, impl.math_mode))
            ceiling = (f"{ceilings.source} peak", peak / 1e12) if peak else None
        else:
            ceiling = (f"{ceilings.source} bandwidth", ceilings.bandwidth / 1e12)
    sweep_chart(records, path, title=f"{impl.name} {dtype} on {run.identity.name}", ceiling=ceiling)


def _spread(impl, shapes, others, dtype, mode, min_samples, max_time, gpus, address,
            resume, tasks_dir, timeout, out_path, as_json) -> None:  # fmt: skip
    """The sweep over GPUs through Ray (kernelab.spread.sweeps): rows in shape order, each
    naming its GPU; the records saved per card model."""
    from kernelab.harness.records import Record
    from kernelab.spread.sweeps import spread_sweep

    result = spread_sweep(
        impl.name, shapes, baselines=[other.name for other in others], dtype=dtype, mode=mode,
        min_samples=min_samples, max_time=max_time, device=DEVICE, gpus=gpus, address=address,
        deadline_s=timeout, resume=resume, folder=tasks_dir, show_progress=not as_json,
    )  # fmt: skip
    saved = []
    cards = result["by_card"]
    for card, made in cards.items():
        out = out_path
        if out_path is not None and len(cards) > 1:
            out = out_path.with_name(f"{out_path.stem}.{card}{out_path.suffix}")
        saved.extend(_save([Record.from_dict(r) for r in made], out, card))
    every = [r for made in cards.values() for r in made]
    shown = {
        "kernel": impl.name, "op": impl.op, "dtype": dtype, "mode": mode,
        "gpu": ", ".join(result["gpus"]) or "-",
        "gpu_id": next(iter(cards)) if len(cards) == 1 else None,
        "rows": result["rows"], "records": every, "saved_to": saved, "plot": None,
        "spread": result["spread"],
    }  # fmt: skip
    emit(shown, as_json, _render(shown))
    if any(not row["check_ok"] for row in result["rows"]):
        raise typer.Exit(1)


def _save(records, out: Path | None, card: str) -> list[str]:
    """`records` to --out and appended to the card's history in the user's cache."""
    from kernelab.harness.cache import cache_dir
    from kernelab.harness.records import load_records, save_records

    saved = []
    if not records:
        return saved
    if out is not None:
        saved.append(str(save_records(records, out)))
    history = cache_dir() / "records" / f"{card}.json"
    try:
        existing = load_records(history) if history.exists() else []
    except KernelabError as exc:
        note(f"not appending to a damaged history file: {exc}")
        return saved
    saved.append(str(save_records([*existing, *records], history)))
    return saved
