"""Sampling at the issue's shapes on a GPU (marked gpu): vocab 32000 / 128256 / 256000 (Llama 2,
Llama 3, Gemma) at batch 1, 16 and 64 in every dtype: the exact distribution against the
float64 reference, greedy = argmax, tokens inside the support, reproducible seeds, and the
chi-square fit of many draws of top-p, top-k + top-p + min-p and plain rows."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")
from chi_square import goodness_of_fit  # noqa: E402

from kernelab.spec.reference import OPS  # noqa: E402
from kernelab.spec.sampling import (  # noqa: E402
    reference_probs_row,
    safe_min_p,
    safe_top_p,
    sampling_reference,
)

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

VOCABS = (32000, 128256, 256000)
BATCHES = (1, 16, 64)
ALPHA = 1e-3


@pytest.fixture(scope="module")
def sampling():
    import kernelab.ops.sampling as module

    return module


def _inputs(batch, vocab, dtype, seed=0):
    return OPS["sampling_probs"].make_inputs({"batch": batch, "vocab": vocab}, dtype, seed, "cuda")


@pytest.mark.parametrize("dtype", ["fp32", "bf16", "fp16"])
@pytest.mark.parametrize("batch", BATCHES)
@pytest.mark.parametrize("vocab", VOCABS)
def test_probs_match_the_reference(sampling, vocab, batch, dtype):
    from kernelab.harness.check import check_implementation

    report = check_implementation(sampling.sampling_probs, "sampling_probs",
                                  {"batch": batch, "vocab": vocab}, dtype, trials=2,
                                  device="cuda")  # fmt: skip
    assert report.ok, report.message


@pytest.mark.parametrize("batch", BATCHES)
@pytest.mark.parametrize("vocab", VOCABS)
def test_tokens_lie_in_the_support_and_seeds_reproduce(sampling, vocab, batch):
    inputs = _inputs(batch, vocab, "bf16", seed=vocab + batch)
    ref = sampling_reference(*inputs)
    for seed in range(4):
        tokens = sampling.sample(*inputs, seed=seed)
        assert bool((ref.gather(1, tokens[:, None]) > 0).all()), seed
        assert torch.equal(tokens, sampling.sample(*inputs, seed=seed))
    greedy = sampling.sample(inputs[0], 0.0, seed=0)
    first_max = [int(torch.nonzero(r == r.max())[0]) for r in inputs[0].float()]
    assert greedy.tolist() == first_max


def test_different_seeds_draw_different_tokens(sampling):
    x = torch.randn(64, 128256, device="cuda")
    assert not torch.equal(sampling.sample(x, seed=1), sampling.sample(x, seed=2))


CASES = {  # temperature, top_k, top_p, min_p: p and min_p moved into the nearest wide gap
    "top-p near 0.9": (1.0, 0, 0.9, 0.0),
    "top-p near 0.3": (1.2, 0, 0.3, 0.0),
    "top-k 50 + top-p 0.8 + min-p": (1.0, 50, 0.8, 0.002),
    "plain": (1.0, 0, 1.0, 0.0),
}


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("vocab", (32000, 128256))
def test_draws_fit_the_exact_probabilities(sampling, vocab, case):
    temperature, top_k, top_p, min_p = CASES[case]
    generator = torch.Generator(device="cuda").manual_seed(vocab)
    row = torch.randn(vocab, generator=generator, device="cuda") * 3.0
    if top_p < 1.0:
        top_p = safe_top_p(row, temperature, top_k, top_p)
    if min_p > 0.0:
        min_p = safe_min_p(row, temperature, min_p)
    probs = reference_probs_row(row, temperature, top_k, top_p, min_p)
    x = row.expand(64, -1).contiguous()
    tokens = torch.cat([sampling.sample(x, temperature, top_k, top_p, min_p, seed=5, offset=i)
                        for i in range(400)])  # fmt: skip
    stat, dof, p_value = goodness_of_fit(tokens, probs)
    assert p_value > ALPHA, (stat, dof)
    assert int((probs > 0).sum()) >= 2, "the case leaves one token: nothing to tell apart"
    wrong = torch.cat([sampling.sample(x, temperature * 1.3, top_k, top_p, min_p, seed=5,
                                       offset=i) for i in range(400)])  # fmt: skip
    assert goodness_of_fit(wrong, probs)[2] < ALPHA
