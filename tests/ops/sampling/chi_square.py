"""Pearson's chi-square goodness of fit of drawn tokens against exact probabilities, with the
survival function of the chi-square distribution from the regularised upper incomplete gamma
function Q(dof / 2, stat / 2) (series below a + 1, Lentz's continued fraction above, as in
Numerical Recipes' gammq): scipy is not a dependency."""

from __future__ import annotations

import math

MIN_EXPECTED = 5.0  # Cochran's rule: a cell expecting fewer draws is merged


def _lower_series(a: float, x: float) -> float:
    term = total = 1.0 / a
    n = a
    for _ in range(10000):
        n += 1.0
        term *= x / n
        total += term
        if abs(term) < abs(total) * 1e-15:
            break
    return total * math.exp(-x + a * math.log(x) - math.lgamma(a))


def _upper_fraction(a: float, x: float) -> float:
    tiny = 1e-300
    b = x + 1.0 - a
    c, d = 1.0 / tiny, 1.0 / b
    h = d
    for i in range(1, 10000):
        an = -i * (i - a)
        b += 2.0
        d = an * d + b
        d = tiny if abs(d) < tiny else d
        c = b + an / c
        c = tiny if abs(c) < tiny else c
        d = 1.0 / d
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-15:
            break
    return math.exp(-x + a * math.log(x) - math.lgamma(a)) * h


def gamma_q(a: float, x: float) -> float:
    """The regularised upper incomplete gamma function Q(a, x) = Gamma(a, x) / Gamma(a)."""
    if x <= 0.0:
        return 1.0
    if x < a + 1.0:
        return 1.0 - _lower_series(a, x)
    return _upper_fraction(a, x)


def chi_square_sf(stat: float, dof: int) -> float:
    """P(X >= stat) for X ~ chi-square with dof degrees of freedom."""
    return gamma_q(dof / 2.0, stat / 2.0)


def goodness_of_fit(tokens, probs) -> tuple[float, int, float]:
    """(statistic, degrees of freedom, p-value) of the drawn token ids against probs[vocab]
    (float64, summing to 1). A draw outside the support (prob 0) gives p-value 0."""
    import torch

    tokens = tokens.reshape(-1).cpu()
    probs = probs.reshape(-1).cpu().to(torch.float64)
    draws = tokens.numel()
    if bool(((tokens < 0) | (tokens >= probs.numel())).any()):
        return math.inf, 0, 0.0
    counts = torch.bincount(tokens, minlength=probs.numel()).to(torch.float64)
    if bool((counts[probs == 0] > 0).any()):
        return math.inf, 0, 0.0
    expected = probs * draws
    big = expected >= MIN_EXPECTED
    small = (~big) & (probs > 0)
    observed_cells = counts[big].tolist()
    expected_cells = expected[big].tolist()
    if bool(small.any()):
        observed_cells.append(float(counts[small].sum()))
        expected_cells.append(float(expected[small].sum()))
    if len(expected_cells) < 2:
        return 0.0, 0, 1.0
    stat = sum((o - e) ** 2 / e for o, e in zip(observed_cells, expected_cells, strict=True))
    dof = len(expected_cells) - 1
    return stat, dof, chi_square_sf(stat, dof)
