"""The launch lens: what a call costs the host, beside what it costs the device.

The timer (harness/timing.py) reports device time: it queues calls behind a spin kernel, so
the Python launch path never shows. A user calling the kernel from PyTorch pays that path on
every call, and when it is longer than the kernel the GPU idles between calls: the call is
launch-bound at that size, and no kernel tuning will help (a CUDA graph, a leaner launcher or
a fused op will). A small softmax is a few microseconds of GPU work; through Triton's own
launcher its call costs the host tens of microseconds more.

Per call, over back-to-back calls of `fn` with nothing in between:
  host_us  the host time to return from the call (the launch path; the GPU runs behind it),
  wall_us  the whole loop, ending in one synchronise, divided by the calls: what a user's
           loop sees, about max(host, device) per call once the queue is primed.
The loop is short enough (CALLS_MAX calls) that the launch queue never fills and pushes back.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

CALLS_MAX = 300
CALLS_MIN = 10
WARMUP_CALLS = 5
LOOP_BUDGET_MS = 200.0  # device time one measurement may queue


@dataclass(frozen=True)
class HostCost:
    calls: int
    host_us: float  # host time per call
    wall_us: float  # wall time per call over the loop, ending in one synchronise
    device_us: float  # the timer's median device time per call, for the verdict

    @property
    def launch_bound(self) -> bool:
        return is_launch_bound(self.host_us, self.device_us)

    def to_dict(self) -> dict:
        return {**asdict(self), "launch_bound": self.launch_bound}


def is_launch_bound(host_us: float, device_us: float) -> bool:
    """A call is launch-bound when the host needs longer to issue it than the GPU to run it:
    back to back, the GPU then waits for the host between calls."""
    return host_us > device_us


def calls_for(device_ms: float) -> int:
    """Calls in one loop: CALLS_MAX, fewer when they would queue over LOOP_BUDGET_MS of work."""
    if device_ms <= 0:
        return CALLS_MAX
    return max(CALLS_MIN, min(CALLS_MAX, int(LOOP_BUDGET_MS / device_ms)))


def measure_host_cost(
    fn: Callable[[], object],
    device_ms: float,
    *,
    synchronize: Callable[[], None] | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> HostCost:
    """Host and wall time per call of `fn` (see the module docstring); `device_ms` is the
    timer's median for the same call. `synchronize` waits for the device (torch's by default)."""
    if synchronize is None:
        import torch

        synchronize = torch.cuda.synchronize
    for _ in range(WARMUP_CALLS):
        fn()
    synchronize()
    calls = calls_for(device_ms)
    start = clock()
    for _ in range(calls):
        fn()
    issued = clock()
    synchronize()
    done = clock()
    return HostCost(
        calls=calls,
        host_us=(issued - start) / calls * 1e6,
        wall_us=(done - start) / calls * 1e6,
        device_us=device_ms * 1e3,
    )
