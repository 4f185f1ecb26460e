"""`kernelab bench KERNEL`: check a registered implementation, time it, place it on the roofline.

For every shape: fresh inputs, the correctness check first (a failed check is reported and
that shape is not timed), then the timer, then FLOP/s, bytes/s and the share of the
datasheet roofline (and of the measured one, when `kernelab ceilings` has run). The torch
baselines of the same op are timed in the same run and the speedup over each is reported.
Records go to --out and are appended to the user's cache.

A time under the roofline's floor is flagged "faster than speed of light": a broken kernel
or cost model, never a win.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from kernelab.errors import KernelabError, unknown
from kernelab.output import JsonOption, emit, note

DEFAULT_SIZES = {
    "gemm": "4096",
    "vector_add": "256M",
    "softmax": "4096x4096",
    "layernorm": "4096x4096",
    "rmsnorm": "4096x4096",
}
DEVICE = "cuda"  # where inputs live and the check runs (a CPU test points it elsewhere)
# Binary multipliers: "256M" elements is 256 * 2^20.
SUFFIXES = {"k": 1024, "m": 1024**2, "g": 1024**3}


def parse_count(text: str) -> int:
    """ "4096", "256M", "1G" (K/M/G = 2^10/2^20/2^30) as a positive int."""
    cleaned = text.strip().lower().replace("_", "")
    factor = 1
    if cleaned and cleaned[-1] in SUFFIXES:
        factor, cleaned = SUFFIXES[cleaned[-1]], cleaned[:-1]
    if not cleaned.isdigit():
        raise KernelabError(f"'{text}' is not a size (a positive integer, K/M/G suffixes allowed)")
    value = int(cleaned) * factor
    if value <= 0:
        raise KernelabError(f"sizes must be positive, got '{text}'")
    return value


def parse_sizes(op: str, shape_keys: tuple[str, ...], spec: str) -> list[dict]:
    """The shapes a --sizes spec names: comma-separated, each "AxBxC" in the op's key order;
    a single number for gemm means a square problem."""
    shapes = []
    form = "x".join(key.upper() for key in shape_keys)
    for item in (part.strip() for part in spec.split(",")):
        if not item:
            continue
        parts = item.lower().split("x")
        if len(parts) == 1 and op == "gemm":
            parts = parts * 3
        if len(parts) != len(shape_keys):
            hint = " or one number for a square problem" if op == "gemm" else ""
            raise KernelabError(f"{op} sizes are {form}{hint}; got '{item}'")
        shapes.append(dict(zip(shape_keys, (parse_count(p) for p in parts), strict=True)))
    if not shapes:
        raise KernelabError(f"no sizes given; {op} sizes look like {form}")
    return shapes


def default_dtype(impl) -> str:
    return "bf16" if "bf16" in impl.dtypes else impl.dtypes[0]


def pick_baselines(impl, dtype: str, names: list[str] | None, candidates) -> list:
    """The baselines to time beside `impl`: the named ones, or by default every registered
    baseline of the same op, dtype and math mode (torch eager, torch.compile, cuBLAS)."""
    from kernelab.kernels import registry

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


class _Run:
    """What stays fixed across one bench invocation: device, ceilings, settings."""

    def __init__(self, identity, op_spec, dtype, mode, min_samples, max_time_s):
        import torch

        from kernelab.environment import software_versions
        from kernelab.harness.ceilings import measured_ceilings_for
        from kernelab.roofline.model import Ceilings

        self.identity, self.op_spec, self.dtype, self.mode = identity, op_spec, dtype, mode
        self.min_samples, self.max_time_s = min_samples, max_time_s
        spec = identity.spec
        self.datasheet = Ceilings.from_spec(spec) if spec is not None else None
        self.measured = measured_ceilings_for(spec) if spec is not None else None
        self.versions = {**software_versions(), "cuda_runtime": torch.version.cuda}

    def _place(self, ceilings, cost, math_mode, time_ms):
        from kernelab.roofline.model import place

        if ceilings is None:
            return None
        try:
            return place(cost, ceilings, math_mode=math_mode, time_ms=time_ms)
        except KernelabError as exc:  # e.g. no measured fp8 peak
            note(f"not placed on the {ceilings.source} roofline: {exc}")
            return None

    def one(self, impl, fn, shape: dict):
        """Check, time and place `fn` at `shape`: a row for the table and a Record (None when
        the check failed)."""
        from kernelab.harness.check import check_implementation
        from kernelab.harness.records import Record
        from kernelab.harness.timing import benchmark, device_memory_guard

        op, dtype = self.op_spec.name, self.dtype
        row = {
            "implementation": impl.name,
            "shape": shape,
            "dtype": dtype,
            "math_mode": impl.math_mode,
        }
        with device_memory_guard():
            report = check_implementation(
                fn, op, shape, dtype, math_mode=impl.math_mode, device=DEVICE
            )
            row.update(
                check_ok=report.ok, check_error=report.error, check_threshold=report.threshold
            )
            if not report.ok:
                row["check_message"] = report.message
                return row, None
            inputs = self.op_spec.make_inputs(shape, dtype, seed=0, device=DEVICE)
            timing = benchmark(
                lambda: fn(*inputs),
                mode=self.mode,
                min_samples=self.min_samples,
                max_time_s=self.max_time_s,
            )
        cost = self.op_spec.cost(shape, dtype)
        on_sheet = self._place(self.datasheet, cost, impl.math_mode, timing.median_ms)
        on_measured = self._place(self.measured, cost, impl.math_mode, timing.median_ms)
        seconds = timing.median_ms * 1e-3
        warnings = list(timing.warnings)
        if on_sheet is not None and on_sheet.faster_than_light:
            warnings.insert(0, on_sheet.warning)
        row.update(
            median_ms=timing.median_ms,
            tflops=cost.flops / seconds / 1e12,
            gbps=cost.bytes / seconds / 1e9,
            pct_of_datasheet=on_sheet.sol_pct if on_sheet else None,
            pct_of_measured=on_measured.sol_pct if on_measured else None,
            bound=on_sheet.bound if on_sheet else None,
            rel_noise=timing.rel_noise,
            mode=timing.mode,
            throttled=timing.throttled,
            faster_than_light=bool(on_sheet and on_sheet.faster_than_light),
            warnings=warnings,
        )
        record = Record(
            op=op,
            implementation=impl.name,
            shape=dict(shape),
            dtype=dtype,
            math_mode=impl.math_mode,
            mode=timing.mode,
            samples_ms=list(timing.samples_ms),
            stats=timing.summary.to_dict(),
            gpu=self.identity.name,
            gpu_id=self.identity.gpu_id,
            driver=self.identity.driver,
            versions=self.versions,
            clocks=timing.clocks,
            flops=cost.flops,
            bytes=cost.bytes,
            achieved_tflops=row["tflops"],
            achieved_gbps=row["gbps"],
            pct_of_datasheet=row["pct_of_datasheet"],
            pct_of_measured=row["pct_of_measured"],
            check={"ok": report.ok, "error": report.error, "threshold": report.threshold},
            warnings=warnings,
            extra={
                "stop_reason": timing.stop_reason,
                "calls_per_sample": timing.calls_per_sample,
                "flush_bytes": timing.flush_bytes,
                "fenced": timing.fenced,
                "throttled": timing.throttled,
                "bound": row["bound"],
                "floor_ms": on_sheet.floor_ms if on_sheet else None,
                "measured_ceilings": self.measured.source if self.measured else None,
            },
        )
        return row, record


def _fmt(value, spec: str, suffix: str = "") -> str:
    return "-" if value is None else f"{value:{spec}}{suffix}"


def _render(result: dict):
    from rich.table import Table

    def render(console) -> None:
        table = Table(
            title=f"{result['kernel']} ({result['op']}, {result['dtype']}, {result['mode']}) on {result['gpu']}"
        )
        columns = (
            "implementation",
            "shape",
            "median ms",
            "TFLOP/s",
            "GB/s",
            "% roof",
            "% measured",
            "noise",
            "check err",
        )
        for column in columns:
            left = column in ("implementation", "shape")
            table.add_column(column, justify="left" if left else "right", no_wrap=left)
        for row in result["rows"]:
            name = row["implementation"]
            if not row["check_ok"]:
                table.add_row(
                    name,
                    shape_text(row["shape"]),
                    "[red]check failed[/red]",
                    *["-"] * 5,
                    _fmt(row["check_error"], ".2e"),
                )
                continue
            table.add_row(
                name,
                shape_text(row["shape"]),
                _fmt(row["median_ms"], ".4f"),
                _fmt(row["tflops"], ",.2f"),
                _fmt(row["gbps"], ",.0f"),
                _fmt(row["pct_of_datasheet"], ".1f", " %"),
                _fmt(row["pct_of_measured"], ".1f", " %"),
                _fmt(100 * row["rel_noise"], ".1f", " %"),
                _fmt(row["check_error"], ".1e"),
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
        if result.get("saved_to"):
            console.print(f"records: {', '.join(result['saved_to'])}")

    return render


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
                help='Comma-separated shapes: gemm "4096" or "MxNxK"; softmax/norms "ROWSxCOLS"; vector_add "N" (K/M/G = 2^10/2^20/2^30).',
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
        out: Annotated[
            Path | None, typer.Option("--out", help="Write the records to this JSON file.")
        ] = None,
        min_samples: Annotated[int, typer.Option("--min-samples", help="Fewest timed calls.")] = 10,
        max_time: Annotated[
            float, typer.Option("--max-time", help="Seconds of timing per shape, at most.")
        ] = 2.0,
        as_json: JsonOption = False,
    ) -> None:
        """Check and time a kernel at given sizes; report TFLOP/s, GB/s and % of the roofline."""
        from kernelab.harness.ceilings import this_gpu
        from kernelab.harness.timing import MODES
        from kernelab.kernels import registry
        from kernelab.kernels.reference import get_op

        impl = registry.get(kernel)
        if mode not in MODES:
            raise unknown("timing mode", mode, MODES)
        if min_samples < 1 or max_time <= 0:
            raise KernelabError("--min-samples must be at least 1 and --max-time positive")
        op_spec = get_op(impl.op)
        dtype = (dtype or default_dtype(impl)).strip().lower()
        if dtype not in impl.dtypes:
            raise unknown(f"dtype for {impl.name}", dtype, impl.dtypes)
        shapes = [
            op_spec.validate(s)
            for s in parse_sizes(
                impl.op, op_spec.shape_keys, sizes or DEFAULT_SIZES.get(impl.op, "")
            )
        ]
        others = (
            []
            if no_baselines
            else pick_baselines(impl, dtype, baseline, registry.implementations(impl.op))
        )
        identity = this_gpu("kernelab bench")

        run = _Run(identity, op_spec, dtype, mode, min_samples, max_time)
        built = [(impl, impl.build())]
        for other in others:
            try:
                built.append((other, other.build()))
            except Exception as exc:  # a baseline that cannot build here must not stop the run
                note(
                    f"baseline {other.name} skipped: {str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__}"
                )
        rows, records = [], []
        for shape in shapes:
            shape_rows = []
            for candidate, fn in built:
                note(f"{candidate.name} {shape_text(shape)} {dtype}: checking and timing")
                row, record = run.one(candidate, fn, shape)
                shape_rows.append(row)
                if record is not None:
                    records.append(record)
            main_row = shape_rows[0]
            if main_row.get("median_ms"):
                main_row["speedup_vs"] = {
                    row["implementation"]: row["median_ms"] / main_row["median_ms"]
                    for row in shape_rows[1:]
                    if row.get("median_ms")
                }
            rows.extend(shape_rows)

        saved = _save(records, out, identity)
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
        }
        emit(result, as_json, _render(result))
        if any(not row["check_ok"] for row in rows):
            raise typer.Exit(1)


def _save(records, out: Path | None, identity) -> list[str]:
    from kernelab.harness.cache import cache_dir
    from kernelab.harness.records import load_records, save_records

    saved = []
    if not records:
        return saved
    if out is not None:
        saved.append(str(save_records(records, out)))
    history = cache_dir() / "records" / f"{identity.key}.json"
    try:
        existing = load_records(history) if history.exists() else []
    except KernelabError as exc:
        note(f"not appending to a damaged history file: {exc}")
        return saved
    saved.append(str(save_records([*existing, *records], history)))
    return saved
