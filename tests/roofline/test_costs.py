"""Cost models: FLOPs and minimum bytes against counts worked out by hand."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

from kernelab.errors import KernelabError, UnknownNameError
from kernelab.roofline import costs
from kernelab.roofline.costs import (
    COST_MODELS,
    attention,
    causal_pairs,
    dtype_bytes,
    elementwise,
    gemm,
    gemv,
    layernorm,
    reduce_sum,
    reduction,
    rmsnorm,
    scan,
    softmax,
)


def test_gemm_4096_cubed_bf16():
    cost = gemm(4096, 4096, 4096, dtype="bf16")
    assert cost.flops == 2 * 4096**3
    assert cost.flops == pytest.approx(1.374e11, rel=1e-3)
    assert cost.bytes == 3 * 4096**2 * 2  # A, B read, C written, 2 bytes each
    assert cost.intensity == pytest.approx(4096 / 3)
    assert cost.shape["out_dtype"] == "bf16"


def test_gemm_rectangular_batched():
    cost = gemm(128, 256, 64, batch=8, dtype="fp16")
    assert cost.flops == 8 * 2 * 128 * 256 * 64
    assert cost.bytes == 8 * ((128 * 64 + 64 * 256) * 2 + 128 * 256 * 2)
    assert cost.shape == {"m": 128, "n": 256, "k": 64, "batch": 8, "out_dtype": "fp16"}


def test_gemm_fp8_writes_bf16_by_default_and_honours_out_dtype():
    n = 1024
    default = gemm(n, n, n, dtype="fp8")
    assert default.shape["out_dtype"] == "bf16"
    assert default.bytes == 2 * n * n * 1 + n * n * 2
    wide = gemm(n, n, n, dtype="fp8", out_dtype="fp32")
    assert wide.bytes == 2 * n * n * 1 + n * n * 4
    assert wide.flops == default.flops == 2 * n**3


def test_gemm_fp32_intensity():
    assert gemm(4096, 4096, 4096, dtype="fp32").intensity == pytest.approx(4096 / 6)


def test_gemv():
    cost = gemv(4096, 8192, dtype="fp32")
    assert cost.flops == 2 * 4096 * 8192
    assert cost.bytes == (4096 * 8192 + 8192 + 4096) * 4
    assert cost.intensity == pytest.approx(0.5, rel=1e-3)  # 2 FLOPs per 4-byte matrix element


def test_elementwise_default_is_a_vector_add():
    cost = elementwise(1000, dtype="bf16")
    assert cost.flops == 1000
    assert cost.bytes == 1000 * 3 * 2  # x, y read; z written


def test_elementwise_parameterised_copy_has_no_flops():
    cost = elementwise(1 << 20, reads=1, writes=1, flops_per_element=0, dtype="fp32")
    assert cost.flops == 0
    assert cost.bytes == 2 * 4 * (1 << 20)
    assert cost.intensity == 0


def test_elementwise_needs_some_traffic():
    with pytest.raises(KernelabError, match="reads \\+ writes"):
        elementwise(10, reads=0, writes=0, dtype="fp32")


def test_softmax():
    cost = softmax(1000, 4096, dtype="fp32")
    assert cost.flops == 5 * 1000 * 4096
    assert cost.bytes == 2 * 1000 * 4096 * 4
    assert "5 FLOPs per element" in cost.explanation


def test_layernorm_with_and_without_bias():
    rows, cols = 8, 1024
    with_bias = layernorm(rows, cols, dtype="bf16")
    assert with_bias.flops == 7 * rows * cols
    assert with_bias.bytes == (2 * rows * cols + 2 * cols) * 2
    plain = layernorm(rows, cols, dtype="bf16", bias=False)
    assert plain.flops == 6 * rows * cols
    assert plain.bytes == (2 * rows * cols + cols) * 2


def test_rmsnorm():
    cost = rmsnorm(32, 4096, dtype="fp16")
    assert cost.flops == 4 * 32 * 4096
    assert cost.bytes == (2 * 32 * 4096 + 4096) * 2


def test_reduction():
    cost = reduction(4096, 1000, dtype="fp32")
    assert cost.flops == 4096 * 1000
    assert cost.bytes == (4096 * 1000 + 4096) * 4


def test_attention_non_causal():
    b, h, s, d = 2, 16, 1024, 128
    cost = attention(b, h, s, s, d, dtype="bf16")
    assert cost.flops == 4 * b * h * s * s * d
    assert cost.bytes == b * h * 4 * s * d * 2  # Q, K, V read, O written


def test_attention_causal_square_is_exactly_half():
    b, h, s, d = 2, 16, 1024, 128
    full = attention(b, h, s, s, d, dtype="bf16")
    causal = attention(b, h, s, s, d, causal=True, dtype="bf16")
    assert causal.flops == full.flops / 2
    assert causal.bytes == full.bytes  # every key is still read once


def test_attention_cross_lengths():
    b, h, d = 1, 8, 64
    cost = attention(b, h, 128, 4096, d, dtype="fp16")
    assert cost.flops == 4 * b * h * 128 * 4096 * d
    assert cost.bytes == b * h * (2 * 128 + 2 * 4096) * d * 2
    decode = attention(b, h, 1, 4096, d, causal=True, dtype="fp16")
    assert decode.flops == 4 * b * h * (4096 - 0.5) * d  # one query sees (nearly) every key
    longer_q = attention(b, h, 4096, 1024, d, causal=True, dtype="fp16")
    assert longer_q.flops == 4 * b * h * (1024 * 1024 / 2) * d


@pytest.mark.parametrize("seq_q, seq_k", [(1, 1), (7, 7), (3, 10), (1, 64), (10, 3), (64, 1)])
def test_causal_pairs_is_the_area_under_the_bottom_right_mask(seq_q, seq_k):
    # Count the kept pairs one by one: query i sees keys j <= i + seq_k - seq_q.
    kept = sum(1 for i in range(seq_q) for j in range(seq_k) if j <= i + seq_k - seq_q)
    # The area leaves out half of the diagonal, one half-pair per query that sees any key.
    assert kept - causal_pairs(seq_q, seq_k) == pytest.approx(min(seq_q, seq_k) / 2)


def test_dtype_bytes_and_aliases():
    assert [dtype_bytes(d) for d in ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8", "int8")] == [
        8,
        4,
        4,
        2,
        2,
        1,
        1,
    ]
    assert dtype_bytes("fp4") == 0.5
    assert dtype_bytes("bfloat16") == 2 and dtype_bytes("FLOAT32") == 4
    assert gemm(4, 4, 4, dtype="bfloat16").dtype == "bf16"


def test_unknown_dtype_suggests_close_names():
    with pytest.raises(UnknownNameError, match="unknown dtype 'bf61'; did you mean") as info:
        softmax(4, 4, dtype="bf61")
    assert "\n" not in str(info.value)


SIZED_CALLS = {
    "gemm": lambda v: gemm(v, 8, 8),
    "gemv": lambda v: gemv(8, v, dtype="fp32"),
    "elementwise": lambda v: elementwise(v, dtype="fp32"),
    "softmax": lambda v: softmax(v, 8, dtype="fp32"),
    "layernorm": lambda v: layernorm(8, v, dtype="fp32"),
    "rmsnorm": lambda v: rmsnorm(v, 8, dtype="fp32"),
    "reduction": lambda v: reduction(8, v, dtype="fp32"),
    "attention": lambda v: attention(1, 1, 8, 8, v, dtype="fp32"),
}
BAD_NAME = {
    "gemm": "m",
    "gemv": "n",
    "elementwise": "n",
    "softmax": "rows",
    "layernorm": "cols",
    "rmsnorm": "rows",
    "reduction": "cols",
    "attention": "head_dim",
}


@pytest.mark.parametrize("op", sorted(SIZED_CALLS))
@pytest.mark.parametrize("bad", [0, -3, 2.5, True, "8", None])
def test_bad_sizes_raise_one_line_naming_the_argument(op, bad):
    with pytest.raises(KernelabError) as info:
        SIZED_CALLS[op](bad)
    message = str(info.value)
    assert message.startswith(f"{op}: {BAD_NAME[op]} must be")
    assert "\n" not in message


TOO_BIG = [2**53 + 1, 2**63, 10**400]


@pytest.mark.parametrize("op", sorted(SIZED_CALLS))
@pytest.mark.parametrize("big", TOO_BIG, ids=["2**53+1", "2**63", "10**400"])
def test_counts_past_2_to_the_53_are_refused_in_one_line_naming_the_argument(op, big):
    with pytest.raises(KernelabError) as info:
        SIZED_CALLS[op](big)
    message = str(info.value)
    assert message.startswith(f"{op}: {BAD_NAME[op]} must be at most 2**53")
    assert "\n" not in message and len(message) < 160  # a 401-digit count is not echoed


def test_every_count_up_to_2_to_the_53_is_taken():
    assert elementwise(2**53, dtype="fp32").flops == float(2**53)
    assert gemm(2**53, 1, 1).flops == 2.0 * 2**53


def test_integer_like_sizes_are_accepted():
    assert gemm(np.int64(16), 16, 16).flops == 2 * 16**3


def test_every_model_explains_itself_and_records_its_arguments():
    examples = {
        "gemm": gemm(64, 32, 16),
        "gemv": gemv(64, 32, dtype="bf16"),
        "elementwise": elementwise(64, dtype="bf16"),
        "softmax": softmax(64, 32, dtype="bf16"),
        "layernorm": layernorm(64, 32, dtype="bf16"),
        "rmsnorm": rmsnorm(64, 32, dtype="bf16"),
        "reduction": reduction(64, 32, dtype="bf16"),
        "attention": attention(1, 2, 64, 64, 32, dtype="bf16"),
        "reduce_sum": reduce_sum(64, dtype="bf16"),
        "scan": scan(64, dtype="int32"),
        "softmax_backward": costs.softmax_backward(64, 32, dtype="bf16"),
        "rmsnorm_backward": costs.rmsnorm_backward(64, 32, dtype="bf16"),
    }
    assert set(examples) == set(COST_MODELS)
    for op, cost in examples.items():
        assert cost.op == op
        assert cost.explanation and "\n" not in cost.explanation
        arguments = set(inspect.signature(COST_MODELS[op]).parameters) - {"dtype"}
        assert set(cost.shape) == arguments, op
        assert cost.intensity == cost.flops / cost.bytes
        assert cost.to_dict()["intensity"] == cost.intensity


def test_shape_label_leaves_defaults_out():
    assert costs.shape_label(gemm(4096, 2048, 512).shape) == "m=4096 n=2048 k=512"
    assert costs.shape_label(gemm(8, 8, 8, batch=4).shape) == "m=8 n=8 k=8 batch=4"
    label = costs.shape_label(attention(1, 8, 128, 128, 64, causal=True, dtype="bf16").shape)
    assert label.endswith("causal")
    assert "no-bias" in costs.shape_label(layernorm(4, 4, dtype="bf16", bias=False).shape)


@pytest.mark.parametrize(
    "value, text",
    [(1365.33, "1365"), (295.34, "295"), (4.62, "4.62"), (0.13891, "0.139"), (9000.0, "9000")],
)
def test_plain_number(value, text):
    assert costs.plain_number(value) == text


# ---- the decode kernels' costs, by hand ------------------------------------------------------


def test_batched_gemv_of_a_4096_square_bf16_weight():
    cost = costs.gemv_batched(1, 4096, 4096, dtype="bf16")
    assert cost.op == "gemv" and cost.shape == {"m": 1, "n": 4096, "k": 4096}
    assert cost.flops == 2 * 4096 * 4096
    assert cost.bytes == (4096 * 4096 + 4096 + 4096) * 2  # W, x, y
    assert 0.99 < cost.intensity < 1.0  # ~1 FLOP/byte at m = 1
    assert costs.gemv_batched(64, 4096, 4096, dtype="bf16").intensity == pytest.approx(
        2 * 64 * 4096**2 / ((4096**2 + 2 * 64 * 4096) * 2)
    )


def test_quantized_gemv_counts_the_packed_weights_and_their_scales():
    int4 = costs.quant_gemv(1, 4096, 4096, weight="int4", group=128, zero_points=True,
                            dtype="bf16")  # fmt: skip
    groups = 4096 * 4096 // 128
    assert int4.bytes == 4096 * 4096 / 2 + groups * (2 + 1) + (4096 + 4096) * 2
    int8 = costs.quant_gemv(2, 4096, 4096, weight="int8", dtype="fp16")
    assert int8.bytes == 4096 * 4096 + 4096 * 4 + (2 * 4096 + 2 * 4096) * 2
    assert int8.flops == 2 * 2 * 4096 * 4096
    with pytest.raises(UnknownNameError):
        costs.quant_gemv(1, 8, 8, weight="int3", dtype="bf16")
    with pytest.raises(KernelabError):
        costs.quant_gemv(1, 8, 8, weight="int4", group=0, dtype="bf16")


def test_fused_decode_ops():
    fused = costs.add_rmsnorm(2, 4096, dtype="bf16")
    assert fused.bytes == (4 * 2 * 4096 + 4096) * 2 and fused.flops == 5 * 2 * 4096
    rope = costs.rope(1, 32, 128, dtype="bf16")
    assert rope.bytes == 2 * 32 * 128 * 2 + 128 * 4 and rope.flops == 3 * 32 * 128
    swiglu = costs.swiglu(1, 14336, dtype="bf16")
    assert swiglu.bytes == 3 * 14336 * 2 and swiglu.flops == 5 * 14336
    for cost in (fused, rope, swiglu):
        assert cost.explanation and "\n" not in cost.explanation


def test_an_integer_sum_counts_no_flops_and_a_float_sum_its_adds():
    integer, floating = reduce_sum(1000, dtype="int32"), reduce_sum(1000, dtype="fp32")
    assert integer.flops == 0 and "no FLOPs" in integer.explanation
    assert floating.flops == 999
    assert integer.bytes == floating.bytes == 1000 * 4 + 4
    assert reduction(4, 8, dtype="int32").flops == 0
    assert reduction(4, 8, dtype="fp32").flops == 32


def test_a_per_channel_quantized_gemv_has_no_group():
    for weight in ("int8", "fp8"):
        cost = costs.quant_gemv(1, 64, 64, weight=weight, dtype="bf16")
        assert cost.shape["group"] is None
        assert costs.shape_label(cost.shape) == "m=1 n=64 k=64"
        with pytest.raises(KernelabError, match="one scale per output channel"):
            costs.quant_gemv(1, 64, 64, weight=weight, group=32, dtype="bf16")
    grouped = costs.quant_gemv(1, 64, 64, weight="int4", group=32, dtype="bf16")
    assert costs.shape_label(grouped.shape) == "m=1 n=64 k=64 group=32"
