"""An op walked over its batch m: one placement per m, and the m where it crosses the ridge.

A decode GEMV or skinny GEMM reads its weight W[n, k] once whatever m is, and does 2 m n k
FLOPs: its intensity grows with m until the x and y traffic (m k + m n elements) catches up.
So it sits on the memory roof at small m and turns compute-bound at the first m whose
intensity reaches the ridge, or never, when the intensity levels off below it.

The crossing is found from the cost model itself (doubling, then bisection on m), not from
a closed form, so every op whose cost takes an m (gemm, gemv, the quantized GEMVs) is walked
the same way; it assumes the intensity does not fall as m grows, which holds for each of them
(more rows of x and y against the same W). ops/gemv/roofline_walk.py has the closed form for
the batched GEMV, which tests/roofline checks this against.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from kernelab.roofline.costs import OpCost
from kernelab.roofline.model import Ceilings, Placement, place

# The largest m the crossing is searched up to: far past any batch a decode step or a
# "skinny" GEMM has; an op still memory-bound there levels off below the ridge.
SEARCH_MAX_M = 1 << 30


@dataclass(frozen=True)
class Walk:
    points: list[Placement]  # one per m, in increasing m
    crossover_m: int | None  # the smallest m placed compute-bound; None: none up to the search
    crossover_note: str  # the crossing in words (or why there is none)

    def bound_change(self) -> str:
        """Where the listed m turn from memory- to compute-bound, in words."""
        memory = [p.shape["m"] for p in self.points if p.bound == "memory"]
        compute = [p.shape["m"] for p in self.points if p.bound == "compute"]
        if not compute:
            return f"memory-bound at every m listed (up to {memory[-1]})"
        if not memory:
            return f"compute-bound at every m listed (from {compute[0]})"
        return f"memory-bound up to m = {memory[-1]}, compute-bound from m = {compute[0]}"


def walk(
    cost_at: Callable[[int], OpCost],
    batches: Sequence[int],
    ceilings: Ceilings,
    *,
    math_mode: str | None = None,
    unlisted_rate_by_fp32: bool = False,
    times_ms: dict[int, float] | None = None,
    search_max: int = SEARCH_MAX_M,
) -> Walk:
    """Place cost_at(m) for each m of `batches` (sorted, each once), each judged against its
    measured time where `times_ms` has one, and find the crossing."""

    def placed(m: int, time_ms: float | None = None) -> Placement:
        return place(cost_at(m), ceilings, math_mode=math_mode, time_ms=time_ms,
                     unlisted_rate_by_fp32=unlisted_rate_by_fp32)  # fmt: skip

    points = [placed(m, (times_ms or {}).get(m)) for m in sorted(set(batches))]
    first = points[0]
    if first.ridge is None:
        why = ("the op has no FLOPs" if first.flops == 0 else
               f"{first.gpu} lists no {first.math_dtype} rate")  # fmt: skip
        return Walk(points, None, f"no ridge to cross: {why}")
    crossing = crossover(placed, search_max)
    if crossing is None:
        note = (f"never crosses the {first.math_dtype} ridge of {first.ridge:.4g} FLOP/B: "
                f"memory-bound at every m up to 2^{search_max.bit_length() - 1}, where its "
                f"intensity levels off below the ridge")  # fmt: skip
    else:
        note = (f"crosses the {first.math_dtype} ridge of {first.ridge:.4g} FLOP/B at m = "
                f"{crossing}: memory-bound below it, compute-bound from it")  # fmt: skip
    return Walk(points, crossing, note)


def crossover(placed: Callable[[int], Placement], search_max: int = SEARCH_MAX_M) -> int | None:
    """The smallest m in 1..search_max whose placement is compute-bound, or None. Doubling
    brackets it, bisection narrows it: about 2 log2(m*) placements."""
    if placed(1).bound == "compute":
        return 1
    low, high = 1, 2  # low memory-bound, high to be tried
    while placed(high).bound != "compute":
        if high >= search_max:
            return None
        low, high = high, min(2 * high, search_max)
    while high - low > 1:  # low memory-bound, high compute-bound
        middle = (low + high) // 2
        if placed(middle).bound == "compute":
            high = middle
        else:
            low = middle
    return high
