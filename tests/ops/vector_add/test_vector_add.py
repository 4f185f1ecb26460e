"""The vector add against the float64 reference: awkward sizes on the CPU interpreter, full
sizes and the tuner's final round on a GPU.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
from triton_on_cpu import (  # noqa: E402  (sets TRITON_INTERPRET without a GPU)
    FLOAT_DTYPES,
    assert_matches_reference,
    kernel_fixture,
)

pytest.importorskip("triton")

from kernelab.harness.check import check_implementation  # noqa: E402

vector_add = kernel_fixture("vector_add")


@pytest.mark.parametrize("n", [1, 7, 1031])
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_vector_add_awkward_sizes(vector_add, n, dtype):
    assert_matches_reference(vector_add.vector_add, "vector_add", {"n": n}, dtype)


@pytest.mark.gpu
@pytest.mark.whole_card  # 2^28 elements: 1 GiB an fp32 operand, twice that for the float64 check
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_gpu_vector_add_full_size(vector_add, dtype):
    assert_matches_reference(vector_add.vector_add, "vector_add", {"n": (1 << 28) + 3}, dtype, trials=2)


@pytest.mark.gpu
def test_gpu_vector_add_tuning_ends_in_a_final_round_and_stays_correct(vector_add, monkeypatch):
    """With tuning on (the suite runs with it off), a fresh tuner times its four configs at a
    new n, the close ones meet in the final round (launched outside any plan), the choice it
    keeps is a finalist, and every call's answer, the tuning call's first, is checked."""
    monkeypatch.setenv("KERNELAB_TRITON_AUTOTUNE", "1")
    monkeypatch.setattr(vector_add._vector_add_tuned, "cache", {})
    monkeypatch.setattr(vector_add._runtime, "TUNING_LOG", {})
    vector_add.PLANS.forget()  # a plan from an earlier test would replay without tuning
    n = (1 << 24) + 5  # 64 MiB of fp32, an n no other test tunes
    report = check_implementation(vector_add.vector_add, "vector_add", {"n": n}, "fp32", trials=3)
    assert report.ok, report.message
    [(key, ranking)] = vector_add._runtime.TUNING_LOG.items()
    assert key[0] == "triton.vector_add" and key[1][0] == n
    tuner = vector_add._vector_add_tuned
    [choice] = [vector_add._runtime.config_as_dict(c) for k, c in tuner.cache.items() if k[0] == n]
    first_pass = {str(entry["config"]): entry["ms"] for entry in ranking if "ms" in entry}
    assert len(first_pass) == len(vector_add.CONFIGS)
    best_ms = min(first_pass.values())
    assert first_pass[str(choice)] <= best_ms * (1 + vector_add._runtime.FINAL_ROUND_MARGIN)

