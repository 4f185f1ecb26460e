"""The correctness checker: correct kernels pass, every known-wrong kernel fails for its reason."""

from __future__ import annotations

import json
import math

import known_wrong
import numpy as np
import pytest
import torch

from kernelab.errors import KernelabError, NoGPUError, UnknownNameError
from kernelab.harness.check import (
    check_implementation,
    compare,
    copy_with_layout,
    poisoned_allocations,
    threshold,
    threshold_explanation,
)
from kernelab.harness.tolerances import tolerance
from kernelab.spec.reference import OPS


def check(fn, op, shape, dtype="fp32", **kwargs):
    kwargs.setdefault("device", "cpu")
    kwargs.setdefault("trials", 2)
    return check_implementation(fn, op, shape, dtype, **kwargs)


# The thresholds.


def test_thresholds_are_monotone_in_the_formats_precision():
    fp32, tf32, fp16 = threshold("fp32"), threshold("fp32", "tf32"), threshold("fp16")
    bf16, fp8 = threshold("bf16"), threshold("fp8")
    assert threshold("fp64") < fp32 < min(fp16, tf32) <= max(fp16, tf32) < bf16 < fp8


def test_thresholds_follow_the_documented_derivation():
    accumulation = 3 * 2.0**-24 * math.sqrt(65536 / 6)
    assert threshold("fp32") == pytest.approx(2 * 2.0**-24 + accumulation)
    assert threshold("fp32", "tf32") == pytest.approx(2 * 2.0**-11 + accumulation)
    assert threshold("tf32") == threshold("fp32", "tf32")
    assert threshold("bf16") == pytest.approx(2 * 2.0**-8 + accumulation)
    # fp8 GEMMs write bf16 and accumulate with ~14 mantissa bits.
    assert threshold("fp8") == pytest.approx(2 * 2.0**-8 + 3 * 2.0**-14 * math.sqrt(65536 / 6))
    assert threshold("fp8", out_dtype="fp8") > threshold("fp8")
    # bf16 inputs written as fp32 are held to fp32's rounding.
    assert threshold("bf16", out_dtype="fp32") == threshold("fp32")


def test_fp32_threshold_covers_a_sequential_fp32_accumulation_of_65536_terms():
    rng = np.random.default_rng(0)
    k = 65536
    a = rng.standard_normal((32, k)).astype(np.float32)
    b = rng.standard_normal((32, k)).astype(np.float32)
    # One fp32 chain per output, like a thread's FMA loop (numpy's accumulate is sequential;
    # torch.cumsum on the CPU accumulates in double and would hide the error).
    sequential = np.add.accumulate(a * b, axis=1, dtype=np.float32)[:, -1]
    exact = (a.astype(np.float64) * b.astype(np.float64)).sum(axis=1)
    error = np.linalg.norm(sequential - exact) / np.linalg.norm(exact)
    assert 1e-6 < error < threshold("fp32") / 2


def test_truncating_bf16_doubles_only_the_bf16_rounding_allowance():
    accumulation = 3 * 2.0**-24 * math.sqrt(65536 / 6)
    truncating = tolerance("bf16", bf16_truncates=True)
    assert truncating.threshold == pytest.approx(2 * 2 * 2.0**-8 + accumulation)
    assert "toward zero" in truncating.explanation and "interpreter" in truncating.explanation
    # outputs whose rounding bf16 does not set keep theirs
    assert threshold("fp32", bf16_truncates=True) == threshold("fp32")
    assert threshold("bf16", out_dtype="fp32", bf16_truncates=True) == threshold("fp32")
    assert threshold("fp16", bf16_truncates=True) == threshold("fp16")


def test_two_truncations_to_bf16_pass_only_where_truncation_is_declared():
    # softmax rounded twice toward zero, as a kernel holding its exps in bf16 computes it on
    # Triton's interpreter: within 2 x 2u, over the round-to-nearest 2u on this seed
    def truncate(t):
        bits = t.float().contiguous().view(torch.int32) & ~0xFFFF
        return bits.view(torch.float32).to(torch.bfloat16)

    def held_in_bf16(x):
        e = torch.exp(x.float() - x.float().amax(-1, keepdim=True))
        held = truncate(e).float()
        return truncate(held / e.sum(-1, keepdim=True))

    shape = {"rows": 1, "cols": 200}
    strict = check(held_in_bf16, "softmax", shape, "bf16", trials=1, seed=1602432029)
    assert not strict.ok
    lenient = check(held_in_bf16, "softmax", shape, "bf16", trials=1, seed=1602432029,
                    bf16_truncates=True)  # fmt: skip
    assert lenient.ok

    # and a wrong answer still fails with the allowance
    def wrong(x):
        return held_in_bf16(x) * 1.05

    assert not check(wrong, "softmax", shape, "bf16", trials=2, bf16_truncates=True).ok


def test_threshold_explanation_names_its_parts():
    text = threshold_explanation("bf16")
    assert "bf16" in text and "2 roundings" in text and "K=65536" in text


def test_threshold_rejects_unknown_dtypes_and_math_modes():
    with pytest.raises(UnknownNameError):
        threshold("int4")
    with pytest.raises(UnknownNameError, match="math mode"):
        threshold("fp32", "fp19")
    with pytest.raises(KernelabError, match="tf32 applies to fp32"):
        threshold("bf16", "tf32")
    assert tolerance("fp32", "ieee").math_mode == "ieee"


# Correct implementations pass at awkward shapes.

AWKWARD = [
    ("gemm", {"m": 1, "n": 1, "k": 1}),
    ("gemm", {"m": 127, "n": 257, "k": 1}),
    ("gemm", {"m": 127, "n": 257, "k": 129}),
    ("gemm", {"m": 1, "n": 300, "k": 61}),
    ("vector_add", {"n": 1}),
    ("vector_add", {"n": 100_003}),
    ("softmax", {"rows": 1, "cols": 1}),
    ("softmax", {"rows": 1, "cols": 257}),
    ("softmax", {"rows": 127, "cols": 257}),
    ("softmax", {"rows": 5, "cols": 127, "stride": 160}),
    ("layernorm", {"rows": 1, "cols": 257}),
    ("layernorm", {"rows": 127, "cols": 257}),
    ("layernorm", {"rows": 5, "cols": 127, "stride": 131}),
    ("rmsnorm", {"rows": 1, "cols": 1}),
    ("rmsnorm", {"rows": 127, "cols": 257}),
    ("rmsnorm", {"rows": 5, "cols": 127, "stride": 128}),
]


@pytest.mark.parametrize("dtype", ["fp32", "bf16", "fp16"])
@pytest.mark.parametrize("op, shape", AWKWARD, ids=lambda v: str(v))
def test_torch_eager_passes_at_awkward_shapes(op, shape, dtype):
    report = check(OPS[op].torch_eager, op, shape, dtype, seed=7)
    assert report.ok, report.message
    assert report.seeds == [7, 8]
    assert len(report.trials) == 2 and all(t.ok for t in report.trials)
    assert report.error <= report.threshold


def test_fp8_and_fp64_gemm_pass():
    shape = {"m": 33, "n": 65, "k": 129}
    assert check(OPS["gemm"].torch_eager, "gemm", shape, "fp8").ok
    assert check(OPS["gemm"].torch_eager, "gemm", shape, "fp64").ok


def test_a_tf32_gemm_fails_as_fp32_and_passes_as_tf32():
    shape = {"m": 64, "n": 64, "k": 512}
    as_fp32 = check(known_wrong.gemm_in_tf32, "gemm", shape, "fp32", seed=0)
    assert not as_fp32.ok and "exceeds the threshold" in as_fp32.message
    as_tf32 = check(known_wrong.gemm_in_tf32, "gemm", shape, "fp32", math_mode="tf32", seed=0)
    assert as_tf32.ok, as_tf32.message
    assert as_tf32.math_mode == "tf32" and as_tf32.threshold == threshold("fp32", "tf32")


# Known-wrong implementations fail, each with its own message.


@pytest.mark.parametrize("op", ["gemm", "softmax", "layernorm", "rmsnorm", "vector_add"])
def test_all_zeros_is_rejected_as_constant(op):
    shape = {"gemm": {"m": 16, "n": 8, "k": 4}, "vector_add": {"n": 64}}.get(
        op, {"rows": 4, "cols": 32}
    )
    report = check(known_wrong.zeros(op), op, shape)
    assert not report.ok
    assert "output is constant (all 0.0) but the reference is not" in report.message
    assert report.error == pytest.approx(1.0)  # the norm error of zeros


def test_a_constant_is_rejected_even_where_its_norm_error_is_small():
    report = check(known_wrong.constant("softmax", 1 / 512), "softmax", {"rows": 2, "cols": 512})
    assert not report.ok
    assert "output is constant (all 0.00195312)" in report.message


def test_a_constant_reference_accepts_a_constant_output():
    # Softmax over one column is 1 everywhere: constant, and correct.
    assert check(OPS["softmax"].torch_eager, "softmax", {"rows": 9, "cols": 1}).ok


@pytest.mark.parametrize(
    "op, shape, position",
    [
        ("gemm", {"m": 64, "n": 64, "k": 16}, 0),
        ("gemm", {"m": 64, "n": 64, "k": 16}, 777),
        ("softmax", {"rows": 300, "cols": 1000}, -1),
        ("layernorm", {"rows": 3, "cols": 17}, 20),
        ("vector_add", {"n": 4096}, 4095),
    ],
)
def test_one_unwritten_element_is_rejected(op, shape, position):
    report = check(known_wrong.skips_one_element(op, position), op, shape, "fp32")
    assert not report.ok
    assert "output has 1 NaN where the reference is finite" in report.message


def test_the_poisoned_allocator_fills_new_memory_with_nan_and_restores_torch():
    before = torch.are_deterministic_algorithms_enabled()
    with poisoned_allocations():
        assert torch.isnan(torch.empty(1000)).all()
        assert torch.isnan(torch.empty_like(torch.ones(3, 3, dtype=torch.bfloat16))).all()
        assert (torch.empty(4, dtype=torch.int32) == torch.iinfo(torch.int32).max).all()
    assert torch.are_deterministic_algorithms_enabled() == before


def test_low_precision_gemm_is_rejected_as_fp32():
    report = check(known_wrong.gemm_in_bf16, "gemm", {"m": 64, "n": 64, "k": 256}, "fp32")
    assert not report.ok
    assert 5e-4 < report.error < 1e-2  # bf16 operand rounding, ~2^-8 / sqrt(3) per product
    assert "exceeds the threshold" in report.message


def test_bf16_accumulation_is_rejected_as_bf16():
    shape = {"m": 32, "n": 32, "k": 1024}
    report = check(known_wrong.gemm_accumulating_in_input_dtype, "gemm", shape, "bf16")
    assert not report.ok
    assert report.error > 2 * threshold("bf16")  # ~2^-8 * sqrt(1024 / 6) = 5e-2 expected
    assert "exceeds the threshold" in report.message


def test_writing_into_an_input_is_rejected_though_the_answer_is_right():
    report = check(known_wrong.mutates_input("layernorm"), "layernorm", {"rows": 3, "cols": 17})
    assert not report.ok
    assert "the implementation wrote into input 0 (fp32[3, 17]): 51 of 51 elements changed" in (
        report.message
    )


def test_writing_into_the_padding_of_a_strided_input_is_rejected():
    def scribbles_on_padding(x):
        flat = torch.empty(0, dtype=x.dtype).set_(x.untyped_storage())
        flat[-1] = 0.0  # the last padding slot of the last row
        return torch.softmax(x, dim=-1)

    report = check(scribbles_on_padding, "softmax", {"rows": 3, "cols": 5, "stride": 8})
    assert not report.ok
    assert "outside its elements (its padding)" in report.message


def test_the_candidate_receives_the_strided_layout_not_a_contiguous_copy():
    seen = []

    def records_layout(x):
        seen.append(x.stride())
        return torch.softmax(x, dim=-1)

    assert check(records_layout, "softmax", {"rows": 3, "cols": 5, "stride": 8}).ok
    assert seen == [(8, 1), (8, 1)]


def test_ignoring_the_row_stride_reads_nan_padding_and_is_rejected():
    report = check(known_wrong.ignores_row_stride, "softmax", {"rows": 4, "cols": 16, "stride": 20})
    assert not report.ok
    assert "NaN where the reference is finite" in report.message


def test_a_nan_in_the_output_is_rejected():
    report = check(known_wrong.writes_nan("vector_add", 5), "vector_add", {"n": 100})
    assert not report.ok
    assert "output has 1 NaN where the reference is finite" in report.message
    assert "[5] got nan expected" in report.message


def test_an_inf_in_the_output_is_rejected():
    report = check(known_wrong.writes_inf("rmsnorm", 18), "rmsnorm", {"rows": 3, "cols": 17})
    assert not report.ok
    assert "output has 1 Inf where the reference is finite" in report.message
    assert "[1, 1] got inf expected" in report.message


def test_a_wrong_shape_is_rejected():
    report = check(known_wrong.wrong_shape("gemm"), "gemm", {"m": 5, "n": 4, "k": 3})
    assert not report.ok
    assert "output shape (4, 4) but the reference's is (5, 4)" in report.message


def test_a_transposed_result_is_rejected_by_shape_or_by_value():
    rectangular = check(known_wrong.gemm_transposed, "gemm", {"m": 5, "n": 4, "k": 3})
    assert not rectangular.ok and "output shape (4, 5)" in rectangular.message
    square = check(known_wrong.gemm_transposed, "gemm", {"m": 16, "n": 16, "k": 16})
    assert not square.ok and "exceeds the threshold" in square.message
    assert square.error > 0.5


def test_the_failure_message_lists_the_worst_five_elements():
    report = check(known_wrong.gemm_transposed, "gemm", {"m": 16, "n": 16, "k": 16}, seed=3)
    message = report.message
    assert message.count(" got ") == 5 and message.count(" expected ") == 5
    assert "worst elements: [" in message
    assert f"wrong on seed {report.seeds[-1]}" in message
    assert "\n" not in message


def test_a_candidate_that_raises_fails_and_does_not_raise():
    def crashes(a, b):
        raise ValueError("tile does not divide 17")

    report = check(crashes, "gemm", {"m": 17, "n": 17, "k": 17})
    assert not report.ok
    assert "the implementation raised ValueError: tile does not divide 17" in report.message


def test_a_candidate_returning_no_tensor_fails():
    report = check(lambda x, y: None, "vector_add", {"n": 8})
    assert not report.ok and "returned NoneType, not a tensor" in report.message


def test_a_failure_stops_the_trials_and_records_the_seed_that_failed():
    report = check(known_wrong.zeros("gemm"), "gemm", {"m": 4, "n": 4, "k": 4}, trials=3, seed=40)
    assert report.seeds == [40]
    assert report.trials[0].seed == 40


# compare() on its own.


def test_softmax_of_a_fully_masked_row_must_be_nan_like_the_reference():
    x = torch.randn(4, 9)
    x[2] = float("-inf")
    x[3, :4] = float("-inf")
    ref = OPS["softmax"].reference(x)
    assert compare(torch.softmax(x, dim=-1), ref, dtype="fp32").ok
    zeros_there = compare(known_wrong.softmax_zeros_masked_rows(x), ref, dtype="fp32")
    assert not zeros_there.ok
    assert "NaN/Inf pattern differs" in zeros_there.message
    assert "[2, 0] got 0.0 expected nan" in zeros_there.message


def test_huge_softmax_logits_pass_through_torch_eager():
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(8, 300, generator=generator) * 1e4
    assert compare(torch.softmax(x, dim=-1), OPS["softmax"].reference(x), dtype="fp32").ok


def test_compare_holds_an_output_to_its_own_dtypes_rounding():
    a, b = OPS["gemm"].make_inputs({"m": 32, "n": 32, "k": 64}, "bf16", seed=0)
    ref = OPS["gemm"].reference(a, b)
    in_bf16 = compare(torch.mm(a, b), ref, dtype="bf16")
    assert in_bf16.ok and in_bf16.threshold == threshold("bf16")
    # The same result rounded to bf16 but claimed as fp32 is held to fp32 and fails.
    claimed_fp32 = compare(torch.mm(a, b).float(), ref, dtype="bf16")
    assert not claimed_fp32.ok and claimed_fp32.threshold == threshold("fp32")


def test_compare_rejects_an_integer_output():
    ref = torch.ones(4, dtype=torch.float64)
    result = compare(torch.ones(4, dtype=torch.int32), ref, dtype="fp32")
    assert not result.ok and "not a floating type" in result.message


def test_compare_of_an_all_zero_reference_uses_the_absolute_error():
    ref = torch.zeros(3, dtype=torch.float64)
    assert compare(torch.zeros(3), ref, dtype="fp32").ok
    assert not compare(torch.full((3,), 1e-3), ref, dtype="fp32").ok


def test_an_fp16_output_among_the_subnormals_is_allowed_their_rounding_and_no_more():
    # 1.80308e-05 lies among fp16's subnormals (spacing 2^-24 = 6e-8): the nearest fp16 value
    # is 0.16 % away, over the relative threshold, yet it is the best an fp16 output can do.
    ref = torch.tensor([1.80308e-05], dtype=torch.float64)
    nearest_other_side = torch.tensor([1.80602e-05]).to(torch.float16)
    rounded = compare(nearest_other_side, ref, dtype="fp16")
    assert rounded.ok and rounded.error > rounded.threshold and "subnormals" in rounded.message
    # Zero, or a value several quanta off, is still wrong.
    assert not compare(torch.zeros(1, dtype=torch.float16), ref, dtype="fp16").ok
    three_off = torch.tensor([1.80308e-05 + 3 * 2**-24]).to(torch.float16)
    assert not compare(three_off, ref, dtype="fp16").ok
    # Normal-range outputs gain nothing: 0.2 % off at 1.0 fails as before.
    assert not compare(torch.tensor([1.002]).to(torch.float16),
                       torch.ones(1, dtype=torch.float64), dtype="fp16").ok  # fmt: skip


# The report and bad input.


def test_report_is_json_serialisable_with_its_seeds_and_trials():
    report = check(OPS["vector_add"].torch_eager, "vector_add", {"n": 10}, trials=3)
    data = report.to_dict()
    json.dumps(data)
    assert len(set(data["seeds"])) == 3 and all(isinstance(s, int) for s in data["seeds"])
    assert [t["seed"] for t in data["trials"]] == data["seeds"]
    failed = check(known_wrong.writes_inf("vector_add"), "vector_add", {"n": 10}).to_dict()
    assert failed["ok"] is False and failed["error"] == "inf"
    json.dumps(failed)


def test_copy_with_layout_keeps_strides_offset_and_padding():
    base = torch.arange(40.0).reshape(5, 8)
    view = base[1:, 2:7]
    copy = copy_with_layout(view)
    assert copy.stride() == view.stride() and copy.storage_offset() == view.storage_offset()
    assert torch.equal(copy, view) and copy.data_ptr() != view.data_ptr()
    assert torch.equal(torch.empty(0).set_(copy.untyped_storage()), base.reshape(-1))


def test_bad_input_to_the_checker_raises_kernelab_errors():
    eager = OPS["gemm"].torch_eager
    with pytest.raises(UnknownNameError, match="unknown op"):
        check(eager, "gemmm", {"m": 1, "n": 1, "k": 1})
    with pytest.raises(KernelabError, match="positive integer"):
        check(eager, "gemm", {"m": 0, "n": 1, "k": 1})
    with pytest.raises(KernelabError, match="trials"):
        check(eager, "gemm", {"m": 1, "n": 1, "k": 1}, trials=0)
    with pytest.raises(UnknownNameError, match="math mode"):
        check(eager, "gemm", {"m": 1, "n": 1, "k": 1}, math_mode="fast")


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_checking_on_cuda_without_a_gpu_is_a_clear_error():
    with pytest.raises(NoGPUError, match="needs a CUDA GPU"):
        check_implementation(OPS["gemm"].torch_eager, "gemm", {"m": 1, "n": 1, "k": 1}, "fp32")


# On the GPU: the same rules with the CUDA caching allocator and real kernels.

GPU_SHAPES = {
    "gemm": {"m": 1000, "n": 1536, "k": 4099},
    "vector_add": {"n": 10_000_019},
    "softmax": {"rows": 1031, "cols": 4097},
    "layernorm": {"rows": 1031, "cols": 4097, "stride": 4160},
    "rmsnorm": {"rows": 1031, "cols": 4097},
}


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["fp32", "bf16", "fp16"])
@pytest.mark.parametrize("op", sorted(GPU_SHAPES))
def test_torch_eager_passes_on_cuda(op, dtype):
    report = check_implementation(OPS[op].torch_eager, op, GPU_SHAPES[op], dtype, device="cuda")
    assert report.ok, report.message


@pytest.mark.gpu
def test_fp8_gemm_eager_passes_on_cuda():
    report = check_implementation(
        OPS["gemm"].torch_eager, "gemm", GPU_SHAPES["gemm"], "fp8", device="cuda"
    )
    assert report.ok, report.message


@pytest.mark.gpu
def test_cublas_tf32_fails_as_fp32_and_passes_as_tf32_on_cuda():
    shape = {"m": 1024, "n": 1024, "k": 1024}
    eager = OPS["gemm"].torch_eager
    previous = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = True
    try:
        as_fp32 = check_implementation(eager, "gemm", shape, "fp32", device="cuda", seed=0)
        as_tf32 = check_implementation(eager, "gemm", shape, "tf32", device="cuda", seed=0)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = previous
    assert not as_fp32.ok and "exceeds the threshold" in as_fp32.message
    assert as_tf32.ok, as_tf32.message


@pytest.mark.gpu
def test_unwritten_element_and_input_mutation_are_caught_on_cuda():
    shape = {"rows": 1031, "cols": 4097}
    skipped = check_implementation(
        known_wrong.skips_one_element("softmax", 12345), "softmax", shape, "bf16", device="cuda"
    )
    assert not skipped.ok and "1 NaN where the reference is finite" in skipped.message
    mutated = check_implementation(
        known_wrong.mutates_input("softmax"), "softmax", shape, "bf16", device="cuda"
    )
    assert not mutated.ok and "wrote into input 0" in mutated.message
