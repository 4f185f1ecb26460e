"""Run a workload under torch.profiler, after a warm-up, for a number of steps.

Two entry points:
  profile_callable(fn, warmup=, steps=)   in this process: fn() is one step
  profile_script(target, warmup=, steps=) a Python script or module in a child process:
      python -m kernelab.timeline.capture --out DIR --warmup W --steps S -- script.py ARGS

A script marks its steps by calling `kernelab.timeline.step()` at the end of each iteration:
the first W calls end warm-up iterations, the next S end profiled ones, and then the capture
stops the script (a BaseException its `except Exception` cannot swallow; its `finally`
blocks run). A script that never calls it is run whole: once as a warm-up (W times when W >
1), then S times, one profiled step per run, all in one process so that CUDA, cuBLAS and
Triton are warm after the first.

Each profiled step is a `kernelab_step#i` range in the trace, so the summary judges the
wall-clock span of the steps and nothing before or after. The CPU is always recorded; CUDA
activity when a GPU is visible. With `--nvtx-only` (for Nsight Compute, which cannot share
the GPU's activity API with torch.profiler) no trace is written: the profiled steps run
inside the NVTX range `kernelab_timeline` instead.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import runpy
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from kernelab.errors import KernelabError, one_line_failures
from kernelab.output import note

STEP_RANGE = "kernelab_step#{}"
NVTX_RANGE = "kernelab_timeline"
TRACE_NAME = "trace.json"
CAPTURE_NAME = "capture.json"
DEFAULT_WARMUP = 3
DEFAULT_STEPS = 5

USAGE = (
    "kernelab timeline runs a Python workload: give `-- python script.py [args]` or "
    "`-- python -m module [args]`"
)


class CaptureDone(BaseException):
    """Raised from step() once every profiled step is recorded, to end the script early."""


@dataclass
class Timeline:
    trace_path: Path | None
    summary: object  # kernelab.timeline.summary.TimelineSummary
    capture: dict  # how it was recorded: mode, warmup, steps, target, device
    trace: object = field(default=None, repr=False)  # the parsed Trace
    drill: list = field(default_factory=list)  # [DrillResult] when --drill ran

    def to_dict(self) -> dict:
        data = {"trace": str(self.trace_path) if self.trace_path else None}
        data["capture"] = dict(self.capture)
        data.update(self.summary.to_dict())
        data["drill"] = [d.to_dict() for d in self.drill]
        return data


def _check_counts(warmup: int, steps: int) -> None:
    if warmup < 0:
        raise KernelabError(f"--warmup must be 0 or more, got {warmup}")
    if steps < 1:
        raise KernelabError(f"--steps must be at least 1, got {steps}")


class Recorder:
    """Starts and stops the profiler and marks each profiled step as a range."""

    def __init__(self, trace_path: Path | None, *, nvtx_only: bool = False):
        import torch

        self.torch = torch
        self.trace_path = trace_path
        self.nvtx_only = nvtx_only
        self.cuda = torch.cuda.is_available()
        self.profiler = None
        self.step_range = None
        self.recorded = 0
        self.started = False

    def start(self) -> None:
        torch = self.torch
        if self.cuda:
            torch.cuda.synchronize()  # warm-up work must not spill into the first step
        if self.nvtx_only:
            if self.cuda:
                torch.cuda.nvtx.range_push(NVTX_RANGE)
        else:
            activities = [torch.profiler.ProfilerActivity.CPU]
            if self.cuda:
                activities.append(torch.profiler.ProfilerActivity.CUDA)
            self.profiler = torch.profiler.profile(activities=activities, record_shapes=True)
            self.profiler.__enter__()
        self.started = True

    def begin_step(self) -> None:
        if self.profiler is not None:
            self.step_range = self.torch.profiler.record_function(STEP_RANGE.format(self.recorded))
            self.step_range.__enter__()

    def end_step(self) -> None:
        if self.step_range is not None:
            self.step_range.__exit__(None, None, None)
            self.step_range = None
        self.recorded += 1

    def stop(self) -> None:
        if not self.started:
            return
        self.started = False
        if self.cuda:
            self.torch.cuda.synchronize()  # the last step's kernels belong in the trace
        if self.nvtx_only:
            if self.cuda:
                self.torch.cuda.nvtx.range_pop()
            return
        self.profiler.__exit__(None, None, None)
        if self.trace_path is not None:
            self.trace_path.parent.mkdir(parents=True, exist_ok=True)
            self.profiler.export_chrome_trace(str(self.trace_path))


def _summarise(trace_path: Path, capture: dict, *, top: int, gpu) -> Timeline:
    from kernelab.timeline.summary import summarize_trace
    from kernelab.timeline.trace import load_trace

    trace = load_trace(trace_path)
    summary = summarize_trace(trace, top=top, gpu=gpu)
    return Timeline(trace_path=trace_path, summary=summary, capture=capture, trace=trace)


def profile_callable(
    fn, *, warmup: int = DEFAULT_WARMUP, steps: int = DEFAULT_STEPS, out_dir=None, top=10, gpu=None
) -> Timeline:
    """Call fn() `warmup` times, then `steps` times under torch.profiler; summarise the trace.

    The trace is kept as `out_dir`/trace.json (a new temporary folder when out_dir is None).
    """
    _check_counts(warmup, steps)
    out = Path(out_dir) if out_dir is not None else Path(tempfile.mkdtemp(prefix="kernelab-tl-"))
    trace_path = out / TRACE_NAME
    recorder = Recorder(trace_path)
    for _ in range(warmup):
        fn()
    recorder.start()
    try:
        for _ in range(steps):
            recorder.begin_step()
            fn()
            recorder.end_step()
    finally:
        recorder.stop()
    capture = {
        "mode": "callable",
        "warmup": warmup,
        "steps": steps,
        "target": getattr(fn, "__qualname__", repr(fn)),
        "cuda": recorder.cuda,
    }
    return _summarise(trace_path, capture, top=top, gpu=gpu)


# --- scripts ----------------------------------------------------------------------------------


@dataclass
class Target:
    kind: str  # "script" or "module"
    value: str  # the script path or module name
    args: list

    def argv(self) -> list[str]:
        """The target as it follows `python` on a command line."""
        head = [self.value] if self.kind == "script" else ["-m", self.value]
        return head + list(self.args)


_PYTHON = re.compile(r"^python(\d+(\.\d+)*)?$")


def parse_target(command) -> Target:
    """`python script.py args`, `python -m module args`, `script.py args` -> Target."""
    parts = [str(p) for p in command]
    if parts and _PYTHON.match(Path(parts[0]).name):
        parts = parts[1:]
    if not parts:
        raise KernelabError(USAGE)
    if parts[0] == "-m":
        if len(parts) < 2:
            raise KernelabError("`python -m` needs a module name")
        return Target("module", parts[1], parts[2:])
    if parts[0].startswith("-"):
        raise KernelabError(f"unsupported python option '{parts[0]}': {USAGE}")
    if not parts[0].endswith(".py") and not Path(parts[0]).is_file():
        raise KernelabError(USAGE)
    if not Path(parts[0]).is_file():
        raise KernelabError(f"no script at {parts[0]}")
    return Target("script", parts[0], parts[1:])


def _run_target(target: Target) -> None:
    """Run the script or module once as __main__, with its own argv."""
    saved_argv, saved_path = sys.argv[:], sys.path[:]
    try:
        if target.kind == "script":
            sys.argv = [target.value, *target.args]
            sys.path.insert(0, str(Path(target.value).resolve().parent))
            runpy.run_path(target.value, run_name="__main__")
        else:
            sys.argv = [target.value, *target.args]
            runpy.run_module(target.value, run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        if exc.code not in (None, 0):
            raise KernelabError(f"the workload exited with status {exc.code}") from None
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path


class _StepSession:
    """What step() drives while a script runs under the capture."""

    def __init__(self, recorder: Recorder, warmup: int, steps: int):
        self.recorder, self.warmup, self.steps = recorder, warmup, steps
        self.marks = 0

    def on_step(self) -> None:
        self.marks += 1
        recorder = self.recorder
        if recorder.started:
            recorder.end_step()
            if recorder.recorded >= self.steps:
                recorder.stop()
                raise CaptureDone
            recorder.begin_step()
        elif self.marks == self.warmup:
            recorder.start()
            recorder.begin_step()


_session: _StepSession | None = None


def mark_step() -> None:
    """kernelab.timeline.step(): advance the capture, if one is running in this process."""
    if _session is not None:
        _session.on_step()


def capture_script(
    target: Target, out_dir: Path, *, warmup: int, steps: int, nvtx_only: bool = False
) -> dict:
    """Run `target` in this process under the recorder; return what was captured (mode,
    steps recorded). Writes out_dir/trace.json unless nvtx_only."""
    global _session
    _check_counts(warmup, steps)
    recorder = Recorder(None if nvtx_only else out_dir / TRACE_NAME, nvtx_only=nvtx_only)
    session = _StepSession(recorder, warmup, steps)
    _session = session
    if warmup == 0:
        recorder.start()
        recorder.begin_step()
    mode = "steps"
    try:
        try:
            _run_target(target)
        except CaptureDone:
            pass
        else:
            if session.marks:
                # The script marks steps but ended before all were recorded.
                if recorder.started:
                    recorder.stop()
                if not recorder.recorded:
                    raise KernelabError(
                        f"the workload called kernelab.timeline.step() {session.marks} times, "
                        f"not more than --warmup {warmup}: nothing was profiled"
                    )
            else:
                mode = "runs"
                _profile_runs(target, recorder, warmup=warmup, steps=steps)
    finally:
        _session = None
        recorder.stop()
    return {
        "mode": mode,
        "warmup": warmup,
        "steps": recorder.recorded,
        "target": target.argv(),
        "cuda": recorder.cuda,
    }


def _profile_runs(target: Target, recorder: Recorder, *, warmup: int, steps: int) -> None:
    """The script never called step(): the run that just ended was the first warm-up run (or,
    with no warm-up, the first profiled step); run it whole for the rest."""
    if recorder.started:
        recorder.end_step()
    else:
        for _ in range(warmup - 1):
            _run_target(target)
        recorder.start()
    while recorder.recorded < steps:
        recorder.begin_step()
        _run_target(target)
        recorder.end_step()
    recorder.stop()


def child_command(
    target: Target, out_dir: Path, *, warmup: int, steps: int, nvtx_only: bool = False
) -> list[str]:
    """The argv that runs `target` under the capture in a fresh Python process."""
    command = [sys.executable, "-m", "kernelab.timeline.capture", "--out", str(out_dir)]
    command += ["--warmup", str(warmup), "--steps", str(steps)]
    if nvtx_only:
        command.append("--nvtx-only")
    return command + ["--", *target.argv()]


def child_env() -> dict:
    """This environment, with kernelab's own source folder importable in the child."""
    env = dict(os.environ)
    src = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH")) if p)
    return env


def profile_script(
    command,
    *,
    out_dir,
    warmup: int = DEFAULT_WARMUP,
    steps: int = DEFAULT_STEPS,
    top: int = 10,
    gpu=None,
    timeout_s: float | None = None,
) -> Timeline:
    """Profile `python script.py args` (or `python -m module args`) in a child process;
    the trace is kept as out_dir/trace.json and summarised."""
    _check_counts(warmup, steps)
    target = parse_target(command)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / TRACE_NAME).unlink(missing_ok=True)
    argv = child_command(target, out, warmup=warmup, steps=steps)
    note(
        f"timeline: profiling `python {' '.join(target.argv())}` ({warmup} warm-up, {steps} steps)"
    )
    try:
        done = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            errors="replace",
            timeout=timeout_s,
            env=child_env(),
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise KernelabError(f"the workload did not finish within {timeout_s:g} s") from None
    sys.stderr.write(done.stdout)  # the workload's own output, kept off a --json stdout
    if done.returncode != 0:
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        last = lines[-1] if lines else "no output"
        if last.startswith("kernelab: "):  # the child already said what failed, in one line
            raise KernelabError(last.removeprefix("kernelab: "))
        raise KernelabError(f"the profiled workload failed (exit {done.returncode}): {last}")
    sys.stderr.write(done.stderr)
    capture = json.loads((out / CAPTURE_NAME).read_text())
    return _summarise(out / TRACE_NAME, capture, top=top, gpu=gpu)


@one_line_failures
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kernelab.timeline.capture")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--warmup", type=int, default=DEFAULT_WARMUP)
    parser.add_argument("--steps", type=int, default=DEFAULT_STEPS)
    parser.add_argument("--nvtx-only", action="store_true")
    parser.add_argument("target", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.target[1:] if args.target[:1] == ["--"] else args.target
    target = parse_target(command)
    args.out.mkdir(parents=True, exist_ok=True)
    capture = capture_script(
        target, args.out, warmup=args.warmup, steps=args.steps, nvtx_only=args.nvtx_only
    )
    (args.out / CAPTURE_NAME).write_text(json.dumps(capture, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    # Run the copy of this module that `kernelab.timeline.step()` imports, not __main__, so
    # that the workload's step() calls reach the session main() sets up.
    from kernelab.timeline import capture as _imported

    sys.exit(_imported.main())
