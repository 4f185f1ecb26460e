"""The tile lens on hand-worked tilings."""

from __future__ import annotations

import pytest

from kernelab.errors import KernelabError
from kernelab.hardware import CATALOG, get_gpu
from kernelab.lenses import tile as tile_lens
from kernelab.lenses.occupancy import LaunchDoesNotFit
from kernelab.lenses.tile import (
    TileConfig,
    analyze_tile,
    block_tile_reuse,
    estimate_registers,
    thread_tile_reuse,
)
from kernelab.spec import registry
from kernelab.spec.registry import Implementation

GPU = "h200" if "h200" in CATALOG else "h100-sxm"


@pytest.fixture
def spec():
    return get_gpu(GPU)


# The 2D block-tiling step of an SGEMM ladder: 128x128x8 tile, 8x8 per thread, 256 threads.
BLOCK_2D = TileConfig(bm=128, bn=128, bk=8, tm=8, tn=8, threads=256, registers=128)
# A warp-tiled step: 64x64 warp tiles, 8x4 thread tiles iterated 4 times, 128 threads.
WARP_TILED = TileConfig(bm=128, bn=128, bk=16, wm=64, wn=64, tm=8, tn=4, threads=128)


def test_2d_thread_tiles_beat_1d():
    assert thread_tile_reuse(8, 1) == pytest.approx(16 / 9)
    assert thread_tile_reuse(8, 8) == pytest.approx(128 / 16)


def test_block_reuse_formula():
    # 2*128*128 FLOPs per (128 + 128) fp32 elements per unit of K: 32768 / 1024 = 32.
    assert block_tile_reuse(128, 128, "fp32") == pytest.approx(32.0)
    assert block_tile_reuse(64, 64, "bf16") == pytest.approx(2 * 64 * 64 / (128 * 2))


def test_shared_memory_and_reuse_of_a_block_tile(spec):
    result = analyze_tile(BLOCK_2D, spec)
    assert result.smem_a_bytes == 128 * 8 * 4
    assert result.smem_b_bytes == 8 * 128 * 4
    assert result.smem_per_block_bytes == 8192
    assert result.outputs_per_thread == 64
    assert result.block_flops_per_global_byte == pytest.approx(32.0)
    assert result.thread_flops_per_smem_load == pytest.approx(8.0)
    assert result.thread_flops_per_smem_byte == pytest.approx(2.0)
    assert result.registers_source == "given"
    # 128 registers x 256 threads: the register file holds two such blocks.
    assert result.occupancy.blocks_per_sm == 2
    assert result.ridge == pytest.approx(spec.ridge("fp32"))
    assert result.block_bound == "compute"


def test_stages_and_padding_multiply_shared_memory(spec):
    config = TileConfig(
        bm=128,
        bn=128,
        bk=8,
        tm=8,
        tn=8,
        threads=256,
        stages=2,
        a_pad=4,
        b_pad=4,
        a_transposed=True,
    )
    result = analyze_tile(config, spec)
    assert result.smem_a_bytes == 8 * (128 + 4) * 4
    assert result.smem_b_bytes == 8 * (128 + 4) * 4
    assert result.smem_per_block_bytes == 2 * 2 * 8 * 132 * 4
    row_major = analyze_tile(
        TileConfig(bm=128, bn=128, bk=16, tm=8, tn=8, threads=256, a_pad=4), spec
    )
    assert row_major.smem_a_bytes == 128 * (16 + 4) * 4
    assert row_major.smem_b_bytes == 16 * 128 * 4


def test_warp_tile_reuse(spec):
    result = analyze_tile(WARP_TILED, spec)
    assert result.warp_flops_per_smem_element == pytest.approx(2 * 64 * 64 / 128)
    assert result.outputs_per_thread == 128


def test_register_estimate_is_marked(spec):
    config = TileConfig(bm=128, bn=128, bk=8, tm=8, tn=8, threads=256)
    assert estimate_registers(config) == 64 + 16 + tile_lens.REGISTER_OVERHEAD_ESTIMATE
    result = analyze_tile(config, spec)
    assert result.registers_source == "estimate"
    assert any("estimated" in note for note in result.notes)


def test_small_tiles_are_memory_bound_without_l2(spec):
    config = TileConfig(bm=16, bn=16, bk=16, tm=1, tn=1, threads=256, registers=32)
    result = analyze_tile(config, spec)
    assert result.block_flops_per_global_byte == pytest.approx(4.0)
    assert result.block_bound == "memory"


def test_waves_and_tail(spec):
    result = analyze_tile(BLOCK_2D, spec, m=4096, n=4096, k=4096)
    waves = result.waves
    slots = 2 * spec.sm_count
    assert waves.blocks == 32 * 32
    assert waves.slots == slots
    assert waves.waves == pytest.approx(1024 / slots)
    assert waves.full_waves == 1024 // slots
    assert waves.tail_blocks == 1024 % slots
    assert waves.tail_idle_fraction == pytest.approx((slots - 1024 % slots) / slots)
    assert waves.wave_efficiency == pytest.approx(1024 / (-(-1024 // slots) * slots))
    assert waves.tile_utilization == pytest.approx(1.0)
    assert waves.tiled_global_bytes == pytest.approx(1024 * 256 * 4096 * 4 + 4096 * 4096 * 4)
    assert waves.min_bytes == pytest.approx(3 * 4096 * 4096 * 4)


def test_exact_waves_have_no_tail(spec):
    # One block per SM slot pair, exactly two waves.
    m = 128 * spec.sm_count
    result = analyze_tile(BLOCK_2D, spec, m=m, n=128 * 4, k=64)
    assert result.waves.blocks == 4 * spec.sm_count
    assert result.waves.waves == pytest.approx(2.0)
    assert result.waves.tail_idle_fraction == 0.0
    assert result.waves.wave_efficiency == pytest.approx(1.0)


def test_awkward_shapes_waste_edge_tiles(spec):
    result = analyze_tile(BLOCK_2D, spec, m=129, n=128, k=9)
    # 2x1 tiles of 128x128 and 2 K steps of 8 computed for 129x128x9 useful.
    assert result.waves.tile_utilization == pytest.approx((129 * 128 * 9) / (256 * 128 * 16))


@pytest.mark.parametrize(
    "config",
    [
        TileConfig(bm=128, bn=128, bk=8, tm=8, tn=8, threads=100),  # not a warp multiple
        TileConfig(bm=128, bn=128, bk=8, tm=6, tn=8, threads=256),  # BM % TM
        TileConfig(bm=128, bn=128, bk=8, tm=8, tn=8, threads=512),  # too few outputs
        TileConfig(bm=0, bn=128, bk=8, tm=8, tn=8, threads=256),
        TileConfig(bm=128, bn=128, bk=8, tm=8, tn=4, threads=128, wm=64, wn=None),
        TileConfig(bm=128, bn=128, bk=8, tm=8, tn=4, threads=128, wm=32, wn=64),  # 8 tiles
    ],
)
def test_impossible_tilings_are_refused(spec, config):
    with pytest.raises(KernelabError):
        analyze_tile(config, spec)


def test_a_tile_too_big_for_shared_memory_says_so(spec):
    config = TileConfig(bm=512, bn=512, bk=64, tm=16, tn=16, threads=1024, stages=2, registers=64)
    with pytest.raises(LaunchDoesNotFit, match="shared memory"):
        analyze_tile(config, spec)


def test_partial_problem_size_is_refused(spec):
    with pytest.raises(KernelabError):
        analyze_tile(BLOCK_2D, spec, m=128)


def _fake(name, metadata):
    return Implementation(
        name=name, op="gemm", build=lambda: None, dtypes=("fp32",), metadata=metadata
    )


def test_kernel_tile_reads_registry_metadata(monkeypatch):
    meta = {"BM": 128, "BN": 128, "BK": 16, "WM": 64, "WN": 64, "TM": 8, "TN": 4}
    meta |= {"threads": 128, "stages": 2, "registers": 167}
    monkeypatch.setattr(registry, "get", lambda name: _fake(name, meta))
    config = tile_lens.kernel_tile("sgemm:10")
    assert config == TileConfig(
        bm=128, bn=128, bk=16, wm=64, wn=64, tm=8, tn=4, threads=128, stages=2, registers=167
    )


def test_kernel_without_tiles_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(registry, "get", lambda name: _fake(name, {"technique": "naive"}))
    with pytest.raises(KernelabError, match="declares no fixed tile"):
        tile_lens.kernel_tile("sgemm:1")


def test_ladder_tiles_keeps_only_fixed_tiles(monkeypatch):
    tuned = {"BM": "tuned", "BN": "tuned", "BK": "tuned", "TM": "tuned", "TN": "tuned"}
    impls = [
        _fake("sgemm:01", {"tiles": {"BM": 32, "BN": 32, "threads": 1024}}),  # no K tiling
        _fake(
            "sgemm:05", {"tiles": {"BM": 128, "BN": 128, "BK": 8, "TM": 8, "TN": 8, "threads": 256}}
        ),
        _fake("sgemm:08", {"tiles": tuned | {"threads": 256}}),
    ]
    monkeypatch.setattr(registry, "implementations", lambda op=None: impls)
    tiles = tile_lens.ladder_tiles()
    assert list(tiles) == ["sgemm:05"]
    assert tiles["sgemm:05"].threads == 256


def test_metadata_in_the_sgemm_steps_shape(spec):
    # 1D block tiling declares TM only: TN is 1. Shared-memory blocking declares neither.
    one_d = {"tiles": {"BM": 64, "BN": 64, "BK": 8, "TM": 8, "threads": 512}}
    assert tile_lens.tile_config_from_metadata(one_d) == TileConfig(
        bm=64, bn=64, bk=8, tm=8, tn=1, threads=512
    )
    blocking = {"tiles": {"BM": 32, "BN": 32, "BK": 32, "threads": 1024}}
    config = tile_lens.tile_config_from_metadata(blocking)
    assert (config.tm, config.tn) == (1, 1)
    assert analyze_tile(config, spec).outputs_per_thread == 1
    padded = {
        "tiles": {"BM": 128, "BN": 128, "BK": 8, "TM": 8, "TN": 8, "threads": 256, "A_pad": 4},
        "registers": 127,
    }
    config = tile_lens.tile_config_from_metadata(padded)
    assert (config.a_pad, config.b_pad, config.registers) == (4, 0, 127)


def _note_parts(note: str) -> tuple[int, list[int]]:
    """The total and the parts of the register note: "... at 180 (128 for ... + 20 overhead)"."""
    import re

    total = int(re.search(r"estimated at (\d+) \(", note).group(1))
    inside = note.split(" (", 1)[1].rsplit(");", 1)[0]
    return total, [int(part.split()[0]) for part in inside.split(" + ")]


@pytest.mark.parametrize("dtype, total", [("fp32", 64 + 16 + 20), ("fp64", 128 + 32 + 20)])
def test_the_register_estimate_adds_up_with_fp64_values_in_two_registers(spec, dtype, total):
    config = TileConfig(bm=128, bn=128, bk=8, tm=8, tn=8, threads=256, dtype=dtype)
    assert config.acc_dtype == dtype  # an fp64 GEMM accumulates in fp64
    assert estimate_registers(config) == total
    note = next(n for n in analyze_tile(config, spec).notes if "estimated" in n)
    stated, parts = _note_parts(note)
    assert stated == total == sum(parts)
    if dtype == "fp64":
        assert "64 fp64 accumulators (2 each)" in note and "16 fp64 fragment values" in note


def test_an_accumulator_dtype_given_is_kept():
    config = TileConfig(bm=64, bn=64, bk=8, tm=4, tn=4, threads=256, dtype="bf16", acc_dtype="fp32")
    assert config.acc_dtype == "fp32"
    assert TileConfig(bm=64, bn=64, bk=8, tm=4, tn=4, threads=256, dtype="bf16").acc_dtype == "fp32"


@pytest.mark.parametrize("gpu, part", [("m3-max", "an Apple part"), ("mi300x", "an AMD part")])
def test_a_part_the_occupancy_model_does_not_cover_is_named_with_its_article(gpu, part):
    with pytest.raises(KernelabError) as info:
        analyze_tile(BLOCK_2D, get_gpu(gpu))
    assert str(info.value).endswith(f"{gpu} is {part}")


@pytest.mark.parametrize("big", [2**53 + 1, 2**63, 10**400], ids=["2**53+1", "2**63", "10**400"])
def test_problem_and_tile_sizes_past_2_to_the_53_are_refused(spec, big):
    with pytest.raises(KernelabError, match="M must be at most 2\\*\\*53"):
        analyze_tile(BLOCK_2D, spec, m=big, n=4096, k=4096)
    with pytest.raises(KernelabError, match="BM must be at most 2\\*\\*53") as info:
        analyze_tile(TileConfig(bm=big, bn=128, bk=8, tm=8, tn=8, threads=256), spec)
    assert len(str(info.value)) < 120
    waves = analyze_tile(BLOCK_2D, spec, m=2**53, n=2**53, k=5).waves
    assert waves.m == 2**53 and waves.waves > 1e20
