"""The timeline of a whole workload: every kernel, where the GPU idles, the hot kernels.

    capture.py   run a callable or a script under torch.profiler, after a warm-up
    trace.py     read a Chrome/Perfetto trace from torch.profiler into kernel events
    nsys.py      read `nsys stats` CSV exports instead (untested against a real nsys run)
    classify.py  kernel or CPU op name -> gemm, attention, normalization, ...
    summary.py   top kernels, busy time and idle gaps, the launch-bound verdict, roofline
    drill.py     Nsight Compute on the top kernels of a script, with kernelab's diagnosis
    example.py   a small transformer block at decode and prefill shapes, and in a CUDA graph

A workload script marks its steps by calling `kernelab.timeline.step()` once per iteration
(a no-op when no timeline is being captured); a script that never calls it is profiled as a
whole, one run per step.
"""

from __future__ import annotations


def step() -> None:
    """Mark the end of one step of the workload (an iteration, a decode step).

    Free to call anywhere: outside `kernelab timeline` it does nothing.
    """
    from kernelab.timeline import capture

    capture.mark_step()


__all__ = ["step"]
