"""The torch references: inputs, the float64 answers, the eager baselines, shape validation."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

from kernelab.errors import KernelabError, UnknownNameError
from kernelab.spec.dense import LAYERNORM_EPS, RMSNORM_EPS
from kernelab.spec.op_spec import dtype_of, name_of
from kernelab.spec.reference import OPS, get_op

SMALL = {
    "gemm": {"m": 7, "n": 5, "k": 3},
    "vector_add": {"n": 11},
    "softmax": {"rows": 3, "cols": 13},
    "layernorm": {"rows": 3, "cols": 13},
    "rmsnorm": {"rows": 3, "cols": 13},
    "softmax_backward": {"rows": 3, "cols": 13},
    "rmsnorm_backward": {"rows": 3, "cols": 13},  # stack(dx, dweight): [4, 13]
    "reduce_sum": {"n": 13},
    "transpose": {"rows": 3, "cols": 13},
    "histogram": {"n": 300, "bins": 8},  # int32/uint8 ids: tests/ladders/histogram checks it
    # the decode ops
    "gemv": {"m": 3, "n": 5, "k": 7},
    "quant_gemv_int8": {"m": 2, "n": 5, "k": 8},
    "quant_gemv_int4": {"m": 2, "n": 5, "k": 64, "group": 32},
    "quant_gemv_int4_zp": {"m": 2, "n": 5, "k": 64, "group": 32},
    "quant_gemv_fp8": {"m": 2, "n": 5, "k": 8},
    "add_rmsnorm": {"rows": 3, "cols": 13},
    "rope": {"tokens": 3, "heads": 2, "head_dim": 8},
    "rope_interleaved": {"tokens": 3, "heads": 2, "head_dim": 8},
    "swiglu": {"rows": 3, "cols": 13},
    "gate_up_swiglu": {"m": 2, "n": 5, "k": 7},
    "decode_attention": {"batch": 2, "heads": 4, "kv_heads": 2, "tokens": 5, "head_dim": 8},
    "scan": {"n": 13},  # fp32 and int32; tests/ladders/scan checks the int32 half
    "sampling_probs": {"batch": 5, "vocab": 37},  # logits and per-row filter parameters
}
# Inputs a seed does not draw: RoPE's cos/sin tables and positions are the model's, fixed.
SEED_INDEPENDENT = {"rope": (1, 2, 3), "rope_interleaved": (1, 2, 3)}
# Sampling's per-row top_k, top_p and min_p are often "off" for two seeds alike.
SEED_INDEPENDENT["sampling_probs"] = (2, 3, 4)
# Ops whose first tensor alone has the named dtype: the quantized weights and their scales,
# RoPE's fp32 tables and int positions have their own.
FIRST_TENSOR_DTYPE = ("quant_gemv_int8", "quant_gemv_int4", "quant_gemv_int4_zp",
                      "quant_gemv_fp8", "rope", "rope_interleaved",
                      "sampling_probs")  # fmt: skip


def test_importing_the_references_and_checker_does_not_import_torch():
    code = (
        "import sys, kernelab.spec.reference, kernelab.harness.check, "
        "kernelab.harness.tolerances; print('torch' in sys.modules)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"


@pytest.mark.parametrize(
    "name, torch_dtype",
    [
        ("fp64", torch.float64),
        ("fp32", torch.float32),
        ("bf16", torch.bfloat16),
        ("fp16", torch.float16),
        ("fp8", torch.float8_e4m3fn),
        ("int8", torch.int8),
    ],
)
def test_dtype_names_round_trip(name, torch_dtype):
    assert dtype_of(name) == torch_dtype
    assert name_of(torch_dtype) == name


def test_dtype_aliases_and_tf32_storage():
    assert dtype_of("bfloat16") == torch.bfloat16
    assert dtype_of("torch.float16") == torch.float16
    assert dtype_of("tf32") == torch.float32  # tf32 is a math mode over fp32 storage
    assert name_of(torch.float32) == "fp32"


def test_unknown_dtype_suggests_a_name():
    with pytest.raises(UnknownNameError, match="did you mean.*bf16"):
        dtype_of("bf61")
    with pytest.raises(KernelabError):
        name_of(torch.complex64)


def test_unknown_op_suggests_a_name():
    with pytest.raises(UnknownNameError, match="softmax"):
        get_op("sofmax")


@pytest.mark.parametrize(
    "op, shape, words",
    [
        ("gemm", {"m": 4, "n": 4}, "needs shape keys k"),
        ("gemm", {"m": 4, "n": 4, "k": 0}, "k must be a positive integer"),
        ("gemm", {"m": -1, "n": 4, "k": 4}, "m must be a positive integer"),
        ("gemm", {"m": 2.5, "n": 4, "k": 4}, "m must be a positive integer"),
        ("gemm", {"m": True, "n": 4, "k": 4}, "m must be a positive integer"),
        ("gemm", {"m": 4, "n": 4, "k": 4, "stride": 8}, "not stride"),
        ("vector_add", {"n": 0}, "n must be a positive integer"),
        ("softmax", {"rows": 4, "cols": 8, "stride": 7}, "stride 7 is smaller than cols 8"),
        ("layernorm", {"rows": 4}, "needs shape keys cols"),
        ("rmsnorm", [4, 8], "must be a dict"),
    ],
)
def test_bad_shapes_raise_one_clear_error(op, shape, words):
    with pytest.raises(KernelabError, match=words):
        OPS[op].make_inputs(shape, "fp32", seed=0)


def test_dtype_not_defined_for_an_op():
    with pytest.raises(UnknownNameError, match="dtype for softmax"):
        OPS["softmax"].make_inputs({"rows": 2, "cols": 2}, "fp8", seed=0)


@pytest.mark.parametrize("op", sorted(OPS))
def test_inputs_are_reproducible_from_the_seed(op):
    spec = OPS[op]
    dtype = "fp32" if "fp32" in spec.dtypes else spec.dtypes[0]  # histogram: int32 ids
    first = spec.make_inputs(SMALL[op], dtype, seed=123)
    again = spec.make_inputs(SMALL[op], dtype, seed=123)
    other = spec.make_inputs(SMALL[op], dtype, seed=124)
    for index, (a, b, c) in enumerate(zip(first, again, other, strict=True)):
        if isinstance(a, torch.Tensor):  # NaN where a view's padding or a cache's slack is
            same = a.shape == b.shape and bool((a == b).logical_or(a.isnan() & b.isnan()).all())
            assert same
            assert not torch.equal(a, c) or index in SEED_INDEPENDENT.get(op, ())
        else:
            assert a == b == c  # eps


@pytest.mark.parametrize("dtype", ["fp32", "bf16", "fp16"])
@pytest.mark.parametrize("op", sorted(OPS))
def test_inputs_have_the_named_dtype_and_the_eager_output_matches_it(op, dtype):
    spec = OPS[op]
    if dtype not in spec.dtypes:
        pytest.skip(f"{op} takes {', '.join(spec.dtypes)}, no float dtype")
    inputs = spec.make_inputs(SMALL[op], dtype, seed=0)
    tensors = [x for x in inputs if isinstance(x, torch.Tensor)]
    tensors = tensors[:1] if op in FIRST_TENSOR_DTYPE else tensors
    assert all(t.dtype == dtype_of(dtype) for t in tensors)
    assert spec.torch_eager(*inputs).dtype == dtype_of(spec.out_dtype(dtype))
    assert spec.reference(*inputs).dtype == torch.float64


def test_the_same_seed_gives_the_same_data_in_every_dtype_up_to_rounding():
    fp32 = OPS["gemm"].make_inputs(SMALL["gemm"], "fp32", seed=9)[0]
    bf16 = OPS["gemm"].make_inputs(SMALL["gemm"], "bf16", seed=9)[0]
    assert torch.equal(fp32.to(torch.bfloat16), bf16)


def test_gemm_shapes_and_values():
    a, b = OPS["gemm"].make_inputs({"m": 7, "n": 5, "k": 3}, "fp32", seed=1)
    assert a.shape == (7, 3) and b.shape == (3, 5)
    ref = OPS["gemm"].reference(a, b)
    assert ref.shape == (7, 5)
    expected = [
        [sum(float(a[i, p]) * float(b[p, j]) for p in range(3)) for j in range(5)] for i in range(7)
    ]
    assert torch.allclose(ref, torch.tensor(expected, dtype=torch.float64), rtol=1e-12, atol=1e-12)


def test_fp8_gemm_inputs_are_e4m3_and_the_eager_baseline_writes_bf16():
    a, b = OPS["gemm"].make_inputs({"m": 16, "n": 16, "k": 32}, "fp8", seed=0)
    assert a.dtype == torch.float8_e4m3fn and b.dtype == torch.float8_e4m3fn
    assert OPS["gemm"].out_dtype("fp8") == "bf16"
    out = OPS["gemm"].torch_eager(a, b)
    assert out.dtype == torch.bfloat16
    # fp8 values are exact in bf16 and their products exact in fp32: only the output rounds.
    ref = OPS["gemm"].reference(a, b)
    assert float((out.double() - ref).norm() / ref.norm()) < 2.0**-8


def test_strided_rows_are_views_into_a_wider_buffer_padded_with_nan():
    for op in ("softmax", "layernorm", "rmsnorm"):
        x = OPS[op].make_inputs({"rows": 4, "cols": 13, "stride": 16}, "fp32", seed=0)[0]
        assert x.shape == (4, 13) and x.stride() == (16, 1) and not x.is_contiguous()
        buffer = torch.empty(0, dtype=x.dtype).set_(x.untyped_storage())
        padding = buffer.view(4, 16)[:, 13:]
        assert torch.isnan(padding).all()
        assert torch.isfinite(x).all()


def test_strided_inputs_hold_the_same_values_as_contiguous_ones():
    packed = OPS["softmax"].make_inputs({"rows": 4, "cols": 13}, "bf16", seed=5)[0]
    strided = OPS["softmax"].make_inputs({"rows": 4, "cols": 13, "stride": 20}, "bf16", seed=5)[0]
    assert torch.equal(packed, strided)


def test_softmax_reference_rows_sum_to_one_and_are_not_flat():
    (x,) = OPS["softmax"].make_inputs({"rows": 8, "cols": 257}, "fp32", seed=0)
    y = OPS["softmax"].reference(x)
    assert torch.allclose(y.sum(dim=-1), torch.ones(8, dtype=torch.float64), atol=1e-12)
    # Logits scaled by a few: the largest probability is far above uniform.
    assert float(y.max(dim=-1).values.min()) > 10 / 257


def test_softmax_reference_does_not_overflow_on_huge_logits():
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(4, 1000, generator=generator) * 1e4
    y = OPS["softmax"].reference(x)
    assert torch.isfinite(y).all()
    assert torch.allclose(y.sum(dim=-1), torch.ones(4, dtype=torch.float64), atol=1e-12)
    assert torch.equal(y.argmax(dim=-1), x.argmax(dim=-1))


def test_softmax_of_an_all_minus_inf_row_is_nan_and_masked_entries_are_zero():
    x = torch.randn(3, 6)
    x[1] = float("-inf")
    x[2, :3] = float("-inf")
    y = OPS["softmax"].reference(x)
    assert torch.isnan(y[1]).all()
    assert torch.isfinite(y[[0, 2]]).all()
    assert (y[2, :3] == 0).all()
    assert torch.equal(torch.isnan(OPS["softmax"].torch_eager(x)), torch.isnan(y))


def test_layernorm_reference_matches_torch_in_float64_and_normalises():
    x, weight, bias, eps = OPS["layernorm"].make_inputs({"rows": 5, "cols": 127}, "fp32", seed=0)
    assert eps == LAYERNORM_EPS
    y = OPS["layernorm"].reference(x, weight, bias, eps)
    expected = F.layer_norm(x.double(), (127,), weight.double(), bias.double(), eps)
    assert torch.allclose(y, expected, rtol=1e-12, atol=1e-12)
    # With unit weight and zero bias each row has mean 0 and biased variance ~1.
    plain = OPS["layernorm"].reference(x, torch.ones(127), torch.zeros(127), eps)
    assert torch.allclose(plain.mean(dim=-1), torch.zeros(5, dtype=torch.float64), atol=1e-12)
    assert torch.allclose(
        plain.var(dim=-1, unbiased=False), torch.ones(5, dtype=torch.float64), atol=1e-4
    )


def test_norm_inputs_carry_an_offset_so_mean_subtraction_matters():
    x = OPS["layernorm"].make_inputs({"rows": 64, "cols": 256}, "fp32", seed=0)[0]
    assert float(x.mean()) > 0.5


def test_rmsnorm_reference_has_unit_mean_square_with_unit_weight():
    x, weight, eps = OPS["rmsnorm"].make_inputs({"rows": 5, "cols": 127}, "fp32", seed=0)
    assert eps == RMSNORM_EPS
    y = OPS["rmsnorm"].reference(x, torch.ones(127), eps)
    assert torch.allclose((y * y).mean(dim=-1), torch.ones(5, dtype=torch.float64), atol=1e-5)
    scaled = OPS["rmsnorm"].reference(x, weight, eps)
    assert torch.allclose(scaled, y * weight.double(), rtol=1e-12, atol=1e-12)


def test_vector_add_reference():
    x, y = OPS["vector_add"].make_inputs({"n": 1}, "fp16", seed=0)
    assert x.shape == (1,)
    assert float(OPS["vector_add"].reference(x, y)) == float(x) + float(y)


def test_costs_come_from_the_cost_model():
    cost = OPS["gemm"].cost({"m": 4, "n": 8, "k": 16}, "bf16")
    assert cost.flops == 2 * 4 * 8 * 16
    assert OPS["softmax"].cost({"rows": 2, "cols": 8, "stride": 16}, "fp32").op == "softmax"
    with pytest.raises(KernelabError):
        OPS["gemm"].cost({"m": 0, "n": 8, "k": 16}, "bf16")


# ---- the decode ops ---------------------------------------------------------------------------


def test_gemv_reference_is_x_times_w_transposed():
    x, w = OPS["gemv"].make_inputs({"m": 2, "n": 3, "k": 4}, "fp32", seed=1)
    assert x.shape == (2, 4) and w.shape == (3, 4)
    expected = [[sum(float(x[i, p]) * float(w[j, p]) for p in range(4)) for j in range(3)]
                for i in range(2)]  # fmt: skip
    assert torch.allclose(OPS["gemv"].reference(x, w), torch.tensor(expected, dtype=torch.float64))


def test_quantized_references_use_the_dequantized_weights():
    from kernelab.spec.decode import dequantize_int4

    x, packed, scales, zeros, group = OPS["quant_gemv_int4_zp"].make_inputs(
        {"m": 2, "n": 3, "k": 64, "group": 32}, "bf16", seed=0
    )
    w = dequantize_int4(packed, scales, zeros, group)
    expected = x.double() @ w.t()
    assert torch.equal(OPS["quant_gemv_int4_zp"].reference(x, packed, scales, zeros, group),
                       expected)  # fmt: skip
    with pytest.raises(KernelabError, match="group"):
        OPS["quant_gemv_int4"].make_inputs({"m": 1, "n": 2, "k": 48, "group": 32}, "bf16", 0)


def test_add_rmsnorm_reference_stacks_h_and_its_norm():
    x, residual, weight, eps = OPS["add_rmsnorm"].make_inputs({"rows": 2, "cols": 9}, "fp32", 0)
    out = OPS["add_rmsnorm"].reference(x, residual, weight, eps)
    h = x.double() + residual.double()
    assert out.shape == (2, 2, 9) and torch.equal(out[0], h)
    assert torch.allclose(out[1], OPS["rmsnorm"].reference(h, weight, eps))


def test_rope_reference_rotates_each_pair_by_its_position_angle():
    x, cos, sin, positions = OPS["rope"].make_inputs({"tokens": 2, "heads": 1, "head_dim": 4},
                                                     "fp32", seed=0)  # fmt: skip
    out = OPS["rope"].reference(x, cos, sin, positions)
    p = int(positions[1])
    angle = p * 10000.0 ** (-2 / 4)  # the second frequency, i = 1
    a, b = float(x[1, 0, 1]), float(x[1, 0, 3])
    assert out[1, 0, 1].item() == pytest.approx(a * math.cos(angle) - b * math.sin(angle), rel=1e-6)
    assert out[1, 0, 3].item() == pytest.approx(a * math.sin(angle) + b * math.cos(angle), rel=1e-6)
    assert int(positions[0]) == 37  # a decode step deep into its sequence


def test_swiglu_reference():
    gate, up = OPS["swiglu"].make_inputs({"rows": 1, "cols": 3}, "fp32", seed=0)
    pairs = zip(gate[0].tolist(), up[0].tolist(), strict=True)
    expected = [g / (1 + math.exp(-g)) * u for g, u in pairs]
    assert torch.allclose(OPS["swiglu"].reference(gate, up)[0],
                          torch.tensor(expected, dtype=torch.float64))  # fmt: skip
