"""Statistics of timing samples: the summary every record carries and the stopping rule.

Definitions (all times in ms):
  quantile(q)  linear interpolation between closest ranks (numpy's default, "type 7")
  median       quantile(0.5); the figure kernelab reports, robust to the odd slow call
  p20, p80     quantile(0.2), quantile(0.8): the band most calls fall in
  iqr          quantile(0.75) - quantile(0.25)
  std          sample standard deviation (n - 1 in the denominator); 0 for one sample
  rse          relative standard error of the mean: std / sqrt(n) / mean
  rel_noise    iqr / median: the spread of one call relative to the typical call. It ignores
               the slowest and fastest quarter, so one preempted call does not inflate it;
               compare uses it to decide what difference is within the noise.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Summary:
    n: int
    median: float
    mean: float
    std: float
    p20: float
    p80: float
    iqr: float
    min: float
    max: float
    rse: float
    rel_noise: float

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> Summary:
        return cls(**{name: data[name] for name in cls.__dataclass_fields__})


def quantile(sorted_samples: Sequence[float], q: float) -> float:
    """The q-quantile of already sorted samples, linearly interpolated between ranks."""
    if not sorted_samples:
        raise ValueError("quantile of no samples")
    position = q * (len(sorted_samples) - 1)
    lower = math.floor(position)
    upper = min(lower + 1, len(sorted_samples) - 1)
    weight = position - lower
    return sorted_samples[lower] * (1 - weight) + sorted_samples[upper] * weight


def _std(samples: Sequence[float], mean: float) -> float:
    if len(samples) < 2:
        return 0.0
    return math.sqrt(sum((x - mean) ** 2 for x in samples) / (len(samples) - 1))


def relative_standard_error(samples: Sequence[float]) -> float:
    """std / sqrt(n) / mean: how far the mean is likely off, as a fraction of it.

    Infinite for fewer than two samples (nothing is known about the spread yet) and for a
    zero mean.
    """
    n = len(samples)
    if n < 2:
        return math.inf
    mean = sum(samples) / n
    if mean == 0:
        return math.inf
    return _std(samples, mean) / math.sqrt(n) / mean


def summarize(samples_ms: Sequence[float]) -> Summary:
    """The Summary of one or more samples (ValueError for none)."""
    if not samples_ms:
        raise ValueError("no samples to summarize")
    ordered = sorted(float(x) for x in samples_ms)
    n = len(ordered)
    mean = sum(ordered) / n
    median = quantile(ordered, 0.5)
    iqr = quantile(ordered, 0.75) - quantile(ordered, 0.25)
    return Summary(
        n=n,
        median=median,
        mean=mean,
        std=_std(ordered, mean),
        p20=quantile(ordered, 0.2),
        p80=quantile(ordered, 0.8),
        iqr=iqr,
        min=ordered[0],
        max=ordered[-1],
        rse=relative_standard_error(ordered),
        rel_noise=iqr / median if median > 0 else math.inf,
    )


def should_stop(
    samples: Sequence[float],
    *,
    min_samples: int,
    target_rse: float,
    elapsed_s: float,
    max_time_s: float,
    max_samples: int | None = None,
) -> tuple[bool, str]:
    """Whether a measurement loop has enough samples, and why.

    Never stops below `min_samples`. Past it, stops at `max_samples`, or once the mean is
    known to within `target_rse` ("converged"), or once `max_time_s` of wall time is spent
    ("time cap"), whichever comes first. The reason goes into the record, so a noisy run that
    hit the time cap is told apart from one that converged.
    """
    n = len(samples)
    if n < min_samples:
        return False, "below min_samples"
    if max_samples is not None and n >= max_samples:
        return True, "max_samples"
    if relative_standard_error(samples) <= target_rse:
        return True, "converged"
    if elapsed_s >= max_time_s:
        return True, "time cap"
    return False, "running"
