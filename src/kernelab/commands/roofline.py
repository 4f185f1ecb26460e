"""`kernelab roofline OP`: an op's FLOPs and bytes against a GPU's ceilings.

Memory- or compute-bound, the floor time, and with --time-ms the share of speed-of-light a
measured time reached; --plot draws the chart.
"""

from __future__ import annotations

import dataclasses
from typing import Annotated

import typer

from kernelab.commands.options import GpuOption
from kernelab.errors import KernelabError, output_file, positive_number, unknown
from kernelab.hardware.detect import choose_gpu
from kernelab.output import JsonOption, emit, note
from kernelab.roofline.costs import COST_MODELS, plain_number, shape_label
from kernelab.roofline.model import Ceilings, Placement, ceilings_phrase, place

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
        int | None, typer.Option("--m", min=1, help="Rows of A (gemm, gemv); batch (gemv --k).")
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
        float | None, typer.Option("--time-ms", help="A measured time to judge, in ms.")
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
    given = {
        "m": m,
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
    if op_name == "gemv" and k is not None:
        cost = _spec_cost(_batched_gemv(), given, dtype)
    elif op_name in COST_MODELS:
        arguments = _cost_arguments(op_name, given)
        cost = COST_MODELS[op_name](**arguments, dtype=dtype or "bf16")
    else:
        # The op as asked for: several spec ops share a cost model (rope and
        # rope_interleaved, the quantized GEMVs), whose own name would hide which one this is.
        cost = dataclasses.replace(_spec_cost(spec_ops[op_name], given, dtype), op=op_name)
    positive_number(time_ms, "--time-ms", "milliseconds")
    plot_path = output_file(plot, "--plot", suffixes=(".png", ".svg"))
    chosen = choose_gpu(gpu)

    limits, measured_from = _ceilings(chosen.spec, ceilings.strip().lower())
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


def register(app) -> None:
    app.command("roofline")(roofline)
