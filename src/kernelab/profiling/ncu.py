"""Build and run the Nsight Compute (ncu) command line.

Every command kernelab builds carries `--clock-control none`: ncu's default locks the SM
and memory clocks to base values, which would profile a slower card than the one the
benchmarks time (and changes the card's state for everyone sharing it). `--target-processes
all` follows child processes (a Python script that spawns workers, torch's compile
workers); `-f -o` overwrites the named report.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

from kernelab.errors import KernelabError, MissingToolError
from kernelab.output import note
from kernelab.profiling.metrics import EXTRA_METRICS, FOCUSED_SECTIONS

NCU_ENV = "KERNELAB_NCU"  # an explicit path to the ncu executable, if not on PATH
REPORT_SUFFIX = ".ncu-rep"

NCU_NOT_FOUND = "ncu not found: install Nsight Compute or add /usr/local/cuda/bin to PATH"
PERMISSION_FIX = (
    "ncu may not read the GPU performance counters (ERR_NVGPUCTRPERM): run it as root, or "
    "let every user profile with the driver option NVreg_RestrictProfilingToAdminUsers=0 "
    "(add 'options nvidia NVreg_RestrictProfilingToAdminUsers=0' to a file in "
    "/etc/modprobe.d/ and reload the nvidia module or reboot)"
)


def find_ncu() -> str:
    """The ncu executable: $KERNELAB_NCU, else `ncu` on PATH; MissingToolError otherwise."""
    explicit = os.environ.get(NCU_ENV)
    if explicit:
        if Path(explicit).is_file() and os.access(explicit, os.X_OK):
            return explicit
        raise MissingToolError(f"{NCU_ENV}={explicit} is not an executable file")
    found = shutil.which("ncu")
    if not found:
        raise MissingToolError(NCU_NOT_FOUND)
    return found


def report_path(out_path) -> Path:
    """The file ncu writes for `-o out_path` (it appends .ncu-rep when missing)."""
    path = Path(out_path)
    return path if path.name.endswith(REPORT_SUFFIX) else path.with_name(path.name + REPORT_SUFFIX)


def build_ncu_command(
    target_cmd: Sequence[str],
    *,
    out_path,
    kernel_regex: str | None = None,
    launch_skip: int = 0,
    launch_count: int | None = 1,
    sections: Sequence[str] | str = FOCUSED_SECTIONS,
    metrics: Sequence[str] | None = EXTRA_METRICS,
    nvtx_range: str | None = None,
    ncu: str = "ncu",
) -> list[str]:
    """The ncu argv that profiles `target_cmd`.

    sections: section identifiers, or "full" for `--set full`. metrics: extra metrics added
    to the sections. kernel_regex: only kernels whose function name matches. nvtx_range: an
    `--nvtx-include` expression (push/pop ranges end in "/", e.g. "kernelab_profile/").
    launch_skip / launch_count: skip that many matching launches, then profile that many
    (None: every matching launch).
    """
    target = [str(part) for part in target_cmd]
    if not target:
        raise KernelabError("nothing to profile: give a command after '--'")
    if launch_skip < 0:
        raise KernelabError(f"--launch-skip must be 0 or more, got {launch_skip}")
    if launch_count is not None and launch_count < 1:
        raise KernelabError(f"--launch-count must be at least 1, got {launch_count}")
    if kernel_regex is not None and not kernel_regex.strip():
        raise KernelabError("--kernel needs a regular expression")

    command = [ncu, "--clock-control", "none", "--target-processes", "all"]
    if isinstance(sections, str):
        if sections != "full":
            raise KernelabError(f"unknown section set '{sections}' (use 'full' or a list)")
        command += ["--set", "full"]
    else:
        if not sections and not metrics:  # metrics alone are a profile (a ladder's proofs)
            raise KernelabError("nothing to collect: give sections or metrics")
        for section in sections:
            command += ["--section", section]
    if metrics:
        command += ["--metrics", ",".join(dict.fromkeys(metrics))]
    if kernel_regex:
        command += ["--kernel-name", f"regex:{kernel_regex}"]
    if nvtx_range:
        command += ["--nvtx", "--nvtx-include", nvtx_range]
    if launch_skip:
        command += ["--launch-skip", str(launch_skip)]
    if launch_count is not None:
        command += ["--launch-count", str(launch_count)]
    out = report_path(out_path)
    command += ["-f", "-o", str(out)[: -len(REPORT_SUFFIX)]]
    return command + target


def _error_line(output: str) -> str:
    """The most telling line of ncu's output: its last ==ERROR==, else the last line."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("==ERROR==")]
    if errors:
        return errors[-1].removeprefix("==ERROR==").strip()
    return lines[-1] if lines else "no output"


def check_ncu_output(returncode: int, output: str, report: Path, *, what: str) -> None:
    """Raise a one-line KernelabError for a failed ncu run; return when the report exists."""
    if "ERR_NVGPUCTRPERM" in output:
        raise KernelabError(PERMISSION_FIX)
    if "No kernels were profiled" in output or (returncode == 0 and not report.is_file()):
        raise KernelabError(f"ncu profiled no kernel: nothing matched {what}")
    if returncode != 0:
        raise KernelabError(f"ncu failed (exit {returncode}): {_error_line(output)}")
    if not report.is_file():
        raise KernelabError(f"ncu wrote no report at {report}: {_error_line(output)}")


def run_ncu(
    target_cmd: Sequence[str],
    *,
    out_path,
    kernel_regex: str | None = None,
    launch_skip: int = 0,
    launch_count: int | None = 1,
    sections: Sequence[str] | str = FOCUSED_SECTIONS,
    metrics: Sequence[str] | None = EXTRA_METRICS,
    nvtx_range: str | None = None,
    timeout_s: float | None = None,
    env: dict | None = None,
) -> tuple[Path, list[str], str]:
    """Run ncu on `target_cmd`; return (report path, the ncu argv, ncu's combined output).

    Failures become one-line errors: no ncu (MissingToolError), no permission for the
    counters, no kernel matched, the target failing.
    """
    ncu = find_ncu()
    command = build_ncu_command(
        target_cmd,
        out_path=out_path,
        kernel_regex=kernel_regex,
        launch_skip=launch_skip,
        launch_count=launch_count,
        sections=sections,
        metrics=metrics,
        nvtx_range=nvtx_range,
        ncu=ncu,
    )
    report = report_path(out_path)
    note(f"ncu: profiling `{' '.join(str(p) for p in target_cmd)}` (replays each kernel) ...")
    report.parent.mkdir(parents=True, exist_ok=True)
    report.unlink(missing_ok=True)  # so a run that profiles nothing cannot pass off an old one
    try:
        done = subprocess.run(
            command,
            capture_output=True,
            text=True,
            errors="replace",
            timeout=timeout_s,
            env=env,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise KernelabError(f"ncu did not finish within {timeout_s:g} s") from None
    except OSError as exc:
        raise MissingToolError(f"cannot run {ncu}: {exc.strerror or exc}") from None
    output = (done.stdout or "") + (done.stderr or "")
    parts = [f"kernel regex '{kernel_regex}'" if kernel_regex else "any kernel"]
    if nvtx_range:
        parts.append(f"inside NVTX range '{nvtx_range}'")
    if launch_skip:
        parts.append(f"after skipping {launch_skip} launches")
    check_ncu_output(done.returncode, output, report, what=" ".join(parts))
    return report, command, output
