"""Two implementations timed in alternation, call by call: a ratio the card's drift cannot move.

Under a power cap the clocks of a GPU wander by several percent over seconds (on the H200 a
cuBLAS GEMM at 4096^3 moved 3.5 % between two timings a few seconds apart). Two medians taken
one after the other carry that drift into their ratio, and even rounds of alternating
medians (ladders/hgemm/ladder.time_rounds) leave a spread of +/-4 % per round. Here
each sample is a *pair*: one call of the reference and one of the candidate, back to back,
each with its own events (and in cold mode its own L2 flush before it). Both calls of a pair
run within a millisecond of each other, at the same clocks and temperature, so the pair's
ratio (reference time / candidate time) is free of the drift; the reported figure is the
median of those ratios.

The order inside a pair alternates (reference first, then candidate first: A B, B A, ...),
so whatever the first call of a pair pays that the second does not (a cooler card, an
emptier queue) falls on both sides equally. Pairs are queued in chunks behind the same
stream-holding spin as kernelab.harness.timing, so host launch time never shows up as idle
time inside an event bracket.

Only the cold and hot modes exist here: a graph replay is many calls, not one.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from kernelab.errors import KernelabError, NoGPUError, unknown
from kernelab.harness import stats

PAIRED_MODES = ("cold", "hot")
CHUNK_TARGET_MS = 50.0  # work queued between device synchronisations, as in timing.py


def call_order(pair_index: int) -> tuple[str, str]:
    """Which implementation goes first in pair `pair_index`: alternately the reference and
    the candidate (A B, B A, A B, ...)."""
    return ("reference", "candidate") if pair_index % 2 == 0 else ("candidate", "reference")


@dataclass
class PairedTiming:
    reference_ms: list[float]  # one per pair, the reference's call
    candidate_ms: list[float]  # the candidate's call of the same pair
    mode: str
    stop_reason: str
    clocks: dict = field(default_factory=dict)
    throttled: bool = False
    warnings: list[str] = field(default_factory=list)

    @property
    def ratios(self) -> list[float]:
        """Per pair, reference time / candidate time: above 1 means the candidate is faster."""
        return [r / c for r, c in zip(self.reference_ms, self.candidate_ms, strict=True)]

    @property
    def pct_of_reference(self) -> float:
        """The candidate's speed as % of the reference's: 100 x the median per-pair ratio."""
        return 100.0 * stats.quantile(sorted(self.ratios), 0.5)

    @property
    def reference_median_ms(self) -> float:
        """The reference's median call time: with the bytes a call moves, its rate in these
        pairs (the candidate's is that rate times pct_of_reference / 100)."""
        return stats.quantile(sorted(self.reference_ms), 0.5)

    def ratio_band(self) -> tuple[float, float]:
        """The 20th and 80th percentile of the per-pair ratio, as % (the band of one pair)."""
        ordered = sorted(self.ratios)
        return 100.0 * stats.quantile(ordered, 0.2), 100.0 * stats.quantile(ordered, 0.8)

    def pct_interval(self, confidence: float = 0.95) -> tuple[float, float]:
        """A distribution-free confidence interval for the median ratio, as %: the order
        statistics whose ranks the binomial(n, 1/2) law puts around the median."""
        ordered = sorted(self.ratios)
        low, high = median_rank_interval(len(ordered), confidence)
        return 100.0 * ordered[low], 100.0 * ordered[high]

    def to_dict(self) -> dict:
        band = self.ratio_band()
        interval = self.pct_interval()
        return {
            "mode": self.mode,
            "pairs": len(self.ratios),
            "stop_reason": self.stop_reason,
            "pct_of_reference": self.pct_of_reference,
            "pct_p20": band[0], "pct_p80": band[1],
            "pct_ci95": list(interval),
            "pairs_ahead": sum(r >= 1.0 for r in self.ratios),
            "reference": stats.summarize(self.reference_ms).to_dict(),
            "candidate": stats.summarize(self.candidate_ms).to_dict(),
            "throttled": self.throttled,
            "clocks": dict(self.clocks),
            "warnings": list(self.warnings),
            "reference_ms": list(self.reference_ms),
            "candidate_ms": list(self.candidate_ms),
        }  # fmt: skip


def median_rank_interval(n: int, confidence: float = 0.95) -> tuple[int, int]:
    """0-based ranks (low, high) of n sorted samples whose range covers the median with at
    least `confidence`. With k the largest count for which P(Binomial(n, 1/2) < k) <=
    (1 - confidence) / 2, the 1-based order statistics k and n + 1 - k cover it with
    probability 1 - 2 P(Binomial < k). Below 6 samples no such k exists at 95 %: then the
    whole range, which covers it with less."""
    if n < 1:
        raise ValueError("an interval of no samples")
    tail = (1.0 - confidence) / 2.0
    below, k = 0.0, 0  # below = P(X < k)
    probability = 0.5**n  # P(X = k)
    while k < n // 2 and below + probability <= tail:
        below += probability
        k += 1
        probability *= (n - k + 1) / k
    return (k - 1, n - k) if k > 0 else (0, n - 1)


def compare(
    reference: Callable[[], object],
    candidate: Callable[[], object],
    *,
    mode: str = "cold",
    pairs: int = 200,
    max_time_s: float = 5.0,
    warmup_ms: float = 25.0,
    flush_bytes: int | None = None,
) -> PairedTiming:
    """Time `candidate` against `reference` (zero-argument callables that launch the work)
    in alternating pairs on the current CUDA device; stops after `pairs` pairs or
    `max_time_s`, whichever comes first (at least one chunk)."""
    if mode not in PAIRED_MODES:
        raise unknown("paired timing mode", mode, PAIRED_MODES)
    if pairs < 1 or max_time_s <= 0:
        raise KernelabError("pairs must be at least 1 and max_time_s positive")
    import torch

    if not torch.cuda.is_available():
        raise NoGPUError("paired timing needs a CUDA GPU; none found")
    from kernelab.harness import timing
    from kernelab.harness.gpu_clocks import ClockWatcher

    with timing.device_memory_guard():
        timing._warm_up(reference, torch, warmup_ms)
        timing._warm_up(candidate, torch, warmup_ms)
        ref_ms, ref_enqueue, ref_fenced = timing._probe(reference, torch)
        cand_ms, cand_enqueue, cand_fenced = timing._probe(candidate, torch)
        if ref_fenced or cand_fenced:
            raise KernelabError(
                "paired timing needs calls whose events cover their work; one of these "
                "returns while work it started is still running (time it with benchmark())"
            )
        flush = None
        if mode == "cold":
            if flush_bytes is None:
                l2 = getattr(torch.cuda.get_device_properties(torch.cuda.current_device()),
                             "L2_cache_size", 0)  # fmt: skip
                flush_bytes = timing.flush_size_bytes(l2)
            flush = torch.empty(max(1, flush_bytes // 4), dtype=torch.int32, device="cuda")
        calls = {"reference": reference, "candidate": candidate}
        hold = timing._Hold(torch, ref_enqueue + cand_enqueue)
        watcher = ClockWatcher(torch.cuda.current_device())
        watcher.poll(force=True)
        per_pair_ms = max(ref_ms + cand_ms, 1e-3)
        times: dict[str, list[float]] = {"reference": [], "candidate": []}
        start = time.perf_counter()
        reason = "pairs"
        while len(times["reference"]) < pairs:
            if time.perf_counter() - start > max_time_s:
                reason = "time cap"
                break
            k = max(1, min(pairs - len(times["reference"]),
                           int(CHUNK_TARGET_MS / per_pair_ms), timing.MAX_CHUNK // 2))  # fmt: skip
            first = len(times["reference"])
            brackets = hold.run(k, functools.partial(_enqueue_pairs, torch, calls, flush, first, k))
            for (name_a, a), (name_b, b) in brackets:
                times[name_a].append(a[0].elapsed_time(a[1]))
                times[name_b].append(b[0].elapsed_time(b[1]))
            watcher.poll()
        watcher.poll(force=True)
        clocks, throttled, clock_warnings = watcher.result()
    return PairedTiming(
        reference_ms=times["reference"],
        candidate_ms=times["candidate"],
        mode=mode,
        stop_reason=reason,
        clocks=clocks,
        throttled=throttled,
        warnings=clock_warnings,
    )


def _enqueue_pairs(torch, calls: dict, flush, first: int, k: int) -> Sequence[tuple]:
    """Queue pairs first .. first + k - 1: per call an optional flush (outside the events),
    a start event, the call, an end event. Returns ((name, events), (name, events)) per pair."""
    queued = []
    for index in range(first, first + k):
        pair = []
        for name in call_order(index):
            events = (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
            if flush is not None:
                flush.zero_()
            events[0].record()
            calls[name]()
            events[1].record()
            pair.append((name, events))
        queued.append(tuple(pair))
    return queued
