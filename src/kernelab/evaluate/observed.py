"""The judge's own bound on a time the worker reports.

The per-call times come from inside the solution's process, where the solution can patch the
clock, the events, or the loop that reads them. What it cannot change is how long the judge
waited: the judge sends "make N calls" and reads the reply on its own clock. That wait holds
the N calls plus work that is not the solution's: the loop's own steps (loading each input
set, the NaN fill, the L2 flush, the synchronisations, the events) and sending the sampled
outputs back. The judge measures those itself, in its own process (the same loop around a
call that does nothing, and the encoding of outputs of the same size), allows OVERHEAD_MARGIN
times them plus SLACK_MS for scheduling noise, and divides the rest by N:

    floor = max(0, wall - OVERHEAD_MARGIN * (loop + 2 * encode) - SLACK_MS) / N

(2 * encode: the worker encodes, the judge decodes.) The floor errs low, so an honest
solution never meets it; a worker that claims a mean time below it is overruled, and one
that claims less than the floor / LIE_FACTOR is lying, not noisy: the verdict is "suspect".
"""

from __future__ import annotations

import time

OVERHEAD_MARGIN = 1.5
SLACK_MS = 5.0
LIE_FACTOR = 1.5
NULL_CALLS_MAX = 50  # the loop's own cost is measured on this many calls and scaled


def floor_ms(wall_ms: float, calls: int, loop_ms: float, encode_ms: float) -> float:
    spare = wall_ms - OVERHEAD_MARGIN * (loop_ms + 2 * encode_ms) - SLACK_MS
    return max(0.0, spare) / max(1, calls)


def loop_cost_ms(pool: list, *, buffers: set[str], calls: int, mode: str) -> float:
    """The judge's wall time for the timed loop's own work over `calls` calls."""
    from kernelab.evaluate.timed_calls import run_calls

    measured = min(calls, NULL_CALLS_MAX)
    begin = time.perf_counter()
    run_calls(lambda data: None, pool, buffers=buffers, calls=measured, sampled=set(), mode=mode)
    return (time.perf_counter() - begin) * 1e3 * calls / max(1, measured)


def encode_cost_ms(outputs: list) -> float:
    from kernelab.evaluate.channel import encode

    begin = time.perf_counter()
    encode(outputs)
    return (time.perf_counter() - begin) * 1e3


def bound(samples_ms: list[float], floor: float) -> tuple[list[float], str | None]:
    """The samples, scaled up so that their mean is at least the floor, and a warning when
    they had to be (None when the worker's figures stand)."""
    mean = sum(samples_ms) / len(samples_ms)
    if mean >= floor or floor <= 0:
        return samples_ms, None
    factor = floor / max(mean, 1e-12)
    scaled = [sample * factor for sample in samples_ms]
    warning = (
        f"the judge observed at least {floor:.4g} ms per call (its own wall clock around the "
        f"batch, less the loop's overhead); the worker reported {mean:.4g} ms: reported times "
        "are scaled up to the judge's floor"
    )
    if floor > LIE_FACTOR * mean:
        warning += " (far below what the judge saw: the timing was tampered with)"
    return scaled, warning
