"""The GPU catalog: every number sourced, dense rates only, and the figures to know cold."""

from __future__ import annotations

import dataclasses
import math

import pytest

from kernelab.errors import UnknownNameError
from kernelab.hardware import DTYPES, get_gpu
from kernelab.hardware.catalog import CATALOG, SOURCES, source_document
from kernelab.hardware.hierarchy import memory_hierarchy, shared_memory_bandwidth_gbps

REQUIRED_IDS = ("a100-sxm", "h100-sxm", "h100-pcie", "h200", "b200", "l4", "rtx-4090", "mi300x")
NUMERIC_FIELDS = [
    f.name
    for f in dataclasses.fields(CATALOG["h100-sxm"])
    if f.type in ("int", "float") and f.name != "l2_bandwidth_gbps"
]
SPECS = list(CATALOG.values())
NVIDIA = [s for s in SPECS if s.vendor == "nvidia"]


def test_required_ids_and_an_apple_chip_are_present():
    for gpu_id in REQUIRED_IDS:
        assert gpu_id in CATALOG
    assert any(spec.vendor == "apple" and spec.id.startswith("m") for spec in SPECS)


def test_ids_are_lower_case_with_dashes_and_match_their_keys():
    for key, spec in CATALOG.items():
        assert key == spec.id
        assert spec.id == spec.id.lower() and " " not in spec.id and "_" not in spec.id


def test_the_numeric_fields_under_test_are_the_real_ones():
    # Guards the source test below against silently checking nothing.
    assert {"sm_count", "memory_bandwidth_gbps", "registers_per_sm", "tdp_w"} <= set(NUMERIC_FIELDS)


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.id)
def test_every_number_has_a_source_naming_a_known_document(spec):
    keys = list(NUMERIC_FIELDS)
    keys += [f"peak_tflops.{dtype}" for dtype in spec.peak_tflops]
    keys += [f"extra.{name}" for name in spec.extra]
    if spec.l2_bandwidth_gbps is not None:
        keys.append("l2_bandwidth_gbps")
    for key in keys:
        source = spec.source_of(key)
        assert source.strip(), f"{spec.id}: {key} has no source"
        document_key = source.partition(" (")[0]
        assert document_key in SOURCES, f"{spec.id}: {key} cites unknown source {document_key!r}"
        assert source_document(source).startswith(SOURCES[document_key])


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.id)
def test_numbers_are_positive_and_peaks_are_known_dtypes(spec):
    for name in NUMERIC_FIELDS:
        value = getattr(spec, name)
        if name == "tdp_w" and math.isnan(value):
            assert spec.source_of("tdp_w").startswith("unpublished")
            continue
        assert value > 0, f"{spec.id}: {name} = {value}"
    assert spec.peak_tflops and set(spec.peak_tflops) <= set(DTYPES)
    assert all(rate > 0 for rate in spec.peak_tflops.values())


def test_no_sparse_rates_ampere_and_hopper_datacenter():
    # Dense tensor-core rates keep tf32 at half of bf16 and (Hopper) fp8 at twice bf16; a
    # sparsity figure copied into one of them breaks the ratio.
    for spec in SPECS:
        if spec.architecture not in ("Ampere", "Hopper"):
            continue
        rates = spec.peak_tflops
        assert rates["tf32"] == pytest.approx(rates["bf16"] / 2, rel=0.01), spec.id
        assert rates["fp16"] == pytest.approx(rates["bf16"], rel=0.001), spec.id
        if spec.architecture == "Hopper":
            assert rates["fp8"] == pytest.approx(2 * rates["bf16"], rel=0.01), spec.id
            assert rates["int8"] == pytest.approx(rates["fp8"], rel=0.01), spec.id


def test_no_sparse_rates_elsewhere():
    b200 = CATALOG["b200"].peak_tflops
    assert b200["bf16"] == pytest.approx(2250)
    assert b200["fp8"] == pytest.approx(2 * b200["bf16"]) and b200["fp4"] == pytest.approx(
        4 * b200["bf16"]
    )
    for gpu_id in ("mi300x", "mi325x"):
        rates = CATALOG[gpu_id].peak_tflops
        assert rates["bf16"] == pytest.approx(1307.4)
        assert rates["tf32"] == pytest.approx(rates["bf16"] / 2, rel=0.01)
        assert rates["fp8"] == pytest.approx(2 * rates["bf16"], rel=0.01)
    for gpu_id in ("l4", "l40s"):
        rates = CATALOG[gpu_id].peak_tflops
        assert rates["tf32"] == pytest.approx(rates["bf16"] / 2, rel=0.02), gpu_id
        assert rates["fp8"] == pytest.approx(2 * rates["bf16"], rel=0.02), gpu_id


def test_h100_sxm_figures_to_know_cold():
    h100 = get_gpu("h100-sxm")
    assert h100.peak_tflops["bf16"] == 989.4
    assert h100.memory_bandwidth_gbps == 3350
    assert h100.sm_count == 132
    assert h100.ridge("bf16") == pytest.approx(295, rel=0.01)


def test_h200_is_h100_compute_on_faster_memory():
    h200, h100 = get_gpu("h200"), get_gpu("h100-sxm")
    assert dict(h200.peak_tflops) == dict(h100.peak_tflops)
    assert h200.memory_bandwidth_gbps == 4800 and h200.memory_gb == 141
    assert h200.ridge("bf16") == pytest.approx(206, rel=0.01)


def test_mi300x_and_b200_figures():
    mi300x = get_gpu("mi300x")
    assert mi300x.memory_gb == 192 and mi300x.memory_bandwidth_gbps == 5300
    assert mi300x.warp_size == 64 and mi300x.compute_capability == "gfx942"
    assert mi300x.smem_per_sm_kib == 64
    b200 = get_gpu("b200")
    assert b200.memory_bandwidth_gbps == pytest.approx(8000, rel=0.05)


# Datasheet fp32 against SMs x FP32 lanes x 2 (an FMA is two FLOPs) x boost clock.
# GA100 has 64 FP32 lanes per SM; every later NVIDIA SM (and an Apple core, and a CDNA 3 CU
# counting its dual-issue lanes) has 128.
@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.id)
def test_fp32_rate_matches_lanes_times_clock(spec):
    lanes = 64 if spec.compute_capability == "8.0" else 128
    formula_tflops = spec.sm_count * lanes * 2 * spec.boost_clock_mhz * 1e6 / 1e12
    assert spec.peak_tflops["fp32"] == pytest.approx(formula_tflops, rel=0.02)


def test_a100_fp32_is_the_64_lane_ampere_figure():
    a100 = get_gpu("a100-sxm")
    assert a100.peak_tflops["fp32"] == 19.5
    assert 108 * 64 * 2 * 1.41e9 / 1e12 == pytest.approx(19.5, rel=0.01)


@pytest.mark.parametrize(
    ("cc", "smem_sm", "smem_block", "threads", "blocks"),
    [
        ("8.0", 164, 163, 2048, 32),
        ("8.9", 100, 99, 1536, 24),
        ("9.0", 228, 227, 2048, 32),
        ("10.0", 228, 227, 2048, 32),
    ],
)
def test_per_compute_capability_limits(cc, smem_sm, smem_block, threads, blocks):
    specs = [s for s in NVIDIA if s.compute_capability == cc]
    assert specs, f"no catalog entry at cc {cc}"
    for spec in specs:
        assert (spec.smem_per_sm_kib, spec.smem_per_block_kib) == (smem_sm, smem_block), spec.id
        assert (spec.max_threads_per_sm, spec.max_blocks_per_sm) == (threads, blocks), spec.id
        assert spec.registers_per_sm == 65536 and spec.warp_size == 32


def test_device_names_are_unambiguous():
    # A shared pattern must be told apart by SM count, or the first listed would always win.
    seen: dict[str, list] = {}
    for spec in SPECS:
        for name in spec.device_names:
            seen.setdefault(name.lower(), []).append(spec)
    for name, specs in seen.items():
        sm_counts = [s.sm_count for s in specs]
        assert len(sm_counts) == len(set(sm_counts)), (
            f"{name!r} is claimed by {[s.id for s in specs]}"
        )


def test_get_gpu_is_forgiving_about_case_and_separators():
    assert get_gpu("H100_SXM") is CATALOG["h100-sxm"]
    assert get_gpu(" RTX 4090 ") is CATALOG["rtx-4090"]


def test_get_gpu_unknown_name_suggests_the_closest():
    with pytest.raises(UnknownNameError) as info:
        get_gpu("h1OO")
    message = str(info.value)
    assert "h100-sxm" in message and "\n" not in message


def test_hierarchy_h100_levels_and_rates():
    levels = memory_hierarchy(get_gpu("h100-sxm"))
    assert [level.name.split(" ")[0] for level in levels] == ["DRAM", "L2", "shared", "registers"]
    dram, l2, smem, registers = levels
    assert dram.size_bytes == 80 * 10**9 and dram.bandwidth_gbps == 3350
    assert l2.size_bytes == 50 * 2**20 and l2.bandwidth_gbps is None
    assert smem.per_unit_bytes == 228 * 1024 and smem.size_bytes == 132 * 228 * 1024
    # 128 bytes per SM per clock: 132 x 128 B x 1.98 GHz = 33.45 TB/s
    assert smem.bandwidth_gbps == pytest.approx(33454, rel=0.001)
    assert "derived" in smem.source
    assert registers.per_unit_bytes == 256 * 1024 and registers.size_bytes == 132 * 256 * 1024


def test_hierarchy_amd_shows_infinity_cache_and_no_invented_rates():
    levels = memory_hierarchy(get_gpu("mi300x"))
    names = [level.name for level in levels]
    assert names[1] == "Infinity Cache" and len(levels) == 5
    assert shared_memory_bandwidth_gbps(get_gpu("mi300x")) is None
    assert levels[3].bandwidth_gbps is None
