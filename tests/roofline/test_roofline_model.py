"""The roofline model: ridge, bound, attainable rate, floor, % of speed-of-light, the guard."""

from __future__ import annotations

import json
import math

import pytest

from kernelab.errors import KernelabError, UnknownNameError
from kernelab.hardware import get_gpu
from kernelab.roofline.costs import elementwise, gemm, gemv, softmax
from kernelab.roofline.model import (
    FASTER_THAN_LIGHT,
    Ceilings,
    ceilings_phrase,
    math_dtype,
    place,
)

H100 = Ceilings.from_spec(get_gpu("h100-sxm"))

# A toy chip with round numbers: ridge = 100 FLOP/byte for fp32, no fp8.
TOY = Ceilings("toy", {"fp32": 100e12, "bf16": 400e12}, 1e12, "test")


def h200_ceilings() -> Ceilings:
    """The H200's datasheet ceilings: the catalog's if it has them yet, else the datasheet's
    own figures (989.4 TFLOP/s dense bf16, 4.8 TB/s)."""
    try:
        return Ceilings.from_spec(get_gpu("h200"))
    except UnknownNameError:
        return Ceilings(
            "h200", {"fp32": 67e12, "tf32": 494.7e12, "bf16": 989.4e12}, 4.8e12, "datasheet"
        )


def test_ceilings_from_spec_are_the_datasheet_in_si_units():
    assert H100.gpu_id == "h100-sxm"
    assert H100.source == "datasheet"
    assert H100.peak("bf16") == pytest.approx(989.4e12)
    assert H100.bandwidth == pytest.approx(3.35e12)
    assert H100.ridge("bf16") == pytest.approx(295, rel=0.01)


def test_h200_bf16_ridge():
    # Same tensor cores as the H100, more bandwidth: the ridge moves left to ~206 FLOP/byte.
    assert h200_ceilings().ridge("bf16") == pytest.approx(989.4 / 4.8, rel=0.01)


def test_gemv_is_memory_bound_and_big_gemm_compute_bound():
    vector = place(gemv(8192, 8192, dtype="bf16"), H100)
    assert vector.bound == "memory"
    assert vector.attainable_tflops == pytest.approx(vector.intensity * 3.35e12 / 1e12)
    assert vector.floor_ms == pytest.approx(vector.bytes / 3.35e12 * 1e3)

    matmul = place(gemm(4096, 4096, 4096, dtype="bf16"), H100)
    assert matmul.bound == "compute"
    assert matmul.ridge == pytest.approx(295.3, rel=1e-3)
    assert matmul.attainable_tflops == pytest.approx(989.4)
    assert matmul.floor_ms == pytest.approx(2 * 4096**3 / 989.4e12 * 1e3)
    assert matmul.floor_ms == pytest.approx(0.139, rel=1e-2)


def test_small_gemm_is_memory_bound():
    # 64^3 bf16: intensity 64/3 = 21 FLOP/byte, far left of the 295 ridge.
    small = place(gemm(64, 64, 64, dtype="bf16"), H100)
    assert small.intensity == pytest.approx(64 / 3)
    assert small.bound == "memory"


def test_an_op_exactly_at_the_ridge_is_compute_bound():
    # 400 FLOPs per 4-byte element read: intensity 100 = TOY's fp32 ridge. Both roofs give the
    # same time there; the model calls the ridge itself compute-bound (intensity >= ridge).
    at_ridge = elementwise(1_000_000, reads=1, writes=0, flops_per_element=400, dtype="fp32")
    placement = place(at_ridge, TOY)
    assert placement.intensity == placement.ridge == 100
    assert placement.bound == "compute"
    assert placement.attainable_tflops == pytest.approx(100)
    assert placement.floor_ms == pytest.approx(at_ridge.flops / 100e12 * 1e3)
    assert placement.floor_ms == pytest.approx(at_ridge.bytes / 1e12 * 1e3)

    just_left = elementwise(1_000_000, reads=1, writes=0, flops_per_element=399, dtype="fp32")
    assert place(just_left, TOY).bound == "memory"


def test_timing_arithmetic():
    cost = gemm(4096, 4096, 4096, dtype="bf16")
    floor = place(cost, H100).floor_ms
    timed = place(cost, H100, time_ms=2 * floor)
    assert timed.sol_pct == pytest.approx(50.0)
    assert timed.achieved_tflops == pytest.approx(cost.flops / (2 * floor * 1e-3) / 1e12)
    assert timed.achieved_tflops == pytest.approx(989.4 / 2)
    assert timed.achieved_gbps == pytest.approx(cost.bytes / (2 * floor * 1e-3) / 1e9)
    assert not timed.faster_than_light and timed.warning is None


def test_memory_bound_sol_is_the_share_of_bandwidth():
    cost = softmax(65536, 4096, dtype="fp32")  # 2 GiB moved
    placement = place(cost, H100, time_ms=1.0)
    assert placement.achieved_gbps == pytest.approx(cost.bytes / 1e-3 / 1e9)
    assert placement.sol_pct == pytest.approx(100 * placement.achieved_gbps / 3350)


def test_untimed_placement_has_no_achieved_figures():
    placement = place(gemv(1024, 1024, dtype="fp32"), H100)
    assert placement.time_ms is None
    assert placement.achieved_tflops is None and placement.achieved_gbps is None
    assert placement.sol_pct is None and placement.faster_than_light is False


def test_faster_than_light_is_flagged_not_celebrated():
    cost = gemv(8192, 8192, dtype="bf16")
    floor = place(cost, H100).floor_ms
    impossible = place(cost, H100, time_ms=floor / 2)
    assert impossible.faster_than_light is True
    assert impossible.warning == FASTER_THAN_LIGHT
    assert impossible.sol_pct == pytest.approx(200)


def test_light_speed_guard_tolerates_rounding_only():
    cost = gemm(2048, 2048, 2048, dtype="bf16")
    floor = place(cost, H100).floor_ms
    assert not place(cost, H100, time_ms=floor).faster_than_light
    assert not place(cost, H100, time_ms=floor * 0.995).faster_than_light
    assert place(cost, H100, time_ms=floor * 0.985).faster_than_light


def test_fp32_uses_simt_unless_tf32_is_asked_for():
    cost = gemm(256, 256, 256, dtype="fp32")  # intensity 256/6 = 42.7 FLOP/byte
    simt = place(cost, H100)
    tensor = place(cost, H100, math_mode="tf32")
    assert simt.math_dtype == "fp32" and tensor.math_dtype == "tf32"
    assert simt.ridge == pytest.approx(67.0e12 / 3.35e12)
    assert tensor.ridge == pytest.approx(494.7e12 / 3.35e12)
    # The same op changes sides: right of the SIMT ridge, left of the tensor-core one.
    assert simt.bound == "compute" and tensor.bound == "memory"
    assert tensor.dtype == "fp32"  # the inputs stay fp32: bytes do not change
    assert tensor.bytes == simt.bytes


def test_math_modes():
    assert math_dtype("fp32") == "fp32"
    assert math_dtype("fp32", "tf32") == "tf32"
    assert math_dtype("bf16") == "bf16"
    assert math_dtype("bfloat16", "bf16") == "bf16"
    with pytest.raises(KernelabError, match="does not apply to bf16"):
        math_dtype("bf16", "tf32")
    with pytest.raises(UnknownNameError, match="unknown math mode"):
        math_dtype("fp32", "fast")


def test_a_dtype_the_chip_lacks_names_the_gpu_and_dtype():
    with pytest.raises(KernelabError, match="toy has no fp8 peak") as info:
        place(gemm(1024, 1024, 1024, dtype="fp8"), TOY)
    assert "\n" not in str(info.value)
    with pytest.raises(KernelabError, match="h100-sxm has no fp4 peak"):
        place(gemm(1024, 1024, 1024, dtype="fp4"), H100)


def test_ceilings_source_is_carried_through():
    measured = Ceilings("h200", {"bf16": 723e12}, 4.28e12, "measured 2026-11-29")
    placement = place(gemm(4096, 4096, 4096), measured)
    assert placement.ceilings_source == "measured 2026-11-29"
    assert placement.ridge == pytest.approx(723 / 4.28)


@pytest.mark.parametrize("bad", [0, -1.0, math.nan, math.inf])
def test_bad_times_are_refused(bad):
    with pytest.raises(KernelabError, match="positive number of milliseconds"):
        place(gemv(64, 64, dtype="fp32"), H100, time_ms=bad)


def test_placement_dict_is_plain_json_with_the_contract_keys():
    data = place(gemm(512, 512, 512), H100, time_ms=0.01).to_dict()
    contract = {"op", "gpu", "dtype", "flops", "bytes", "intensity", "ridge", "bound", "floor_ms"}
    timed = {"achieved_tflops", "achieved_gbps", "sol_pct", "faster_than_light", "warning"}
    assert contract | timed | {"attainable_tflops", "explanation", "shape"} <= set(data)
    assert json.loads(json.dumps(data)) == data


def test_an_op_without_flops_needs_no_compute_roof():
    from kernelab.roofline.costs import histogram, transpose

    ceilings = Ceilings.from_spec(get_gpu("h100-sxm"))
    counted = place(histogram(1 << 20, 256, dtype="int32"), ceilings, time_ms=1.0)
    assert counted.ridge is None and counted.peak_tflops is None
    assert counted.bound == "memory" and counted.attainable_tflops == 0.0
    assert counted.floor_ms == pytest.approx(counted.bytes / ceilings.bandwidth * 1e3)
    assert counted.sol_pct == pytest.approx(100 * counted.floor_ms / 1.0)
    # A float op without FLOPs keeps its dtype's ridge: the rate exists, nothing uses it.
    moved = place(transpose(64, 64, dtype="fp32"), ceilings)
    assert moved.ridge == pytest.approx(ceilings.ridge("fp32")) and moved.bound == "memory"
    assert moved.floor_ms == pytest.approx(moved.bytes / ceilings.bandwidth * 1e3)


def test_an_integer_op_with_flops_still_needs_a_rate():
    from kernelab.roofline.costs import OpCost

    ceilings = Ceilings.from_spec(get_gpu("h100-sxm"))
    with pytest.raises(KernelabError, match="no int32 peak"):
        place(OpCost("made_up", {"n": 4}, "int32", 4.0, 16.0, "4 int32 multiplies"), ceilings)


def test_a_measured_source_reads_as_a_phrase_in_the_missing_peak_error():
    measured = Ceilings("h200", {"bf16": 723e12}, 4.28e12, "measured on NVIDIA H200, 2026-11-29")
    with pytest.raises(KernelabError) as info:
        place(gemm(64, 64, 64, dtype="fp64"), measured)
    assert str(info.value) == (
        "h200 has no fp64 peak in its measured ceilings (measured on NVIDIA H200, 2026-11-29; "
        "has: bf16)"
    )
    with pytest.raises(
        KernelabError, match="h100-sxm has no fp4 peak in its datasheet ceilings \\(has: "
    ):
        place(gemm(4096, 4096, 4096, dtype="fp4"), H100)
    assert ceilings_phrase("datasheet") == "datasheet ceilings"
    assert ceilings_phrase("measured on X, 2026-11-29") == (
        "measured ceilings (measured on X, 2026-11-29)"
    )


def test_an_unlisted_float_rate_is_placed_only_when_the_fp32_rate_proves_it_memory_bound():
    geforce = Ceilings.from_spec(get_gpu("rtx-5090"))  # fp32 listed, no bf16 tensor rate
    cost = softmax(4096, 4096, dtype="bf16")
    with pytest.raises(KernelabError, match="no bf16 peak"):
        place(cost, geforce)  # by default a missing rate is refused
    placed = place(cost, geforce, unlisted_rate_by_fp32=True, time_ms=1.0)
    assert placed.ridge is None and placed.peak_tflops is None and placed.bound == "memory"
    assert placed.floor_ms == pytest.approx(cost.bytes / geforce.bandwidth * 1e3)
    assert placed.attainable_tflops == pytest.approx(cost.intensity * geforce.bandwidth / 1e12)
    # A big GEMM needs more than the fp32 rate to be memory-bound: its roof stays unknown.
    with pytest.raises(KernelabError, match="no bf16 peak"):
        place(gemm(4096, 4096, 4096), geforce, unlisted_rate_by_fp32=True)
    # fp64 math cannot run as fp32: no proof, refused.
    fp64_less = Ceilings("x", {"fp32": 100e12}, 1e12, "datasheet")
    with pytest.raises(KernelabError, match="no fp64 peak"):
        place(softmax(8, 8, dtype="fp64"), fp64_less, unlisted_rate_by_fp32=True)
