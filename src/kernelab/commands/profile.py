"""`kernelab profile`: Nsight Compute on a registered kernel, on any command, or on a report.

    kernelab profile torch.mm --size 2048 --dtype bf16       a registered implementation
    kernelab profile --kernel 'gemm' [--nvtx R] -- python my_script.py     any command
    kernelab profile --import report.ncu-rep[.xz] | page.csv                  a saved report

Each profiled kernel gets its throughputs, occupancy, stalls, counted FLOPs and DRAM bytes on
the roofline, and a diagnosis: bottleneck, unit, evidence and the next thing to try.
"""

from __future__ import annotations

import os
import shutil
from typing import Annotated

import typer

from kernelab.commands.options import out_file_option
from kernelab.errors import KernelabError, input_file, output_file
from kernelab.output import JsonOption, emit

SECTION_SETS = ("focused", "full")
# Shape options: each fills the op's shape key of the same name; --size fills them all.
SHAPE_OPTIONS = ("m", "n", "k", "rows", "cols")


def _shape(op_spec, size, given: dict) -> dict:
    shape = {}
    for key in op_spec.shape_keys:
        value = given.get(key)
        if value is None:
            value = size
        if value is None:
            options = " or ".join(f"--{k}" for k in op_spec.shape_keys)
            raise KernelabError(f"{op_spec.name} needs its shape: --size N, or {options}")
        shape[key] = value
    unused = [k for k, v in given.items() if v is not None and k not in op_spec.shape_keys]
    if unused:
        raise KernelabError(
            f"{op_spec.name} has no shape key {', '.join(unused)} "
            f"(its keys: {', '.join(op_spec.shape_keys)})"
        )
    for key, value in shape.items():
        if value <= 0:
            raise KernelabError(f"--{key} must be a positive integer, got {value}")
    return shape


def _is_command(target: list[str], kernel: str | None, nvtx: str | None) -> bool:
    if kernel is not None or nvtx is not None or len(target) > 1:
        return True
    first = target[0]
    return os.sep in first or shutil.which(first) is not None


def kernels_matching(profiles, pattern: str, report) -> list:
    """The profiles whose function name (short or demangled) matches the regex `pattern`,
    the same test --kernel applies when profiling; none is a one-line error naming some."""
    import re

    try:
        regex = re.compile(pattern)
    except re.error as exc:
        raise KernelabError(f"--kernel '{pattern}' is not a regular expression: {exc}") from None
    kept = [p for p in profiles if regex.search(p.name) or regex.search(p.demangled_name or "")]
    if not kept:
        names = sorted({p.name for p in profiles})
        shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
        raise KernelabError(f"{report}: no kernel matches --kernel '{pattern}' (it holds {shown})")
    return kept


def _payload(summaries, *, report, mode: str, extra: dict, profiles, all_metrics: bool) -> dict:
    kernels = []
    for summary, profile in zip(summaries, profiles, strict=True):
        data = summary.to_dict()
        if all_metrics:
            data["metrics"] = profile.to_dict(include_metrics=True)["metrics"]
        kernels.append(data)
    return {"mode": mode, "report": str(report), **extra, "kernels": kernels}


def register(app) -> None:
    @app.command()
    def profile(
        target: Annotated[
            list[str] | None,
            typer.Argument(
                metavar="TARGET",
                help="A registered implementation name (torch.mm), or after '--' a command to run.",
            ),
        ] = None,
        import_path: Annotated[
            str | None,
            typer.Option(
                "--import",
                metavar="FILE",
                help="Read a saved .ncu-rep or ncu CSV page (.xz too).",
            ),
        ] = None,
        kernel: Annotated[
            str | None,
            typer.Option("--kernel", help="Profile kernels whose name matches this regex."),
        ] = None,
        nvtx: Annotated[
            str | None,
            typer.Option(
                "--nvtx", help="Only kernels inside this NVTX range ('name/' for push/pop)."
            ),
        ] = None,
        launch_skip: Annotated[int, typer.Option(help="Matching launches to skip first.")] = 0,
        launch_count: Annotated[int, typer.Option(help="Matching launches to profile.")] = 1,
        size: Annotated[int | None, typer.Option(help="Every shape dimension of the op.")] = None,
        m: Annotated[int | None, typer.Option("--m", help="GEMM M.")] = None,
        n: Annotated[int | None, typer.Option("--n", help="GEMM N, or vector length.")] = None,
        k: Annotated[int | None, typer.Option("--k", help="GEMM K.")] = None,
        rows: Annotated[int | None, typer.Option(help="Rows (softmax, norms).")] = None,
        cols: Annotated[int | None, typer.Option(help="Columns (softmax, norms).")] = None,
        dtype: Annotated[
            str | None, typer.Option(help="Input dtype: fp32, bf16, fp16, ...")
        ] = None,
        section_set: Annotated[
            str, typer.Option("--set", help="Sections: 'focused' (default) or 'full'.")
        ] = "focused",
        out: out_file_option("Keep the report here (FILE.ncu-rep).") = None,
        gpu: Annotated[
            str | None,
            typer.Option(help="Catalog GPU for the roofline (default: the device in the report)."),
        ] = None,
        all_metrics: Annotated[
            bool, typer.Option("--all-metrics", help="Include every raw metric in --json.")
        ] = False,
        as_json: JsonOption = False,
    ) -> None:
        """Profile with Nsight Compute and diagnose each kernel's bottleneck."""
        from kernelab.profiling import report as report_module
        from kernelab.profiling import session
        from kernelab.profiling.metrics import FOCUSED_SECTIONS
        from kernelab.profiling.summary import render, summarize

        target = list(target or [])
        if section_set not in SECTION_SETS:
            raise KernelabError(
                f"--set must be one of {', '.join(SECTION_SETS)}, not '{section_set}'"
            )
        sections = "full" if section_set == "full" else FOCUSED_SECTIONS
        predicted, extra = None, {}
        if gpu is not None:
            from kernelab.hardware import get_gpu

            if not gpu.strip():
                raise KernelabError("--gpu needs a catalog id, not an empty string")
            get_gpu(gpu)  # an unknown name fails here, before any work
        if launch_skip < 0 or launch_count < 1:
            raise KernelabError("--launch-skip must be 0 or more and --launch-count 1 or more")
        out_path = None
        if out is not None:
            if import_path is not None:
                raise KernelabError("--out keeps a new report; with --import there is none")
            from kernelab.profiling.ncu import report_path

            if not out.strip():
                raise KernelabError("--out needs a path, not an empty string")
            out_path = output_file(str(report_path(out)), "--out")

        if import_path is not None:
            if target:
                raise KernelabError("give either --import FILE or something to profile, not both")
            if nvtx is not None:
                raise KernelabError("--nvtx selects kernels while profiling, not in --import")
            # what only shapes a new profile is refused rather than silently ignored
            given = [name for name, value in (
                ("--set", section_set != "focused"), ("--size", size is not None),
                ("--m", m is not None), ("--n", n is not None), ("--k", k is not None),
                ("--rows", rows is not None), ("--cols", cols is not None),
                ("--dtype", dtype is not None), ("--launch-skip", launch_skip != 0),
                ("--launch-count", launch_count != 1)) if value]  # fmt: skip
            if given:
                verb = "shapes" if len(given) == 1 else "shape"
                raise KernelabError(f"{', '.join(given)} {verb} a new profile; with --import "
                                    "there is none (--kernel and --gpu apply to a report)")  # fmt: skip
            import_file = input_file(import_path, "--import")
            profiles = report_module.load(import_file)
            if kernel is not None:
                profiles = kernels_matching(profiles, kernel, import_file)
            report, mode = import_file, "import"
        elif not target:
            raise KernelabError(
                "nothing to profile: give an implementation name, --kernel REGEX -- COMMAND, "
                "or --import FILE"
            )
        elif _is_command(target, kernel, nvtx):
            run = session.run_command(
                target,
                kernel_regex=kernel,
                nvtx_range=nvtx,
                launch_skip=launch_skip,
                launch_count=launch_count,
                sections=sections,
                out_path=out_path,
            )
            profiles, report, mode = run.kernels, run.report_path, "command"
            extra = {"command": run.command}
        else:
            from kernelab.spec import registry
            from kernelab.spec.reference import get_op

            name = target[0]
            op_spec = get_op(registry.get(name).op)
            given = {"m": m, "n": n, "k": k, "rows": rows, "cols": cols}
            shape = _shape(op_spec, size, given)
            run = session.run_implementation(
                name, shape, dtype, sections=sections, out_path=out_path
            )
            profiles, report, mode = run.kernels, run.report_path, "implementation"
            predicted = run.predicted
            extra = {
                "implementation": name,
                "op": run.op,
                "shape": run.shape,
                "dtype": run.dtype,
                "command": run.command,
            }

        if not profiles:
            raise KernelabError(f"{report}: the report holds no kernel")
        from kernelab.profiling.summary import measured_copy_gbps

        copy = measured_copy_gbps(profiles[0], gpu)
        summaries = [
            summarize(p, gpu=gpu, predicted=predicted, copy_ceiling_gbps=copy) for p in profiles
        ]
        data = _payload(
            summaries,
            report=report,
            mode=mode,
            extra=extra,
            profiles=profiles,
            all_metrics=all_metrics,
        )

        def draw(console) -> None:
            render(summaries, console)
            console.print(f"report: {report}")

        emit(data, as_json, draw)
