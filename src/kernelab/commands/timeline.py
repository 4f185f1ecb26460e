"""`kernelab timeline`: from a whole workload to its hot kernels.

    kernelab timeline [--out DIR] [--steps N] [--warmup N] [--top K] [--drill N]
                      -- python script.py [args]          (or -- python -m module [args])
    kernelab timeline --import trace.json[.gz] | nsys_export.csv | run.nsys-rep

Runs the workload under torch.profiler after a warm-up, keeps the Chrome trace in --out, and
prints the top kernels (class, calls, time, share), how busy the GPU was and where it idled,
whether the run is launch-bound and what to try next, the roofline placement of ops whose
shapes were recorded, and with --drill N Nsight Compute's diagnosis of the top N kernels.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Annotated

import typer

from kernelab.errors import KernelabError, input_file, output_folder
from kernelab.output import JsonOption, emit, to_jsonable

DEFAULT_OUT = "kernelab-timeline"
DEFAULT_STEPS, DEFAULT_WARMUP = 5, 3
NSYS_SUFFIXES = (".csv", ".nsys-rep")


def import_timeline(path: Path, *, top: int, gpu):
    """A Timeline from a saved torch.profiler trace or an nsys export."""
    from kernelab.timeline.capture import Timeline
    from kernelab.timeline.summary import summarize_trace

    if path.name.endswith(NSYS_SUFFIXES):
        from kernelab.timeline.nsys import load_nsys

        trace = load_nsys(path)
    else:
        from kernelab.timeline.trace import load_trace

        trace = load_trace(path)
    summary = summarize_trace(trace, top=top, gpu=gpu)
    return Timeline(trace_path=path, summary=summary, capture={"mode": "import"}, trace=trace)


def register(app) -> None:
    @app.command()
    def timeline(
        target: Annotated[
            list[str] | None,
            typer.Argument(
                metavar="COMMAND",
                help="After '--': python script.py [args] or python -m module [args].",
            ),
        ] = None,
        import_path: Annotated[
            str | None,
            typer.Option(
                "--import",
                metavar="FILE",
                help="Read a torch.profiler trace (.json, .json.gz), nsys CSV or .nsys-rep.",
            ),
        ] = None,
        out: Annotated[
            str | None,
            typer.Option(
                "--out",
                metavar="DIR",
                help=f"Folder for the trace and the summary (default: {DEFAULT_OUT}).",
            ),
        ] = None,
        steps: Annotated[
            int, typer.Option(help="Steps to profile after the warm-up.")
        ] = DEFAULT_STEPS,
        warmup: Annotated[
            int, typer.Option(help="Steps to run first, unprofiled.")
        ] = DEFAULT_WARMUP,
        top: Annotated[int, typer.Option(help="Kernels in the table (0: all).")] = 10,
        drill: Annotated[
            int, typer.Option(help="Profile the top N kernels with Nsight Compute.")
        ] = 0,
        gpu: Annotated[
            str | None,
            typer.Option(help="Catalog GPU for the roofline (default: the trace's device)."),
        ] = None,
        as_json: JsonOption = False,
    ) -> None:
        """A timeline of every kernel: top kernels, idle gaps, launch-bound or not, roofline."""
        from kernelab.timeline.render import render

        target = list(target or [])
        if steps < 1:
            raise KernelabError(f"--steps must be at least 1, got {steps}")
        if warmup < 0:
            raise KernelabError(f"--warmup must be 0 or more, got {warmup}")
        if top < 0:
            raise KernelabError(f"--top must be 0 (all) or more, got {top}")
        if drill < 0:
            raise KernelabError(f"--drill must be 0 or more, got {drill}")
        if gpu is not None:
            from kernelab.hardware import get_gpu

            if not gpu.strip():
                raise KernelabError("--gpu needs a catalog id, not an empty string")
            get_gpu(gpu)  # an unknown name fails here, before any work

        if import_path is not None:
            if target:
                raise KernelabError("give either --import FILE or a workload after '--', not both")
            if drill:
                raise KernelabError("--drill reruns the workload: give it after '--', not --import")
            # options that shape a new capture are refused rather than silently ignored
            if out is not None:
                raise KernelabError("--out keeps a new capture; with --import there is none")
            if (steps, warmup) != (DEFAULT_STEPS, DEFAULT_WARMUP):
                raise KernelabError("--steps and --warmup shape a new capture; with --import "
                                    "there is none")  # fmt: skip
            result = import_timeline(input_file(import_path, "--import"), top=top, gpu=gpu)
        elif not target:
            raise KernelabError(
                "nothing to profile: give a workload after '--' (-- python script.py) "
                "or --import TRACE"
            )
        else:
            from kernelab.timeline.capture import profile_script

            out = output_folder(DEFAULT_OUT if out is None else out, "--out")
            made_out = not out.exists()
            try:
                result = profile_script(
                    target, out_dir=out, warmup=warmup, steps=steps, top=top, gpu=gpu
                )
            except KernelabError:
                if made_out:  # a failed run leaves no folder of half a trace behind
                    shutil.rmtree(out, ignore_errors=True)
                raise
            if drill:
                from kernelab.timeline.drill import drill as run_drill

                result.drill = run_drill(target, result, drill, out_dir=out, warmup=warmup, gpu=gpu)
            (out / "summary.json").write_text(
                json.dumps(to_jsonable(result.to_dict()), indent=2) + "\n"
            )

        emit(result.to_dict(), as_json, lambda console: render(result, console))
