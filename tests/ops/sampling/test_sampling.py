"""Sampling (ops/sampling) on the CPU interpreter: the exact filtered distribution against the
float64 reference (tiled and teaching kernels, every dtype, awkward vocabularies), greedy =
argmax exactly, tokens always inside the reference's support, a seed reproduces its tokens,
the defined answers for NaN/inf logits and the one-line refusals of bad input."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
from triton_on_cpu import DEVICE, assert_matches_reference, kernel_module, shape_id  # noqa: E402

pytest.importorskip("triton")

from kernelab.errors import KernelabError  # noqa: E402
from kernelab.spec.reference import OPS  # noqa: E402
from kernelab.spec.sampling import reference_probs_row, sampling_reference  # noqa: E402

SHAPES = [{"batch": 8, "vocab": 1000}, {"batch": 3, "vocab": 1031}]
TEACHING_SHAPES = [{"batch": 8, "vocab": 97}]


@pytest.fixture(scope="module")
def sampling():
    return kernel_module("sampling")


@pytest.fixture(scope="module")
def teaching():
    return kernel_module("sampling.teaching")


def _inputs(shape, dtype="fp32", seed=0):
    return OPS["sampling_probs"].make_inputs(shape, dtype, seed, device=DEVICE)


@pytest.mark.parametrize("dtype", ["fp32", "bf16", "fp16"])
@pytest.mark.parametrize("shape", SHAPES, ids=shape_id)
def test_probs_match_the_reference(sampling, shape, dtype):
    assert_matches_reference(sampling.sampling_probs, "sampling_probs", shape, dtype)


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("shape", TEACHING_SHAPES, ids=shape_id)
def test_teaching_probs_match_the_reference(teaching, shape, dtype):
    assert_matches_reference(teaching.sampling_probs, "sampling_probs", shape, dtype)


def test_the_torch_baseline_matches_the_reference():
    inputs = _inputs({"batch": 16, "vocab": 500}, "bf16", seed=4)
    ref = sampling_reference(*inputs)
    assert torch.allclose(OPS["sampling_probs"].torch_eager(*inputs).double(), ref, atol=1e-6)


def test_the_drawn_inputs_exercise_every_filter():
    _, t, k, p, mp = _inputs({"batch": 16, "vocab": 1000})
    assert (t == 0).any() and (t > 0).any()
    assert (k > 0).any() and (k == 0).any()
    assert (p < 1).any() and (mp > 0).any()


def test_greedy_is_the_first_argmax_exactly(sampling, teaching):
    # bf16 logits on a coarse grid: many ties, the first index must win
    x = torch.randint(-4, 5, (6, 300), device=DEVICE).to(torch.bfloat16)
    expected = torch.tensor([int(torch.nonzero(r == r.max())[0]) for r in x.float()])
    for fn in (sampling.sample, teaching.sample):
        assert torch.equal(fn(x, 0.0, seed=3).cpu(), expected)
    probs = sampling.sampling_probs(x, 0.0)
    assert torch.equal(probs.argmax(dim=1).cpu(), expected) and bool((probs.sum(1) == 1).all())


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_tokens_lie_in_the_support(sampling, teaching, dtype):
    inputs = _inputs({"batch": 8, "vocab": 97}, dtype, seed=5)
    ref = sampling_reference(*inputs)
    for fn in (sampling.sample, teaching.sample):
        for seed in range(3):
            tokens = fn(*inputs, seed=seed)
            assert tokens.dtype == torch.int64 and tokens.shape == (8,)
            assert bool((ref.gather(1, tokens[:, None].cpu()) > 0).all()), (fn, seed, tokens)


def test_a_seed_reproduces_its_tokens_and_others_differ(sampling):
    x = torch.randn(24, 257, device=DEVICE)  # nearly flat: two draws of a row rarely agree
    first = sampling.sample(x, 1.0, top_p=0.95, seed=11, offset=2)
    assert torch.equal(first, sampling.sample(x, 1.0, top_p=0.95, seed=11, offset=2))
    assert not torch.equal(first, sampling.sample(x, 1.0, top_p=0.95, seed=12, offset=2))
    assert not torch.equal(first, sampling.sample(x, 1.0, top_p=0.95, seed=11, offset=3))
    generator = torch.Generator().manual_seed(5)
    again = torch.Generator().manual_seed(5)
    assert torch.equal(sampling.sample(x, generator=generator), sampling.sample(x, generator=again))


def test_per_row_parameters_equal_the_same_scalars(sampling):
    x = torch.randn(4, 300, device=DEVICE) * 3
    rows = {"temperature": torch.full((4,), 0.7), "top_k": torch.full((4,), 40),
            "top_p": torch.full((4,), 0.8), "min_p": torch.full((4,), 0.01)}  # fmt: skip
    rows = {name: value.to(DEVICE) for name, value in rows.items()}
    scalars = {"temperature": 0.7, "top_k": 40, "top_p": 0.8, "min_p": 0.01}
    assert torch.equal(sampling.sample(x, **rows, seed=1), sampling.sample(x, **scalars, seed=1))
    torch.testing.assert_close(sampling.sampling_probs(x, **rows),
                               sampling.sampling_probs(x, **scalars))  # fmt: skip


def test_nan_and_inf_logits_have_defined_answers(sampling, teaching):
    inf, nan = float("inf"), float("nan")
    x = torch.randn(4, 40, device=DEVICE)
    x[0, 3] = nan  # row 0: a NaN is never drawn
    x[0, 5] = 100.0
    x[1, 7], x[1, 30] = inf, inf  # row 1: the +inf tokens share the draw
    x[2] = float("-inf")  # row 2: nothing drawable
    x[2, 1] = nan
    x[3, :] = nan  # row 3: nothing drawable
    for fn in (sampling.sampling_probs, teaching.sampling_probs):
        probs = fn(x, 1.0, 0, 1.0, 0.0).cpu()
        assert probs[0, 3] == 0 and probs[0, 5] > 0.99
        expected = torch.zeros(40)
        expected[[7, 30]] = 0.5
        assert torch.equal(probs[1], expected)
        assert bool(probs[2:].isnan().all())
        for r in range(2):
            assert torch.allclose(
                probs[r].double(), reference_probs_row(x[r].cpu(), 1.0, 0, 1.0, 0.0)
            )
    for fn in (sampling.sample, teaching.sample):
        tokens = fn(x, 1.0, seed=2).cpu()
        assert tokens[0] == 5 and tokens[1] in (7, 30) and tokens[2] == -1 and tokens[3] == -1
        assert fn(x, 0.0, seed=2).cpu().tolist() == [5, 7, -1, -1]


def test_an_empty_batch_returns_empty_tensors(sampling):
    x = torch.empty(0, 50, device=DEVICE)
    assert sampling.sample(x, seed=0).shape == (0,)
    assert sampling.sampling_probs(x).shape == (0, 50)


BAD = {
    "top_p 0": ({"top_p": 0.0}, "top_p"),
    "top_p 1.5": ({"top_p": 1.5}, "top_p"),
    "top_p nan": ({"top_p": float("nan")}, "top_p"),
    "top_k negative": ({"top_k": -1}, "top_k"),
    "top_k float": ({"top_k": 2.5}, "top_k"),
    "min_p 1": ({"min_p": 1.0}, "min_p"),
    "min_p negative": ({"min_p": -0.1}, "min_p"),
    "temperature negative": ({"temperature": -1.0}, "temperature"),
    "temperature nan": ({"temperature": float("nan")}, "temperature"),
    "row of top_p": ({"top_p": torch.tensor([0.5, 0.0, 1.0])}, "row 1"),
    "row of top_k": ({"top_k": torch.tensor([1, -2, 0])}, "row 1"),
    "shape of top_p": ({"top_p": torch.tensor([0.5, 0.5])}, "(3,)"),
    "float top_k": ({"top_k": torch.tensor([1.0, 2.0, 3.0])}, "integers"),
    "seed": ({"seed": -3}, "seed"),
}


@pytest.mark.parametrize("case", BAD)
def test_bad_parameters_are_refused_in_one_line(sampling, case):
    kwargs, words = BAD[case]
    kwargs = {k: v.to(DEVICE) if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()}
    x = torch.randn(3, 20, device=DEVICE)
    for fn in (sampling.sample, sampling.sampling_probs):
        if "seed" in kwargs and fn is sampling.sampling_probs:
            continue
        with pytest.raises(KernelabError) as raised:
            fn(x, **kwargs)
        message = str(raised.value)
        assert words in message and "\n" not in message


@pytest.mark.parametrize("case", ["1d", "vocab 0", "int", "fp64"])
def test_bad_logits_are_refused_in_one_line(sampling, case):
    x = {"1d": torch.randn(20), "vocab 0": torch.empty(3, 0), "int": torch.ones(2, 5, dtype=torch.int32),
         "fp64": torch.randn(2, 5, dtype=torch.float64)}[case]  # fmt: skip
    for fn in (sampling.sample, sampling.sampling_probs):
        with pytest.raises(KernelabError) as raised:
            fn(x.to(DEVICE))
        assert "\n" not in str(raised.value)


def test_a_strided_view_reads_only_its_columns(sampling):
    buffer = torch.full((4, 700), float("nan"), device=DEVICE)
    buffer[:, :650] = torch.randn(4, 650, device=DEVICE) * 3
    view, dense = buffer[:, :650], buffer[:, :650].contiguous()
    params = {"temperature": 0.9, "top_k": 30, "top_p": 0.7}
    torch.testing.assert_close(sampling.sampling_probs(view, **params),
                               sampling.sampling_probs(dense, **params))  # fmt: skip
    assert torch.equal(
        sampling.sample(view, **params, seed=4), sampling.sample(dense, **params, seed=4)
    )


def test_one_token_and_a_huge_top_k(sampling, teaching):
    x = torch.randn(3, 1, device=DEVICE)
    for fn in (sampling.sample, teaching.sample):
        assert fn(x, seed=0).tolist() == [0, 0, 0]
    assert bool((sampling.sampling_probs(x, top_p=0.5) == 1).all())
    y = torch.randn(2, 300, device=DEVICE)
    huge = torch.tensor([10**12, 3], device=DEVICE)
    probs = sampling.sampling_probs(y, top_k=huge)
    assert int((probs[0] > 0).sum()) == 300 and int((probs[1] > 0).sum()) == 3


def test_unchecked_out_of_range_rows_end_with_a_defined_answer(sampling):
    x = torch.randn(4, 300, device=DEVICE) * 3
    rows = {"temperature": torch.tensor([1.0, -1.0, 1.0, 1.0]),
            "top_p": torch.tensor([float("nan"), 0.5, 2.0, 0.5]),
            "min_p": torch.tensor([0.0, 0.0, 0.0, 3.0])}  # fmt: skip
    rows = {name: value.to(DEVICE) for name, value in rows.items()}
    tokens = sampling.sample(x, **rows, seed=1, validate=False).cpu()
    assert 0 <= int(tokens[0]) < 300 and int(tokens[2]) >= 0
    assert int(tokens[1]) == int(x[1].argmax()) and int(tokens[3]) == -1
