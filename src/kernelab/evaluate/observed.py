"""The judge's own bound on a time the worker reports.

The per-call times come from inside the solution's process, where the solution can patch the
clock, the events, or the loop that reads them. What it cannot change is how long the judge
waited: the judge sends "make N calls" and reads the short reply (the checked outputs come
in a later one) on its own clock. That wait holds the N calls plus the loop's own steps
(making or loading each input set, with a seed a round trip to the judge; the NaN fill, the
L2 flush, the synchronisations, the events, the copy and fingerprint of each output). The
judge measures those itself, in its own process and before any worker exists (the same
loop around a call that does nothing, so nothing a solution leaves running inflates it),
allows OVERHEAD_MARGIN times them, gives up a further (1 - WALL_SHARE) of the wall time and
SLACK_MS to scheduling noise (a shared machine, a garbage collection, the pipes), and
divides the rest by N:

    floor = max(0, WALL_SHARE * wall - OVERHEAD_MARGIN * loop - SLACK_MS) / N

The floor errs low, so an honest solution should never meet it: what it guarantees is that a solution's reported time is at
least about WALL_SHARE of what the judge saw, less overheads; small lies (a few percent, or a
few ms in all) go through. A worker whose mean time is below the floor is overruled (its
samples are scaled up to it); one that also claims less than the floor / LIE_FACTOR, with
more than LIE_MIN_MS unexplained in all, is lying rather than noisy: "suspect".
"""

from __future__ import annotations

import os
import statistics
import threading
import time

from kernelab.evaluate.timed_calls import Fresh, Rotation, fingerprint, run_calls

OVERHEAD_MARGIN = 1.5
WALL_SHARE = 0.9
SLACK_MS = 20.0
LIE_FACTOR = 1.5
LIE_MIN_MS = 20.0
NO_TIME_MS = 1e-6  # what a call reported as taking no time stands at, without a floor
NULL_CALLS_MAX = 50  # the loop's own cost is measured on this many calls and scaled
ROUND_TRIPS = 50  # requests for a seed timed, for the loop's cost with seeds streamed


def floor_ms(wall_ms: float, calls: int, loop_ms: float) -> float:
    spare = WALL_SHARE * wall_ms - OVERHEAD_MARGIN * loop_ms - SLACK_MS
    return max(0.0, spare) / max(1, calls)


def loop_cost_ms(
    sets: Rotation | Fresh,
    *,
    buffers: set[str],
    calls: int,
    mode: str,
    output=None,
    kept_calls: int | None = None,
) -> float:
    """The judge's wall time for the timed loop's own work over `calls` calls: the same input
    sets (made or rotated, as the worker's were), a call that returns `output` (the size of the
    real one) at once, its copy kept and fingerprinted. At most NULL_CALLS_MAX calls are run,
    and at most `kept_calls` (the outputs a batch may keep: the memory plan's), so that the
    kept copies fit where the worker's would; the time is scaled to `calls`."""
    measured = min(calls, NULL_CALLS_MAX, max(1, kept_calls or NULL_CALLS_MAX))
    begin = time.perf_counter()
    run_calls(lambda data: output, sets, buffers=buffers, calls=measured, mode=mode)
    return (time.perf_counter() - begin) * 1e3 * calls / max(1, measured)


def round_trip_ms(output, trips: int = ROUND_TRIPS) -> float:
    """The judge's wall time for one request for a seed and its answer (timed_calls.Streamed),
    over a pair of pipes to a thread of its own: the fingerprint of `output` one way, a seed
    the other, as the worker and the judge send them. The median of `trips`."""
    from kernelab.evaluate.channel import receive, send

    printed = fingerprint(output)
    to_echo, from_judge = os.pipe()
    to_judge, from_echo = os.pipe()

    def echo():
        for _ in range(trips):
            receive(to_echo, trusted=False)
            send(from_echo, {"seed": 2**31 - 1})

    thread = threading.Thread(target=echo, daemon=True)
    thread.start()
    samples = []
    try:
        for index in range(trips):
            begin = time.perf_counter()
            send(from_judge, {"need": index, "print": printed})
            receive(to_judge, trusted=False)
            samples.append((time.perf_counter() - begin) * 1e3)
    finally:
        thread.join(timeout=5)
        for fd in (to_echo, from_judge, to_judge, from_echo):
            os.close(fd)
    return statistics.median(samples)


def bound(samples_ms: list[float], floor: float) -> tuple[list[float], str | None]:
    """The samples, scaled up so that their mean is at least the floor, and a warning when
    they had to be (None when the worker's figures stand)."""
    mean = sum(samples_ms) / len(samples_ms)
    if mean <= 0:  # no call takes no time: every sample stands at the floor, or at a nanosecond
        stand_in = max(floor, NO_TIME_MS)
        return [stand_in] * len(samples_ms), (
            f"the worker reported no time at all for its calls, which no call takes: the "
            f"timing was tampered with; each call stands at {stand_in:.4g} ms (the judge's "
            "floor)"
        )
    if mean >= floor or floor <= 0:
        return samples_ms, None
    factor = floor / max(mean, 1e-12)
    scaled = [sample * factor for sample in samples_ms]
    warning = (
        f"the judge observed at least {floor:.4g} ms per call (its own wall clock around the "
        f"batch, less the loop's overhead); the worker reported {mean:.4g} ms: reported times "
        "are scaled up to the judge's floor"
    )
    if floor > LIE_FACTOR * mean and (floor - mean) * len(samples_ms) > LIE_MIN_MS:
        warning += " (far below what the judge saw: the timing was tampered with)"
    return scaled, warning
