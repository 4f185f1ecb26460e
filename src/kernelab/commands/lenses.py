"""`kernelab tile` and `kernelab pipeline`: the tile and pipeline lenses on the command line.

tile      shared memory, registers, occupancy, reuse per level, waves and tail of a GEMM
          tiling (given by options or read from a registered kernel), and optionally the
          bank conflicts of a shared-memory access.
pipeline  Little's law: the bytes each SM must keep in flight to saturate HBM, what a given
          pipeline keeps, and the MMA work and stages that cover a load latency.
"""

from __future__ import annotations

import dataclasses
from typing import Annotated

import typer

from kernelab.commands.options import GpuOption
from kernelab.hardware.detect import choose_gpu
from kernelab.lenses.pipeline import figure
from kernelab.output import JsonOption, emit


def _table(console, rows) -> None:
    from kernelab.output import Table

    table = Table(show_header=False, box=None, pad_edge=False)
    table.add_column(style="bold")
    table.add_column()
    for key, value in rows:
        table.add_row(key, value)
    console.print(table)


def _kib(n: float) -> str:
    return f"{figure(n / 1024, 1)} KiB"


def _count(n: int) -> str:
    """A count of blocks or slots: its digits while short, exponent form past seven."""
    return str(n) if n < 10**7 else f"{n:.3g}"


def _ptxas_registers(kernel: str) -> int | None:
    """ptxas's registers per thread for an SGEMM ladder step at the launch configuration its
    compile report and records use (built here when nvcc is, or found in the build cache);
    None elsewhere, and the lens estimates them and says so."""
    if not kernel.startswith("sgemm:"):
        return None
    from kernelab.errors import KernelabError
    from kernelab.ladders.sgemm import build_step, get_step
    from kernelab.ladders.sgemm.tuning import reference_defines

    step = get_step(kernel)
    try:
        return build_step(step, reference_defines(step) or None).report(step.kernel).registers
    except KernelabError:  # no nvcc and nothing cached
        return None


def _tile_config(kernel, given: dict):
    """The TileConfig from --kernel's metadata with the options given on top, or from the
    options alone (then BM, BN, BK, TM, TN and threads are required)."""
    from kernelab.errors import KernelabError
    from kernelab.lenses.tile import TileConfig, kernel_tile

    overrides = {key: value for key, value in given.items() if value is not None}
    if kernel:
        config = kernel_tile(kernel)
        if "registers" not in overrides and (registers := _ptxas_registers(kernel)):
            overrides["registers"] = registers
        if "dtype" in overrides:
            overrides["acc_dtype"] = None  # the accumulator follows the new dtype (fp64: fp64)
        return dataclasses.replace(config, **overrides)
    required = ("bm", "bn", "bk", "tm", "tn", "threads")
    missing = [f"--{name}" for name in required if name not in overrides]
    if missing:
        raise KernelabError(f"tile needs {', '.join(missing)} (or --kernel NAME)")
    return TileConfig(**overrides)


def _render_tile(console, analysis, banks, gpu_label: str) -> None:
    c, occ = analysis.config, analysis.occupancy
    warp = f", warp tile {c.wm}x{c.wn}" if c.wm else ""
    rows = [
        (
            "tile",
            f"{c.bm}x{c.bn}x{c.bk} block{warp}, {c.tm}x{c.tn} per thread, {c.threads} threads, "
            f"{c.dtype}, {c.stages} stage(s)",
        ),
        ("gpu", gpu_label),
        (
            "shared memory",
            f"{_kib(analysis.smem_per_block_bytes)} per block (A {_kib(analysis.smem_a_bytes)} "
            f"+ B {_kib(analysis.smem_b_bytes)} per stage)",
        ),
        (
            "registers",
            f"{analysis.registers_per_thread} per thread ({analysis.registers_source}), "
            f"{analysis.outputs_per_thread} accumulators",
        ),
        (
            "occupancy",
            f"{occ.blocks_per_sm} blocks/SM, {occ.active_warps}/{occ.max_warps} warps "
            f"({occ.occupancy_pct:.1f}%), limited by {' and '.join(occ.limiter)}",
        ),
        (
            "blocks/SM by",
            ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in occ.limits.items()),
        ),
        (
            "global->shared",
            f"{analysis.block_flops_per_global_byte:.1f} FLOP/byte vs {analysis.math_dtype} "
            f"ridge {analysis.ridge:.1f}: {analysis.block_bound}-bound without L2 reuse",
        ),
        (
            "shared->regs",
            f"{analysis.thread_flops_per_smem_load:.2f} FLOP per shared load "
            f"({analysis.thread_flops_per_smem_byte:.2f} FLOP/byte)",
        ),
    ]
    if analysis.warp_flops_per_smem_element is not None:
        rows.append(
            ("warp tile", f"{analysis.warp_flops_per_smem_element:.1f} FLOP per shared element")
        )
    w = analysis.waves
    if w is not None:
        rows.append(
            (
                "waves",
                f"{_count(w.blocks)} blocks / {_count(w.slots)} slots = {figure(w.waves, 2)} "
                f"waves; last wave {100 * w.tail_idle_fraction:.0f}% idle, efficiency "
                f"{100 * w.wave_efficiency:.1f}%",
            )
        )
        rows.append(
            (
                "problem",
                f"{w.m}x{w.n}x{w.k}: edge tiles {100 * w.tile_utilization:.1f}% useful, "
                f"tiled traffic {figure(w.tiled_global_bytes / 1e6, 1)} MB "
                f"({w.tiled_intensity:.1f} FLOP/byte) vs minimum {figure(w.min_bytes / 1e6, 1)} MB",
            )
        )
    if banks is not None:
        rows.append(
            (
                "banks",
                f"{banks.pattern} access, stride {banks.row_stride_words} words, "
                f"{banks.access_width_bytes} B: {banks.explanation}",
            )
        )
    _table(console, rows)
    for line in (*occ.notes, *analysis.notes):
        console.print(f"note: {line}", highlight=False)


def _render_pipeline(console, memory, tensor, gpu_label: str, tensor_note: str | None) -> None:
    lat = memory.latency
    rows = [
        ("gpu", gpu_label),
        ("bandwidth", f"{figure(memory.bandwidth_gbps)} GB/s"),
        ("latency", f"{figure(lat.ns)} ns ({lat.source})"),
        (
            "in flight needed",
            f"{_kib(memory.in_flight_per_sm_bytes)} per SM, "
            f"{figure(memory.in_flight_total_bytes / 1e6, 2)} MB in all",
        ),
    ]
    if memory.kernel is not None:
        k = memory.kernel
        rows.append(
            (
                "this pipeline",
                f"{_kib(k.in_flight_per_sm)} per SM -> {figure(k.reachable_gbps)} GB/s "
                f"({k.pct_of_bandwidth:.0f}%)",
            )
        )
    if tensor is not None:
        from kernelab.roofline.costs import INTEGER_DTYPES

        unit = "OP" if tensor.dtype in INTEGER_DTYPES else "FLOP"
        rows.append(
            (
                f"{tensor.dtype} MMA",
                f"{tensor.flops_per_sm_per_cycle:.0f} {unit}/cycle/SM; "
                f"{figure(tensor.flops_in_flight_per_sm / 1e6, 2)} M{unit} queued per SM covers "
                f"{figure(tensor.latency.ns)} ns",
            )
        )
        if tensor.stages_needed is not None:
            rows.append(("stages needed", str(tensor.stages_needed)))
    _table(console, rows)
    console.print(memory.summary, highlight=False)
    if tensor is not None:
        console.print(tensor.summary, highlight=False)
    if tensor_note is not None:
        console.print(tensor_note, highlight=False)


def register(app: typer.Typer) -> None:
    @app.command()
    def tile(
        bm: Annotated[int | None, typer.Option("--bm", help="Block tile rows (M).")] = None,
        bn: Annotated[int | None, typer.Option("--bn", help="Block tile columns (N).")] = None,
        bk: Annotated[int | None, typer.Option("--bk", help="Block tile depth (K step).")] = None,
        wm: Annotated[int | None, typer.Option("--wm", help="Warp tile rows.")] = None,
        wn: Annotated[int | None, typer.Option("--wn", help="Warp tile columns.")] = None,
        tm: Annotated[int | None, typer.Option("--tm", help="Thread tile rows.")] = None,
        tn: Annotated[int | None, typer.Option("--tn", help="Thread tile columns.")] = None,
        threads: Annotated[int | None, typer.Option("--threads", help="Threads per block.")] = None,
        stages: Annotated[
            int | None, typer.Option("--stages", help="Shared-memory stages.")
        ] = None,
        pad: Annotated[
            int | None, typer.Option("--pad", help="Padding per shared row, A and B (elements).")
        ] = None,
        a_pad: Annotated[int | None, typer.Option("--a-pad", help="Padding of A rows.")] = None,
        b_pad: Annotated[int | None, typer.Option("--b-pad", help="Padding of B rows.")] = None,
        a_transposed: Annotated[
            bool | None,
            typer.Option("--a-transposed/--a-row-major", help="A stored as BK x BM."),
        ] = None,
        regs: Annotated[
            int | None, typer.Option("--regs", help="Registers per thread (ptxas -v).")
        ] = None,
        dtype: Annotated[str | None, typer.Option("--dtype", help="Input dtype.")] = None,
        gpu: GpuOption = None,
        m: Annotated[int | None, typer.Option("--m", help="Problem M, for waves.")] = None,
        n: Annotated[int | None, typer.Option("--n", help="Problem N, for waves.")] = None,
        k: Annotated[int | None, typer.Option("--k", help="Problem K, for waves.")] = None,
        kernel: Annotated[
            str | None, typer.Option("--kernel", help="Read the tile of a registered kernel.")
        ] = None,
        bank_stride: Annotated[
            int | None, typer.Option("--bank-stride", help="Shared row stride in 4-byte words.")
        ] = None,
        bank_width: Annotated[
            int | None,
            typer.Option("--bank-width", help="Bytes per access: 4, 8 or 16 (default 4)."),
        ] = None,
        bank_pattern: Annotated[
            str | None,
            typer.Option("--bank-pattern", help="column, row or broadcast (default column)."),
        ] = None,
        as_json: JsonOption = False,
    ) -> None:
        """A GEMM tiling: shared memory, registers, occupancy, reuse, waves and tail."""
        from kernelab.errors import KernelabError
        from kernelab.lenses.banks import bank_conflicts
        from kernelab.lenses.tile import analyze_tile

        if kernel is not None and not kernel.strip():
            raise KernelabError("--kernel needs a registered kernel name, not an empty string")
        # The bank check needs the row stride: a width or a pattern alone has nothing to
        # apply to, and would be dropped without a word.
        if bank_stride is None:
            options = (("--bank-width", bank_width), ("--bank-pattern", bank_pattern))
            alone = [flag for flag, value in options if value is not None]
            if alone:
                verb = "needs" if len(alone) == 1 else "need"
                raise KernelabError(
                    f"{' and '.join(alone)} {verb} --bank-stride (the shared row stride in "
                    "4-byte words) to check bank conflicts"
                )
        chosen = choose_gpu(gpu)
        spec = chosen.spec
        given = {
            "bm": bm,
            "bn": bn,
            "bk": bk,
            "wm": wm,
            "wn": wn,
            "tm": tm,
            "tn": tn,
            "threads": threads,
            "stages": stages,
            "a_pad": a_pad if a_pad is not None else pad,
            "b_pad": b_pad if b_pad is not None else pad,
            "a_transposed": a_transposed,
            "registers": regs,
            "dtype": dtype,
        }
        config = _tile_config(kernel, given)
        analysis = analyze_tile(config, spec, m=m, n=n, k=k)
        banks = None
        if bank_stride is not None:
            banks = bank_conflicts(bank_stride, bank_width or 4, bank_pattern or "column")
        data = analysis.to_dict()
        data["kernel"] = kernel
        data["banks"] = banks.to_dict() if banks else None
        data["gpu_choice"] = chosen.to_dict()
        emit(data, as_json, lambda console: _render_tile(console, analysis, banks, chosen.label))

    @app.command()
    def pipeline(
        gpu: GpuOption = None,
        latency_ns: Annotated[
            float | None, typer.Option("--latency-ns", help="Load latency to assume, in ns.")
        ] = None,
        bandwidth_gbps: Annotated[
            float | None, typer.Option("--bandwidth-gbps", help="Bandwidth to saturate.")
        ] = None,
        bytes_per_stage: Annotated[
            float | None, typer.Option("--bytes-per-stage", help="Bytes one stage loads.")
        ] = None,
        stages: Annotated[int | None, typer.Option("--stages", help="Pipeline stages.")] = None,
        blocks_per_sm: Annotated[
            int | None, typer.Option("--blocks-per-sm", help="Resident blocks per SM.")
        ] = None,
        dtype: Annotated[
            str | None, typer.Option("--dtype", help="Tensor-core dtype (default bf16).")
        ] = None,
        bm: Annotated[int | None, typer.Option("--bm", help="MMA stage tile rows.")] = None,
        bn: Annotated[int | None, typer.Option("--bn", help="MMA stage tile columns.")] = None,
        bk: Annotated[int | None, typer.Option("--bk", help="MMA stage tile depth.")] = None,
        as_json: JsonOption = False,
    ) -> None:
        """Little's law: bytes in flight to saturate HBM, and MMA work to cover latency."""
        from kernelab.errors import KernelabError, positive_number
        from kernelab.lenses.pipeline import memory_pipeline, tensor_core_pipeline
        from kernelab.roofline.costs import canonical_dtype

        positive_number(latency_ns, "--latency-ns", "ns")
        positive_number(bandwidth_gbps, "--bandwidth-gbps", "GB/s")
        positive_number(bytes_per_stage, "--bytes-per-stage", "bytes")
        chosen = choose_gpu(gpu)
        spec = chosen.spec
        explicit_dtype = dtype is not None
        dtype = canonical_dtype(dtype if dtype is not None else "bf16")
        memory = memory_pipeline(
            spec,
            bandwidth_gbps=bandwidth_gbps,
            latency_ns=latency_ns,
            bytes_per_stage=bytes_per_stage,
            stages=stages,
            blocks_per_sm=blocks_per_sm,
        )
        tensor = None
        if dtype in spec.peak_tflops or any(v is not None for v in (bm, bn, bk)):
            tensor = tensor_core_pipeline(
                spec,
                dtype=dtype,
                latency_ns=latency_ns,
                bm=bm,
                bn=bn,
                bk=bk,
                blocks_per_sm=blocks_per_sm or 1,
            )
        elif explicit_dtype:
            raise KernelabError(f"{spec.id} has no {dtype} peak rate in the catalog")
        tensor_note = None
        if tensor is None:
            tensor_note = (
                f"no tensor-core line: {spec.id} has no {dtype} peak rate in the catalog "
                f"(it has: {', '.join(spec.peak_tflops) or 'none'})"
            )
        data = {
            "memory": memory.to_dict(),
            "tensor_cores": tensor.to_dict() if tensor else None,
            "tensor_cores_note": tensor_note,
            "gpu_choice": chosen.to_dict(),
        }
        emit(
            data,
            as_json,
            lambda console: _render_pipeline(console, memory, tensor, chosen.label, tensor_note),
        )
