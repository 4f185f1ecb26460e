"""Does the timer agree with Nsight Compute? The same cuBLAS GEMM, timed and profiled.

kernelab.harness.timing.benchmark times torch.mm in cold mode (L2 flushed before each
call, CUDA events, samples queued behind a spin so they are device time). Then a child
process runs the very same timer call under ncu, which profiles the GEMM kernel of the
first few timed calls: the timer wraps its timed calls in the NVTX range
"kernelab.benchmark", and a kernel-name filter leaves out the flush (a fill kernel) and the
spin. ncu's default `--cache-control all` flushes the caches before the kernel, as cold mode
does; kernelab always passes `--clock-control none`, so the clocks are the card's own.
The check: timer median / ncu median gpu__time_duration within 5 %.

Where they can differ, and why (what `notes` reports):
  clocks   ncu launches one kernel at a time with gaps between; the timer runs them back to
           back. A GEMM that draws the card to its power limit (bf16 at 8192^3 on the H200:
           708 TFLOP/s against 786 at 4096^3) runs at a lower clock in the timer than in
           ncu's isolated launch. The SM clock of both is reported.
  extra work  the timer's events cover everything the call launches (a split-K reduction,
           a cuBLAS workspace memset); ncu's figure is one kernel.
Measured on the H200 before this module existed (fixtures/ncu, ceilings record): fp32
4096^3 2.680 ms under ncu against 2.686 ms timed; bf16 4096^3 0.1755-0.1769 ms against
0.1748 ms.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from kernelab.errors import KernelabError, NoGPUError, one_line_failures
from kernelab.profiling.metrics import DURATION, SM_CYCLES_PER_SECOND

TIMER_RANGE = "kernelab.benchmark"  # the NVTX push/pop range harness/timing.py opens
IMPLEMENTATION = "torch.mm"
# cuBLAS GEMM kernels: sm80_xmma_gemm_* (fp32 SIMT), nvjet_* (Hopper's cuBLASLt kernels,
# bf16 on the H200), cutlass_*gemm*, ampere_*gemm*. Neither the flush (a fill kernel) nor
# the spin (spin_kernel) matches.
GEMM_KERNEL_REGEX = "gemm|nvjet|xmma|cutlass"
_NOT_A_GEMM = re.compile(r"fill|spin|sleep|elementwise", re.IGNORECASE)
TOLERANCE = 0.05
DEFAULT_LAUNCHES = 5
DEFAULT_SIZE = 4096
DEFAULT_DTYPE = "bf16"
CLOCK_GAP = 0.03  # SM clocks this far apart explain a time gap of about the same size


@dataclass
class CrossCheck:
    dtype: str
    size: int
    timer_median_ms: float
    ncu_durations_ms: list[float]
    ncu_median_ms: float
    ratio: float  # timer median / ncu median
    tolerance: float
    agree: bool
    kernel: str | None = None
    timer_sm_mhz: tuple | None = None  # (min, max) the timer's NVML readings saw
    ncu_sm_mhz: float | None = None  # median SM clock over the profiled launches
    timer: dict = field(default_factory=dict)  # Timing.to_dict()
    report: str | None = None
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {
            "implementation": IMPLEMENTATION,
            "dtype": self.dtype,
            "shape": {"m": self.size, "n": self.size, "k": self.size},
            "timer_median_ms": self.timer_median_ms,
            "ncu_median_ms": self.ncu_median_ms,
            "ncu_durations_ms": list(self.ncu_durations_ms),
            "ratio": self.ratio,
            "tolerance": self.tolerance,
            "agree": self.agree,
            "kernel": self.kernel,
            "timer_sm_mhz": list(self.timer_sm_mhz) if self.timer_sm_mhz else None,
            "ncu_sm_mhz": self.ncu_sm_mhz,
            "notes": list(self.notes),
            "report": self.report,
            "timer": dict(self.timer),
        }


def compare(
    timer_median_ms: float, ncu_durations_ms: Sequence[float], tolerance: float = TOLERANCE
) -> tuple[float, float, bool]:
    """(ncu median, timer / ncu, agree within `tolerance`) for one timed kernel."""
    durations = [d for d in ncu_durations_ms if d and d > 0]
    if not durations:
        raise KernelabError("ncu reported no kernel duration to compare the timer with")
    if not timer_median_ms or timer_median_ms <= 0:
        raise KernelabError("the timer reported no positive median to compare")
    ncu_ms = statistics.median(durations)
    ratio = timer_median_ms / ncu_ms
    return ncu_ms, ratio, abs(ratio - 1.0) <= tolerance


def gemm_kernels(kernels: Sequence) -> list:
    """The profiled launches that are the GEMM (the filter's matches, minus anything that
    looks like the flush or the spin, should the filter ever let one through)."""
    pattern = re.compile(GEMM_KERNEL_REGEX)
    return [k for k in kernels if pattern.search(k.name) and not _NOT_A_GEMM.search(k.name)]


def explain(
    ratio: float,
    timer_sm_mhz: tuple | None,
    ncu_sm_mhz: float | None,
    throttled: bool,
    tolerance: float = TOLERANCE,
) -> list[str]:
    """Plain-words reasons for the gap between the two figures, from the clocks both saw."""
    notes = []
    if throttled:
        notes.append(
            "the timer's clocks moved or the driver slowed them (power cap or thermal) during "
            "the run: its samples are not from one clock"
        )
    if timer_sm_mhz and ncu_sm_mhz:
        timer_low, timer_high = timer_sm_mhz
        if ncu_sm_mhz > (1 + CLOCK_GAP) * timer_low:
            notes.append(
                f"ncu's isolated launches ran at {ncu_sm_mhz:.0f} MHz, the timer's back-to-back "
                f"calls as low as {timer_low:.0f} MHz: a clock gap of "
                f"{100 * (ncu_sm_mhz / timer_low - 1):.0f} % makes the timer slower"
            )
        elif ncu_sm_mhz < (1 - CLOCK_GAP) * timer_high:
            notes.append(
                f"ncu's launches ran at {ncu_sm_mhz:.0f} MHz, below the timer's {timer_high:.0f} "
                "MHz: the clock rose less in ncu's short isolated launches"
            )
    if abs(ratio - 1.0) > tolerance and not notes:
        notes.append(
            "no clock difference explains the gap: look for extra kernels inside the timed "
            "call (a split-K reduction, a workspace memset) or for another process on the GPU"
        )
    return notes


def _gemm_call(dtype: str, size: int):
    """torch.mm (the registry's cuBLAS baseline) and its inputs at size^3, seed 0."""
    from kernelab.profiling.session import check_implementation_request

    impl, op, shape, dtype = check_implementation_request(
        IMPLEMENTATION, {"m": size, "n": size, "k": size}, dtype
    )
    return impl.build(), op.make_inputs(shape, dtype, seed=0, device="cuda")


def time_gemm(
    dtype: str = DEFAULT_DTYPE,
    size: int = DEFAULT_SIZE,
    *,
    max_time_s: float = 2.0,
    min_samples: int = 10,
    max_samples: int = 10_000,
):
    """The timer's cold-mode Timing of torch.mm at size^3 (needs a GPU)."""
    import torch

    from kernelab.harness.timing import benchmark

    if not torch.cuda.is_available():
        raise NoGPUError("the timer cross-check needs a CUDA GPU; none found")
    fn, inputs = _gemm_call(dtype, size)
    return benchmark(
        lambda: fn(*inputs),
        mode="cold",
        min_samples=min_samples,
        max_samples=max_samples,
        max_time_s=max_time_s,
    )


def _release_cached_memory() -> None:
    import torch

    torch.cuda.empty_cache()


def child_command(dtype: str, size: int, launches: int) -> list[str]:
    """The program ncu runs: the same timer call, for `launches` timed samples."""
    return [
        sys.executable,
        "-m",
        "kernelab.profiling.crosscheck",
        "--dtype",
        dtype,
        "--size",
        str(size),
        "--samples",
        str(launches),
    ]


def profile_gemm(
    dtype: str = DEFAULT_DTYPE,
    size: int = DEFAULT_SIZE,
    *,
    launches: int = DEFAULT_LAUNCHES,
    report_path=None,
    timeout_s: float | None = 600.0,
):
    """ncu's view of the first `launches` GEMM kernels the timer times: a ProfileRun."""
    from kernelab.profiling.session import default_report_path, run_command

    return run_command(
        child_command(dtype, size, launches),
        kernel_regex=GEMM_KERNEL_REGEX,
        nvtx_range=TIMER_RANGE + "/",
        launch_count=launches,
        sections=("LaunchStats",),  # launch geometry only: the time needs no section
        metrics=(DURATION, SM_CYCLES_PER_SECOND),
        out_path=report_path or default_report_path(f"crosscheck_mm_{dtype}_{size}"),
        timeout_s=timeout_s,
    )


def crosscheck(
    dtype: str = DEFAULT_DTYPE,
    size: int = DEFAULT_SIZE,
    *,
    launches: int = DEFAULT_LAUNCHES,
    max_time_s: float = 2.0,
    tolerance: float = TOLERANCE,
    report_path=None,
    progress: Callable[[str], None] = lambda _: None,
) -> CrossCheck:
    """Time torch.mm at size^3 with the harness, profile the same calls under ncu, compare."""
    if size <= 0 or launches <= 0:
        raise KernelabError("the cross-check needs a positive size and launch count")
    progress(f"timing torch.mm {dtype} {size}^3 (cold L2)")
    timing = time_gemm(dtype, size, max_time_s=max_time_s)
    _release_cached_memory()  # the inputs are gone; the ncu child needs the memory more
    progress(f"profiling the same calls under ncu ({launches} launches)")
    run = profile_gemm(dtype, size, launches=launches, report_path=report_path)
    kernels = gemm_kernels(run.kernels)
    durations = [k.duration_ns / 1e6 for k in kernels if k.duration_ns]
    ncu_ms, ratio, agree = compare(timing.median_ms, durations, tolerance)
    clocks = [k.metric(SM_CYCLES_PER_SECOND) for k in kernels]
    clocks = [c / 1e6 for c in clocks if c]
    ncu_mhz = statistics.median(clocks) if clocks else None
    low, high = timing.clocks.get("sm_mhz_min"), timing.clocks.get("sm_mhz_max")
    timer_mhz = (low, high) if low and high else None
    return CrossCheck(
        dtype=dtype,
        size=size,
        timer_median_ms=timing.median_ms,
        ncu_durations_ms=durations,
        ncu_median_ms=ncu_ms,
        ratio=ratio,
        tolerance=tolerance,
        agree=agree,
        kernel=kernels[0].name if kernels else None,
        timer_sm_mhz=timer_mhz,
        ncu_sm_mhz=ncu_mhz,
        timer={k: v for k, v in timing.to_dict().items() if k != "samples_ms"}
        | {"samples": len(timing.samples_ms)},
        report=str(run.report_path),
        notes=explain(ratio, timer_mhz, ncu_mhz, timing.throttled, tolerance),
    )


@one_line_failures
def main(argv: list[str] | None = None) -> int:
    """The child ncu runs: the timer on torch.mm for a few samples; its figures are thrown
    away (ncu's replays slow every profiled call), only the kernels matter."""
    parser = argparse.ArgumentParser(prog="python -m kernelab.profiling.crosscheck")
    parser.add_argument("--dtype", default=DEFAULT_DTYPE)
    parser.add_argument("--size", type=int, default=DEFAULT_SIZE)
    parser.add_argument("--samples", type=int, default=DEFAULT_LAUNCHES)
    args = parser.parse_args(argv)
    if args.size <= 0 or args.samples <= 0:
        raise KernelabError("--size and --samples must be positive")
    time_gemm(
        args.dtype, args.size, max_time_s=5.0, min_samples=args.samples, max_samples=args.samples
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
