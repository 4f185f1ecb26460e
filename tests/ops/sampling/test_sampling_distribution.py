"""Are the drawn tokens distributed as the filtered distribution says? Pearson's chi-square of
many draws (fixed seeds, so the verdict is stable) against the float64 reference
probabilities, on the CPU interpreter at a small vocabulary; known-wrong samplers (one that
ignores top-p, one with the wrong temperature on the same support) must be rejected."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
from chi_square import chi_square_sf, goodness_of_fit  # noqa: E402
from triton_on_cpu import DEVICE, kernel_module  # noqa: E402

pytest.importorskip("triton")

from kernelab.spec.sampling import reference_probs_row  # noqa: E402

ALPHA = 1e-3  # a correct sampler fails one seed in a thousand; the seeds here are fixed
VOCAB = 600  # three interpreter tiles of 256


@pytest.fixture(scope="module")
def sampling():
    return kernel_module("sampling")


def _row(seed: int, vocab: int, scale: float):
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(vocab, generator=generator) * scale


def _draws(fn, row, draws: int, seed: int, **params):
    return fn(row.to(DEVICE).expand(draws, -1).contiguous(), seed=seed, **params).cpu()


def _margin(row, temperature, top_p, min_p) -> float:
    """How far top_p and min_p lie from the nearest boundary they could flip (float64)."""
    e = torch.exp((row.double() - row.max()) / temperature)
    cum = torch.cumsum(e.sort(descending=True).values, 0) / e.sum()
    return min(float((cum - top_p).abs().min()), float((e / min_p).log().abs().min()))


@pytest.mark.parametrize(
    ("stat", "dof", "expected"),
    [
        (3.841458820694124, 1, 0.05),
        (18.307038053275146, 10, 0.05),
        (124.342113404, 100, 0.05),
        (0.0, 4, 1.0),
        (50.0, 3, 7.97e-11),
    ],  # fmt: skip
)
def test_the_chi_square_tail_matches_known_quantiles(stat, dof, expected):
    assert chi_square_sf(stat, dof) == pytest.approx(expected, rel=1e-3)


def test_the_fit_passes_exact_draws_and_fails_outside_the_support():
    probs = torch.softmax(_row(1, 50, 1.0).double(), 0)
    generator = torch.Generator().manual_seed(2)
    tokens = torch.multinomial(probs, 4000, replacement=True, generator=generator)
    assert goodness_of_fit(tokens, probs)[2] > ALPHA
    probs[7] = 0.0
    assert goodness_of_fit(torch.tensor([7, 1, 2]), probs / probs.sum())[2] == 0.0


@pytest.mark.slow
def test_top_p_and_min_p_draws_fit_the_exact_probabilities(sampling):
    row, temperature, top_p, min_p = _row(3, VOCAB, 3.0), 0.8, 0.6, 0.004
    assert _margin(row, temperature, top_p, min_p) > 1e-3  # no boundary within rounding
    probs = reference_probs_row(row, temperature, 0, top_p, min_p)
    assert 5 <= int((probs > 0).sum()) < VOCAB  # the filters cut, and leave a choice
    tokens = _draws(sampling.sample, row, 600, 7, temperature=temperature, top_p=top_p,
                    min_p=min_p)  # fmt: skip
    stat, dof, p_value = goodness_of_fit(tokens, probs)
    assert p_value > ALPHA, (stat, dof)


@pytest.mark.slow
def test_top_p_draws_fit_the_exact_probabilities(sampling):
    """top-p alone: the first candidate comes from the setup pass's reservoir over the tiles
    (threshold._max_and_mass), then the check and the redraws."""
    row, temperature, top_p = _row(5, VOCAB, 2.0), 0.9, 0.65
    assert _margin(row, temperature, top_p, 1e-30) > 1e-3
    probs = reference_probs_row(row, temperature, 0, top_p, 0.0)
    assert 5 <= int((probs > 0).sum()) < VOCAB
    assert len({int(i) // 256 for i in probs.nonzero()}) >= 2  # the nucleus spans tiles
    tokens = _draws(sampling.sample, row, 600, 11, temperature=temperature, top_p=top_p)
    stat, dof, p_value = goodness_of_fit(tokens, probs)
    assert p_value > ALPHA, (stat, dof)


def test_a_sampler_that_ignores_top_p_is_rejected(sampling):
    row, temperature, top_p = _row(3, VOCAB, 3.0), 0.8, 0.6
    probs = reference_probs_row(row, temperature, 0, top_p, 0.0)
    wrong = _draws(sampling.sample, row, 100, 7, temperature=temperature)
    assert goodness_of_fit(wrong, probs)[2] == 0.0  # draws outside the nucleus


@pytest.mark.slow
def test_the_wrong_temperature_on_the_same_support_is_rejected(sampling):
    row = torch.full((VOCAB,), float("-inf"))
    row[::15] = _row(4, VOCAB, 1.5)[::15]  # 40 drawable tokens at any temperature
    probs = reference_probs_row(row, 1.0, 0, 1.0, 0.0)
    right = _draws(sampling.sample, row, 500, 9, temperature=1.0)
    # 1,000 draws: at temperature 1.4 the chi-square's noncentrality is 0.118 a draw, so 500
    # draws reach p < 1e-6 only 79 % of the time (simulated), 1,000 every time
    wrong = _draws(sampling.sample, row, 1000, 9, temperature=1.4)
    assert goodness_of_fit(right, probs)[2] > ALPHA
    assert goodness_of_fit(wrong, probs)[2] < 1e-6
