"""`kernelab roofline OP`: an op's FLOPs and bytes against a GPU's ceilings.

Memory- or compute-bound, the floor time, and with --time-ms the share of speed-of-light a
measured time reached; --plot draws the chart.
"""

from __future__ import annotations

import dataclasses
from typing import Annotated

import typer

from kernelab.commands.options import GpuOption, comma_items
from kernelab.errors import KernelabError, output_file, positive_number, unknown
from kernelab.hardware.detect import choose_gpu
from kernelab.output import JsonOption, emit, note
from kernelab.roofline.costs import COST_MODELS, plain_number, shape_label
from kernelab.roofline.model import (
    FASTER_THAN_LIGHT,
    Ceilings,
    Placement,
    ceilings_phrase,
    place,
)

# The shape options each op takes: required first, then optional ones whose default the
# command or the cost model fills in.
_REQUIRED = {
    "gemm": ("m", "n", "k"),
    "gemv": ("m", "n"),
    "elementwise": ("n",),
    "softmax": ("rows", "cols"),
    "layernorm": ("rows", "cols"),
    "rmsnorm": ("rows", "cols"),
    "reduction": ("rows", "cols"),
    "reduce_sum": ("n",),
    "scan": ("n",),
    "attention": ("heads", "seq_q", "head_dim"),
    "softmax_backward": ("rows", "cols"),
    "rmsnorm_backward": ("rows", "cols"),
}
_OPTIONAL = {
    "gemm": ("batch",),
    "elementwise": ("reads", "writes", "flops_per_element"),
    "layernorm": ("bias",),
    "attention": ("batch", "seq_k", "causal"),
}
CEILING_SOURCES = ("datasheet", "measured")
# Every other op of kernelab.spec takes its shape keys as options of the same names and is
# costed by its specification (the numbers `bench` and `eval` place it with).
SPEC_OP_DEFAULT_DTYPE = "bf16"


def _spec_ops() -> dict:
    from kernelab.spec.reference import OPS

    return {name: spec for name, spec in OPS.items() if name not in COST_MODELS}


def _batched_gemv():
    """The specification's gemv, y[M,N] = x[M,K] W[N,K]^T, which --k selects: the cost model
    of the same name is the classic y = A x."""
    from kernelab.spec.reference import OPS

    return OPS["gemv"]


def _spec_cost(spec, given: dict, dtype: str | None):
    """The OpCost of a kernelab.spec op from the options given: its shape keys required,
    every other shape option refused; the dtype bf16 unless told or the op has none."""
    keys = spec.shape_keys
    _check_options(spec.name, given, required=keys)
    if dtype is None:
        usable = [d for d in spec.dtypes if d != "fp64"]
        dtype = SPEC_OP_DEFAULT_DTYPE if SPEC_OP_DEFAULT_DTYPE in usable else usable[0]
    return spec.cost({name: given[name] for name in keys}, dtype)


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _check_options(op: str, given: dict, *, required, optional=()) -> None:
    """One line for a shape option the op does not take, else for one it needs."""
    stray = [name for name, value in given.items()
             if value is not None and name not in required and name not in optional]  # fmt: skip
    if stray:
        raise KernelabError(f"roofline {op} does not take {', '.join(map(_flag, stray))}")
    missing = [name for name in required if given.get(name) is None]
    if missing:
        raise KernelabError(f"roofline {op} needs {', '.join(map(_flag, missing))}")


def _cost_arguments(op: str, given: dict) -> dict:
    """The cost model's keyword arguments from the options given, checked against the op."""
    required, optional = _REQUIRED[op], _OPTIONAL.get(op, ())
    _check_options(op, given, required=required, optional=optional)
    arguments = {name: given[name] for name in (*required, *optional) if given[name] is not None}
    if op == "attention":
        arguments.setdefault("batch", 1)
        arguments.setdefault("seq_k", arguments["seq_q"])  # self-attention unless told
    return arguments


def _ceilings(spec, source: str) -> tuple[Ceilings, str | None]:
    """The ceilings to place against, and where measured ones came from (None: datasheet)."""
    if source not in CEILING_SOURCES:
        raise unknown("ceilings source", source, CEILING_SOURCES)
    if source == "datasheet":
        return Ceilings.from_spec(spec), None
    from kernelab.harness.ceilings import measured_or_committed

    found = measured_or_committed(spec)
    if found is None:
        raise KernelabError(
            f"no measured ceilings for {spec.id} in the cache or the committed records; "
            "run kernelab ceilings on that GPU"
        )
    measured, where = found
    return measured, f"measured ceilings of {spec.id} from {where}"


def verdict(p: Placement, fp32_rate: float | None = None) -> str:
    """One plain sentence: which roof bounds the op, by how much, and the floor time.
    `fp32_rate` (FLOP/s) is the rate that proved an op memory-bound whose math dtype has no
    listed rate (its ridge None though it has FLOPs)."""
    if p.flops == 0:
        # No arithmetic at all: intensity 0, the memory roof alone sets the floor.
        return (
            f"memory-bound: no FLOPs, only {plain_number(p.bytes)} bytes to move (intensity 0, "
            f"left of any ridge) on {p.gpu}; the floor is {p.floor_ms:.3g} ms"
        )
    if p.ridge is None:
        return (
            f"memory-bound: intensity {plain_number(p.intensity)} FLOP/B needs only "
            f"{p.attainable_tflops:.3g} TFLOP/s to keep pace with {p.bandwidth_gbps:.4g} GB/s, "
            f"below the fp32 rate of {_tflops(fp32_rate)} TFLOP/s that {p.math_dtype} math "
            f"reaches as fp32 ({p.gpu} lists no {p.math_dtype} rate, so its ridge is unknown); "
            f"the floor is {p.floor_ms:.3g} ms"
        )
    if p.bound == "compute":
        where = f"is {p.intensity / p.ridge:.2g}x the"
    else:
        where = f"is {p.ridge / p.intensity:.3g}x below the"
    return (
        f"{p.bound}-bound: intensity {plain_number(p.intensity)} FLOP/B {where} {p.math_dtype} ridge "
        f"of {plain_number(p.ridge)} FLOP/B on {p.gpu}; the floor is {p.floor_ms:.3g} ms"
    )


def _tflops(rate: float | None) -> str:
    return "?" if rate is None else f"{rate / 1e12:.4g}"


def _ridge_text(p: Placement, fp32_rate: float | None) -> str:
    if p.flops == 0:
        # The same words whether or not the dtype has a rate: no FLOPs meet no compute roof.
        return "none: no FLOPs, placed by its bytes alone"
    if p.ridge is None:
        return (
            f"unknown: no {p.math_dtype} rate listed; memory-bound at any rate of at least the "
            f"fp32 {_tflops(fp32_rate)} TFLOP/s, which {p.math_dtype} math reaches as fp32"
        )
    return f"{p.ridge:.4g} FLOP/B ({p.peak_tflops:.4g} TFLOP/s / {p.bandwidth_gbps:.4g} GB/s)"


def _render(console, p: Placement, gpu_label: str, fp32_rate: float | None = None) -> None:
    from kernelab.output import Table

    table = Table(show_header=False, box=None, pad_edge=False)
    table.add_column(style="bold")
    table.add_column()
    attainable = (
        f"none: no FLOPs, its bytes at up to {p.bandwidth_gbps:.4g} GB/s"
        if p.flops == 0
        else f"{p.attainable_tflops:.4g} TFLOP/s"
    )
    rows = [
        ("op", f"{p.op} {shape_label(p.shape)}"),
        ("dtype", p.dtype if p.math_dtype == p.dtype else f"{p.dtype} (math: {p.math_dtype})"),
        ("gpu", f"{gpu_label}, {ceilings_phrase(p.ceilings_source)}"),
        ("FLOPs", f"{p.flops:.4g}"),
        ("bytes", f"{p.bytes:.4g}"),
        ("intensity", f"{p.intensity:.4g} FLOP/B"),
        ("ridge", _ridge_text(p, fp32_rate)),
        ("bound", p.bound),
        ("attainable", attainable),
        ("floor", f"{p.floor_ms:.4g} ms"),
    ]
    if p.time_ms is not None:
        rows += [
            ("time", f"{p.time_ms:.4g} ms"),
            ("achieved", f"{p.achieved_tflops:.4g} TFLOP/s, {p.achieved_gbps:.4g} GB/s"),
            ("speed-of-light", f"{p.sol_pct:.1f} %"),
        ]
    for name, value in rows:
        table.add_row(name, value)
    console.print(table)
    console.print(p.explanation, style="dim", highlight=False)
    console.print(verdict(p, fp32_rate), highlight=False)
    if p.faster_than_light:
        console.print(f"WARNING: {p.warning}", style="bold red", highlight=False)
    elif p.time_ms is not None:
        console.print(
            f"at {p.time_ms:.4g} ms it reaches {p.sol_pct:.1f} % of speed-of-light",
            highlight=False,
        )


def roofline(
    op: Annotated[
        str,
        typer.Argument(
            metavar="OP",
            help=f"The op: {', '.join(COST_MODELS)}; or any op of kernelab's specification "
            "(kernelab bench's), e.g. transpose, histogram, decode_attention, quant_gemv_int4, "
            "sampling_probs: its shape keys are the options of the same names. gemv takes two "
            "forms: --m --n is the classic y = A x (A m x n); adding --k gives the "
            "specification's batched y[M,N] = x[M,K] W[N,K]^T.",
        ),
    ],
    m: Annotated[
        str | None,
        typer.Option(
            "--m",
            help="Rows of A (gemm, gemv); batch (gemv --k, quant_gemv_*). A comma list walks "
            "the op over m (e.g. 1,2,4,8,16,32,64): one row per m and the m where it crosses "
            "the ridge.",
        ),
    ] = None,
    n: Annotated[
        int | None, typer.Option("--n", min=1, help="Columns (gemm, gemv); elements (elementwise).")
    ] = None,
    k: Annotated[
        int | None,
        typer.Option(
            "--k", min=1, help="Reduction dim (gemm; gemv: selects y[M,N] = x[M,K] W[N,K]^T)."
        ),
    ] = None,
    batch: Annotated[
        int | None, typer.Option("--batch", min=1, help="Batch (gemm, attention); default 1.")
    ] = None,
    rows: Annotated[
        int | None, typer.Option("--rows", min=1, help="Rows (softmax, norms).")
    ] = None,
    cols: Annotated[
        int | None, typer.Option("--cols", min=1, help="Reduced dim (softmax, norms).")
    ] = None,
    reads: Annotated[
        int | None, typer.Option("--reads", min=0, help="Tensors read (elementwise, default 2).")
    ] = None,
    writes: Annotated[
        int | None,
        typer.Option("--writes", min=0, help="Tensors written (elementwise, default 1)."),
    ] = None,
    flops_per_element: Annotated[
        int | None,
        typer.Option("--flops-per-element", min=0, help="FLOPs per element (elementwise, 1)."),
    ] = None,
    bias: Annotated[
        bool | None, typer.Option("--bias/--no-bias", help="Layernorm with a bias (default yes).")
    ] = None,
    heads: Annotated[int | None, typer.Option("--heads", min=1, help="Heads (attention).")] = None,
    seq_q: Annotated[
        int | None, typer.Option("--seq-q", min=1, help="Query length (attention).")
    ] = None,
    seq_k: Annotated[
        int | None, typer.Option("--seq-k", min=1, help="Key length (attention; default seq-q).")
    ] = None,
    head_dim: Annotated[
        int | None, typer.Option("--head-dim", min=1, help="Head dim (attention).")
    ] = None,
    causal: Annotated[bool, typer.Option("--causal", help="Causal mask (attention).")] = False,
    kv_heads: Annotated[
        int | None, typer.Option("--kv-heads", min=1, help="KV heads (decode_attention).")
    ] = None,
    tokens: Annotated[
        int | None,
        typer.Option("--tokens", min=1, help="Tokens (decode_attention: the KV cache; rope)."),
    ] = None,
    bins: Annotated[int | None, typer.Option("--bins", min=1, help="Bins (histogram).")] = None,
    group: Annotated[
        int | None, typer.Option("--group", min=1, help="Columns per scale (quant_gemv_int4*).")
    ] = None,
    vocab: Annotated[
        int | None, typer.Option("--vocab", min=1, help="Vocabulary (sampling_probs).")
    ] = None,
    dtype: Annotated[
        str | None, typer.Option("--dtype", help="Input dtype (default bf16 where the op has it).")
    ] = None,
    gpu: GpuOption = None,
    time_ms: Annotated[
        str | None,
        typer.Option(
            "--time-ms",
            help="A measured time to judge, in ms; with a list of --m, one time per m in the "
            "same order (achieved against attainable at each m).",
        ),
    ] = None,
    math: Annotated[
        str | None, typer.Option("--math", help="Math mode: tf32 for fp32 on tensor cores.")
    ] = None,
    ceilings: Annotated[
        str, typer.Option("--ceilings", help="datasheet (the catalog) or measured.")
    ] = "datasheet",
    plot: Annotated[
        str | None, typer.Option("--plot", metavar="FILE", help="Write the chart (.png/.svg).")
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Place an op on a GPU's roofline: memory- or compute-bound, its floor, % of light speed."""
    op_name = op.strip().lower()
    spec_ops = _spec_ops()
    if op_name not in COST_MODELS and op_name not in spec_ops:
        raise unknown("op", op, [*COST_MODELS, *spec_ops])
    batches = parse_batches(m)
    given = {
        "m": batches[0] if batches else None,
        "n": n,
        "k": k,
        "batch": batch,
        "rows": rows,
        "cols": cols,
        "reads": reads,
        "writes": writes,
        "flops_per_element": flops_per_element,
        "bias": bias,
        "heads": heads,
        "seq_q": seq_q,
        "seq_k": seq_k,
        "head_dim": head_dim,
        "causal": causal or None,
        "kv_heads": kv_heads,
        "tokens": tokens,
        "bins": bins,
        "group": group,
        "vocab": vocab,
    }
    cost = _cost(op_name, given, dtype, spec_ops)
    times = parse_times(time_ms)
    walking = batches is not None and len(batches) > 1
    if times is not None and len(times) != (len(batches) if walking else 1):
        raise KernelabError(
            f"--time-ms gives {len(times)} times for {len(batches)} values of --m: one time per m"
            if walking else "--time-ms takes one time, or one per m with a list of --m")  # fmt: skip
    plot_path = output_file(plot, "--plot", suffixes=(".png", ".svg"))
    chosen = choose_gpu(gpu)

    limits, measured_from = _ceilings(chosen.spec, ceilings.strip().lower())
    if walking:
        timed = dict(zip(batches, times, strict=True)) if times is not None else None
        _walk(op_name, given, dtype, spec_ops, batches, timed, limits, measured_from, math,
              chosen, plot_path, as_json)  # fmt: skip
        return
    time_ms = times[0] if times is not None else None
    placement = place(cost, limits, math_mode=math, time_ms=time_ms, unlisted_rate_by_fp32=True)
    # Said once the placement stands, so that a refusal stays the one line on stderr.
    if measured_from is not None:
        note(measured_from)
    fp32_rate = limits.peak_flops.get("fp32")

    if plot_path is not None:
        from kernelab.roofline.plot import plot_roofline

        plot_roofline(limits, [placement], plot_path)
        note(f"wrote {plot_path}")
    if placement.faster_than_light and as_json:
        note(f"[bold red]WARNING: {placement.warning}[/]")

    data = {
        **placement.to_dict(),
        # why a ridge is null: no FLOPs, or a rate the GPU does not list
        "ridge_note": None if placement.ridge is not None else _ridge_text(placement, fp32_rate),
        "gpu_choice": chosen.to_dict(),
        "plot": str(plot_path) if plot_path is not None else None,
    }
    emit(data, as_json, lambda console: _render(console, placement, chosen.label, fp32_rate))


# --- --m as a list: the walk over the batch ------------------------------------------------

M_EXAMPLE = "1,2,4,8,16,32,64"
_MAX_M_DIGITS = 30  # past 2**53 already (the cost models' limit); bounds int() before it runs


def parse_batches(text: str | None) -> list[int] | None:
    """--m as positive integers in the order given: "4096" -> [4096], "1,4,16" -> [1, 4, 16];
    None when not given. An empty value or item, a 0, a negative, a non-integer or an m
    listed twice is one KernelabError line."""
    items = comma_items(text, "--m", M_EXAMPLE)
    if items is None:
        return None
    values = []
    for item in items:
        digits = item.lstrip("+")
        if not digits.isascii() or not digits.isdigit():
            raise KernelabError(f"--m takes positive integers or a comma list of them (e.g. "
                                f"--m {M_EXAMPLE}); got '{item}'")  # fmt: skip
        if len(digits) > _MAX_M_DIGITS:
            raise KernelabError(f"--m: '{item[:40]}...' is past any batch (the cost models "
                                "take up to 2**53)")  # fmt: skip
        value = int(digits)
        if value < 1:
            raise KernelabError(f"--m must be at least 1 (a batch of rows), got '{item}'")
        if value in values:
            raise KernelabError(f"--m lists {value} twice; give each m once")
        values.append(value)
    return values


def parse_times(text: str | None) -> list[float] | None:
    """--time-ms as positive finite milliseconds, one or a comma list; None when not given."""
    items = comma_items(text, "--time-ms", "0.012")
    if items is None:
        return None
    times = []
    for item in items:
        try:
            value = float(item)
        except ValueError:
            raise KernelabError(f"--time-ms must be a positive, finite number (milliseconds), "
                                f"got '{item}'") from None  # fmt: skip
        times.append(positive_number(value, "--time-ms", "milliseconds"))
    return times


def _cost(op_name: str, given: dict, dtype: str | None, spec_ops: dict):
    """The op's OpCost from the options given."""
    if op_name == "gemv" and given.get("k") is not None:
        return _spec_cost(_batched_gemv(), given, dtype)
    if op_name in COST_MODELS:
        arguments = _cost_arguments(op_name, given)
        return COST_MODELS[op_name](**arguments, dtype=dtype or "bf16")
    # The op as asked for: several spec ops share a cost model (rope and
    # rope_interleaved, the quantized GEMVs), whose own name would hide which one this is.
    return dataclasses.replace(_spec_cost(spec_ops[op_name], given, dtype), op=op_name)


def _walk(op_name, given, dtype, spec_ops, batches, times, limits, measured_from, math, chosen,
          plot_path, as_json) -> None:  # fmt: skip
    """One placement per m (judged against its time where one is given), the crossing of the
    ridge, the chart with a point per m."""
    from kernelab.roofline.walk import walk

    result = walk(lambda m: _cost(op_name, {**given, "m": m}, dtype, spec_ops), batches, limits,
                  math_mode=math, unlisted_rate_by_fp32=True, times_ms=times)  # fmt: skip
    if measured_from is not None:
        note(measured_from)
    faster = [p for p in result.points if p.faster_than_light]
    if faster and as_json:
        listed = ", ".join(str(p.shape["m"]) for p in faster)
        note(f"[bold red]WARNING: at m = {listed}: {FASTER_THAN_LIGHT}[/]")
    first = result.points[0]
    fixed = {key: value for key, value in first.shape.items() if key != "m"}
    if plot_path is not None:
        from kernelab.roofline.plot import plot_roofline

        title = (f"{op_name} {shape_label(fixed)} {first.dtype} over m = "
                 f"{','.join(str(m) for m in batches)} on {first.gpu}")  # fmt: skip
        plot_roofline(limits, result.points, plot_path, title=title)
        note(f"wrote {plot_path}")
    fp32_rate = limits.peak_flops.get("fp32")
    data = {
        "op": op_name, "shape": fixed, "batches": batches, "dtype": first.dtype,
        "math_dtype": first.math_dtype, "gpu": first.gpu, "ceilings_source": first.ceilings_source,
        "ridge": first.ridge,
        "ridge_note": None if first.ridge is not None else _ridge_text(first, fp32_rate),
        "crossover_m": result.crossover_m, "crossover_note": result.crossover_note,
        "bound_change": result.bound_change(),
        "points": [p.to_dict() for p in result.points],
        "gpu_choice": chosen.to_dict(), "plot": str(plot_path) if plot_path is not None else None,
    }  # fmt: skip
    emit(data, as_json, lambda console: _render_walk(console, result, op_name, fixed,
                                                     chosen.label, fp32_rate))  # fmt: skip


def _render_walk(console, result, op_name: str, fixed: dict, gpu_label: str,
                 fp32_rate: float | None) -> None:  # fmt: skip
    from kernelab.output import Table

    first = result.points[0]
    console.print(f"{op_name} {shape_label(fixed)} {first.dtype} over m on {gpu_label}, "
                  f"{ceilings_phrase(first.ceilings_source)}; ridge "
                  f"{_ridge_text(first, fp32_rate)}", highlight=False)  # fmt: skip
    timed = any(p.time_ms is not None for p in result.points)
    table = Table(box=None, pad_edge=False)
    columns = ["m", "FLOPs", "bytes", "intensity FLOP/B", "attainable TFLOP/s", "floor us",
               "bound"]  # fmt: skip
    if timed:
        columns += ["time us", "achieved TFLOP/s", "% of attainable"]
    for column in columns:
        table.add_column(column, justify="left" if column == "bound" else "right")
    for p in result.points:
        cells = [str(p.shape["m"]), f"{p.flops:.4g}", f"{p.bytes:.4g}", f"{p.intensity:.4g}",
                 f"{p.attainable_tflops:.4g}", f"{p.floor_ms * 1e3:.4g}", p.bound]  # fmt: skip
        if timed:
            pct = f"{p.sol_pct:.1f}" + (" FASTER THAN LIGHT" if p.faster_than_light else "")
            cells += [f"{p.time_ms * 1e3:.4g}", f"{p.achieved_tflops:.4g}", pct]
        table.add_row(*cells)
    console.print(table)
    console.print(f"{result.bound_change()}; {result.crossover_note}", highlight=False)
    for p in result.points:
        if p.faster_than_light:
            console.print(f"WARNING: m = {p.shape['m']}: {p.warning}", style="bold red",
                          highlight=False)  # fmt: skip


def register(app) -> None:
    app.command("roofline")(roofline)
