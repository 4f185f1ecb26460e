"""Weight-only quantized GEMVs (ops/quant_gemv): the packing functions and their float64
dequantized references (round trips), the Triton kernels against the float64 product with
the DEQUANTIZED weights at awkward shapes (CPU interpreter), the quantization error against
the bf16 weights (a separate, stated figure), and bad input. On a GPU (marked gpu): the
decode shapes of the issue."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")
from triton_on_cpu import DEVICE, assert_matches_reference, kernel_module, shape_id  # noqa: E402

pytest.importorskip("triton")

from kernelab.errors import KernelabError  # noqa: E402
from kernelab.ops.quant_gemv import packing  # noqa: E402

SHAPES = [
    {"m": 1, "n": 1, "k": 32},
    {"m": 1, "n": 37, "k": 96},
    {"m": 3, "n": 33, "k": 128},
    {"m": 17, "n": 9, "k": 64},
]
# op -> (the function's name in ops/quant_gemv, extra shape keys)
OPS = {
    "quant_gemv_int8": ("quant_gemv_int8", {}),
    "quant_gemv_fp8": ("quant_gemv_fp8", {}),
    "quant_gemv_int4": ("quant_gemv_int4", {"group": 32}),
    "quant_gemv_int4_zp": ("quant_gemv_int4", {"group": 16}),
}


@pytest.fixture(scope="module")
def quant():
    return kernel_module("quant_gemv")


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
@pytest.mark.parametrize("shape", SHAPES, ids=shape_id)
@pytest.mark.parametrize("op", list(OPS))
def test_quantized_gemv_matches_the_dequantized_reference(quant, op, shape, dtype):
    function, extra = OPS[op]
    assert_matches_reference(getattr(quant, function), op, {**shape, **extra}, dtype)


@pytest.mark.parametrize("group", [32, 64, 128])
@pytest.mark.parametrize("op", ["quant_gemv_int4", "quant_gemv_int4_zp"])
def test_int4_at_every_group_size(quant, op, group):
    shape = {"m": 2, "n": 19, "k": 2 * group, "group": group}
    assert_matches_reference(quant.quant_gemv_int4, op, shape, "bf16")


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
@pytest.mark.parametrize("shape", SHAPES[1:3], ids=shape_id)
def test_teaching_int8_matches_the_reference(shape, dtype):
    teaching = kernel_module("quant_gemv.teaching")
    assert_matches_reference(teaching.quant_gemv_int8, "quant_gemv_int8", shape, dtype)


# ---- packing: round trips --------------------------------------------------------------------


def _weights(n=16, k=128, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(n, k, generator=generator).to(torch.bfloat16)


def test_int8_round_trip_is_within_half_a_step_and_exact_on_the_grid():
    w = _weights()
    q, scale = packing.pack_int8(w)
    assert q.dtype == torch.int8 and scale.shape == (16,)
    assert int(q.abs().max(dim=1).values.min()) == 127  # each row's absmax maps to 127
    error = (packing.dequantize_int8(q, scale) - w.double()).abs()
    # half a step, up to the fp32 rounding of w / scale near a tie (|w / scale| <= 127: 2^-24
    # relative of 127 is 2^-17 of a step)
    assert bool((error <= scale.double()[:, None] * (0.5 + 2.0**-16)).all())
    # values already on the grid come back exactly
    grid = packing.dequantize_int8(q, scale).to(torch.float32)
    again_q, again_scale = packing.pack_int8(grid)
    assert torch.equal(again_q, q)
    assert torch.allclose(packing.dequantize_int8(again_q, again_scale), grid.double())


def test_int4_nibbles_round_trip_exactly():
    nibbles = torch.randint(0, 16, (5, 64), dtype=torch.uint8)
    packed = nibbles[:, 0::2] | (nibbles[:, 1::2] << 4)
    assert packed.shape == (5, 32)
    assert torch.equal(packing.unpack_int4(packed), nibbles)


@pytest.mark.parametrize("zero_points", [False, True], ids=["symmetric", "zero-points"])
@pytest.mark.parametrize("group", [32, 64, 128])
def test_int4_round_trip_is_within_half_a_step(group, zero_points):
    w = _weights(k=256)
    packed, scales, zeros = packing.pack_int4(w, group, zero_points=zero_points)
    assert packed.dtype == torch.uint8 and packed.shape == (16, 128)
    assert scales.dtype == torch.float16 and scales.shape == (16, 256 // group)
    assert (zeros is None) != zero_points
    step = scales.double().repeat_interleave(group, dim=1)
    error = (packing.dequantize_int4(packed, scales, zeros, group) - w.double()).abs()
    # half a step, plus the fp16 rounding of the scale carried by up to 15 steps
    assert bool((error <= step * (0.5 + 15 * 2.0**-11) + 1e-12).all())
    nibbles = packing.unpack_int4(packed)
    if not zero_points:  # symmetric: -7..7 around the implicit zero 8, 8 - 8 = 0 exactly
        assert int(nibbles.min()) >= 1 and int(nibbles.max()) <= 15


def test_fp8_round_trip_is_within_e4m3_rounding():
    if not hasattr(torch, "float8_e4m3fn"):
        pytest.skip("this torch has no float8_e4m3fn")
    w = _weights()
    q, scale = packing.pack_fp8(w)
    assert q.dtype == torch.float8_e4m3fn
    assert float(q.to(torch.float32).abs().max()) == 448.0
    dequantized = packing.dequantize_fp8(q, scale)
    relative = (dequantized - w.double()).abs() / w.double().abs().clamp(min=1e-30)
    # 3 mantissa bits: 2^-4 relative for normals; subnormals (below 2^-6 * scale) absolute
    normal = w.double().abs() >= 2.0**-6 * scale.double()[:, None]
    assert bool((relative[normal] <= 2.0**-4 * (1 + 1e-6)).all())


# ---- the quantization error against bf16: the figures docs/ops/quant_gemv.md states --------


def quantization_error(fmt: str, group: int = 128, *, heavy_tails: bool = False) -> float:
    """||x Wq^T - x W^T|| / ||x W^T|| over bf16 W[1024, 4096] (unit normal, or Student-t with 3
    degrees of freedom) and x[8, 4096]."""
    generator = torch.Generator().manual_seed(0)
    w = torch.randn(1024, 4096, generator=generator)
    if heavy_tails:  # t(3) = normal / sqrt(chi^2(3) / 3)
        chi2 = (torch.randn(3, 1024, 4096, generator=generator) ** 2).sum(dim=0)
        w = w / (chi2 / 3).sqrt()
    w = w.to(torch.bfloat16)
    x = torch.randn(8, 4096, generator=generator).to(torch.bfloat16).double()
    exact = x @ w.double().t()
    if fmt == "int8":
        dequantized = packing.dequantize_int8(*packing.pack_int8(w))
    elif fmt == "fp8":
        dequantized = packing.dequantize_fp8(*packing.pack_fp8(w))
    else:
        zero_points = fmt == "int4_zp"
        packed = packing.pack_int4(w, group, zero_points=zero_points)
        dequantized = packing.dequantize_int4(*packed, group)
    return float((x @ dequantized.t() - exact).norm() / exact.norm())


def test_quantization_error_against_bf16_is_the_rounding_model_s():
    if not hasattr(torch, "float8_e4m3fn"):
        pytest.skip("this torch has no float8_e4m3fn")
    # round to nearest adds uniform noise of rms step / sqrt(12) per weight: int8's step is a
    # row's absmax / 127 (~4.2 sigma over 4096 normals): 4.2 / 127 / 3.46 = 0.0096; int4's a
    # group's absmax / 7 (~2.8 sigma over 128): 2.8 / 7 / 3.46 = 0.116; with zero points the
    # range / 15 (~5.0 sigma): 0.096; e4m3's relative step 2^-3 around a value, rms over a
    # binade ~ 2^-3 * 0.72 / sqrt(12) = 0.026
    figures = {
        "int8": quantization_error("int8"),
        "int4 g128": quantization_error("int4", 128),
        "int4 g128 zp": quantization_error("int4_zp", 128),
        "int4 g32": quantization_error("int4", 32),
        "fp8": quantization_error("fp8"),
    }
    assert 0.007 < figures["int8"] < 0.011, figures
    assert 0.10 < figures["int4 g128"] < 0.13, figures
    assert 0.085 < figures["int4 g128 zp"] < figures["int4 g128"], figures
    assert figures["int4 g32"] < figures["int4 g128"], figures  # smaller groups, smaller steps
    assert 0.02 < figures["fp8"] < 0.032, figures


def test_heavy_tails_cost_the_integer_formats_not_fp8():
    if not hasattr(torch, "float8_e4m3fn"):
        pytest.skip("this torch has no float8_e4m3fn")
    # an absmax scale stretched by outliers coarsens every integer step; e4m3's steps are
    # relative to each value, so fp8 keeps its ~2.6 %
    int8 = quantization_error("int8", heavy_tails=True)
    int4 = quantization_error("int4", 128, heavy_tails=True)
    fp8 = quantization_error("fp8", heavy_tails=True)
    assert int8 > 3 * quantization_error("int8"), int8
    assert int4 > 1.5 * quantization_error("int4", 128), int4
    assert 0.02 < fp8 < 0.032, fp8


# ---- bad input -------------------------------------------------------------------------------


def _int4_inputs(k=64, group=32, m=2):
    w = _weights(n=8, k=k)
    packed, scales, zeros = packing.pack_int4(w, group, zero_points=True)
    return torch.randn(m, k).to(torch.bfloat16).to(DEVICE), packed, scales, zeros


def _device(*tensors):
    return tuple(t.to(DEVICE) if isinstance(t, torch.Tensor) else t for t in tensors)


def test_k_not_a_multiple_of_the_group_is_refused_in_one_line(quant):
    x, packed, scales, zeros = _device(*_int4_inputs())
    with pytest.raises(KernelabError, match="not a multiple of the group size 48") as raised:
        quant.quant_gemv_int4(x, packed, scales, zeros, 48)
    assert "\n" not in str(raised.value)
    with pytest.raises(KernelabError, match="group"):
        packing.pack_int4(_weights(k=96), 64, zero_points=False)
    with pytest.raises(KernelabError, match="even positive group"):
        quant.quant_gemv_int4(x, packed, scales, zeros, 31)


@pytest.mark.parametrize(
    "case",
    ["x-k-mismatch", "scales-shape", "zeros-shape", "x-fp32", "scales-fp32", "m-65"],
)
def test_int4_bad_input_is_refused_in_one_line(quant, case):
    x, packed, scales, zeros = _device(*_int4_inputs())
    if case == "x-k-mismatch":
        x = x[:, :32]
    elif case == "scales-shape":
        scales = scales[:, :1]
    elif case == "zeros-shape":
        zeros = zeros[:4]
    elif case == "x-fp32":
        x = x.float()
    elif case == "scales-fp32":
        scales = scales.float()
    else:
        x = torch.zeros(65, 64, dtype=torch.bfloat16, device=DEVICE)
    with pytest.raises(KernelabError) as raised:
        quant.quant_gemv_int4(x, packed, scales, zeros, 32)
    assert str(raised.value).strip() and "\n" not in str(raised.value)


@pytest.mark.parametrize("function", ["quant_gemv_int8", "quant_gemv_fp8"])
@pytest.mark.parametrize("case", ["k-mismatch", "scale-length", "weights-bf16", "x-fp64"])
def test_per_channel_bad_input_is_refused_in_one_line(quant, function, case):
    if function == "quant_gemv_fp8" and not hasattr(torch, "float8_e4m3fn"):
        pytest.skip("this torch has no float8_e4m3fn")
    pack = packing.pack_int8 if function == "quant_gemv_int8" else packing.pack_fp8
    q, scale = _device(*pack(_weights(n=8, k=64)))
    x = torch.randn(2, 64, device=DEVICE).to(torch.bfloat16)
    if case == "k-mismatch":
        x = x[:, :60]
    elif case == "scale-length":
        scale = scale[:7]
    elif case == "weights-bf16":
        q = q.to(torch.bfloat16)
    else:
        x = x.double()
    for fn in [getattr(quant, function)] + (
        [kernel_module("quant_gemv.teaching").quant_gemv_int8]
        if function == "quant_gemv_int8"
        else []
    ):
        with pytest.raises(KernelabError) as raised:
            fn(x, q, scale)
        assert str(raised.value).strip() and "\n" not in str(raised.value)


def test_an_empty_batch_gives_an_empty_answer_and_nan_stays_in_its_row(quant):
    x, packed, scales, zeros = _device(*_int4_inputs(m=3))
    assert quant.quant_gemv_int4(x[:0], packed, scales, zeros, 32).shape == (0, 8)
    x[1, 5] = float("nan")
    y = quant.quant_gemv_int4(x, packed, scales, zeros, 32)
    assert y[1].isnan().all() and y[[0, 2]].isfinite().all()
    q, scale = _device(*packing.pack_int8(_weights(n=8, k=64)))
    assert quant.quant_gemv_int8(x[:0], q, scale).shape == (0, 8)


def test_every_format_is_registered(quant):
    from kernelab.spec.registry import get

    assert get("triton.quant_gemv.int8").build() is quant.quant_gemv_int8
    assert get("triton.quant_gemv.fp8").build() is quant.quant_gemv_fp8
    assert get("triton.quant_gemv.int4").build() is quant.quant_gemv_int4
    assert get("triton.quant_gemv.int4_zp").op == "quant_gemv_int4_zp"
    teaching = kernel_module("quant_gemv.teaching")
    assert get("triton.quant_gemv.int8.teaching").build() is teaching.quant_gemv_int8


def test_the_cost_counts_the_weight_bytes_of_each_format():
    from kernelab.spec.reference import OPS as SPECS

    shape = {"m": 1, "n": 4096, "k": 4096}
    bf16 = SPECS["gemv"].cost(shape, "bf16").bytes
    int8 = SPECS["quant_gemv_int8"].cost(shape, "bf16").bytes
    int4 = SPECS["quant_gemv_int4"].cost({**shape, "group": 128}, "bf16").bytes
    xy = (4096 + 4096) * 2
    assert int8 == 4096 * 4096 + 4096 * 4 + xy  # 1 byte a weight + an fp32 scale a row
    assert int4 == 4096 * 4096 / 2 + 4096 * 32 * 2 + xy  # half a byte + fp16 per group of 128
    # 2 bytes against half a byte + 2/128 of a scale: 3.88x fewer, the 3.0x target's bound
    assert bf16 / int4 == pytest.approx(2 / (0.5 + 2 / 128), rel=2e-3)
    assert bf16 == 2 * 4096 * 4096 + xy
    assert math.isclose(bf16 / int8, 2.0, rel_tol=3e-3)  # x, y and the scales: 0.15 % off 2x


# ---- on a GPU: the decode shapes -------------------------------------------------------------

GPU_WEIGHTS = [(4096, 4096), (16384, 4096), (6144, 4096), (28672, 4096), (4096, 14336)]


@pytest.mark.gpu
@pytest.mark.parametrize("m", (1, 4, 16, 64))
@pytest.mark.parametrize("n, k", GPU_WEIGHTS)
@pytest.mark.parametrize("op", list(OPS))
def test_gpu_quantized_gemv_at_the_decode_shapes(quant, op, n, k, m):
    function, _ = OPS[op]
    extra = {"group": 128} if function == "quant_gemv_int4" else {}
    assert_matches_reference(getattr(quant, function), op, {"m": m, "n": n, "k": k, **extra},
                             "bf16", trials=1)  # fmt: skip


@pytest.mark.gpu
@pytest.mark.parametrize("group", (32, 64))
def test_gpu_int4_small_groups(quant, group):
    shape = {"m": 1, "n": 4096, "k": 4096, "group": group}
    assert_matches_reference(quant.quant_gemv_int4, "quant_gemv_int4_zp", shape, "fp16")
