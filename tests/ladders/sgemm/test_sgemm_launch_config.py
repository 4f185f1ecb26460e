"""One launch configuration per SGEMM step: the compile table (`kernelab ladder sgemm`), the
registry's tile metadata that the tile lens (`kernelab tile`) reads and the lab's tile-lens
section all describe the tiles of tuning.reference_defines, with the same threads, shared
memory and (where ptxas is asked) registers."""

from __future__ import annotations

import math

import pytest

from kernelab.hardware import get_gpu
from kernelab.ladders.sgemm.steps import STEPS, TILE_KEYS_UPPER
from kernelab.ladders.sgemm.tuning import committed_winner, reference_defines
from kernelab.lenses.tile import analyze_tile, kernel_tile, tile_config_from_metadata
from kernelab.runtime.cuda import build as cuda_build
from kernelab.spec.registry import get

needs_nvcc = pytest.mark.skipif(cuda_build.find_nvcc() is None, reason="needs nvcc")
H200 = get_gpu("h200")


@pytest.mark.parametrize("step", STEPS, ids=lambda s: s.name)
def test_the_registry_tiles_are_the_reference_launch(step):
    defines = reference_defines(step)
    launch = step.launch(4096, 4096, 4096, defines)
    tiles = get(step.name).metadata["tiles"]
    assert tiles["threads"] == math.prod(launch.block)
    for key, value in defines.items():  # the tiles are the defines the step is built with
        assert tiles[key if key in TILE_KEYS_UPPER else key.lower()] == value
    if step.tunable:
        assert defines == (committed_winner(step, "h200") or step.default_defines)


@pytest.mark.parametrize("step", [s for s in STEPS if s.number >= 10], ids=lambda s: s.name)
def test_the_tile_lens_counts_the_dynamic_shared_memory_the_launch_asks_for(step):
    launch = step.launch(4096, 4096, 4096, reference_defines(step))
    analysis = analyze_tile(kernel_tile(step.name), H200)
    assert analysis.smem_per_block_bytes == launch.shared_bytes > 0


@needs_nvcc
def test_the_compile_table_and_the_tile_lens_agree_for_every_step():
    from kernelab.lab.compose import _tuned_tile
    from kernelab.ladders.sgemm.ladder import compile_report

    for row, step in zip(compile_report(list(STEPS)), STEPS, strict=True):
        assert row["defines"] == reference_defines(step)
        config = tile_config_from_metadata(get(step.name).metadata)
        assert get(step.name).metadata["tiles"]["threads"] == row["threads"]
        if config is None:  # steps 01-02 stage nothing in shared memory: no tile to lens
            assert row["static_smem_bytes"] + row["dynamic_smem_bytes"] == 0
            continue
        analysis = analyze_tile(config, H200)
        assert (config.bm, config.bn, config.threads) == (
            row["tiles"]["BM"],
            row["tiles"]["BN"],
            row["threads"],
        )
        smem = row["static_smem_bytes"] + row["dynamic_smem_bytes"]
        assert analysis.smem_per_block_bytes == smem, step.name
        if step.tunable:  # the lab's tile-lens section: the same tiles, ptxas's registers
            lab_config, lab_registers = _tuned_tile(step.name, "h200")
            assert (lab_config.bm, lab_config.bn, lab_config.threads) == (
                config.bm,
                config.bn,
                config.threads,
            )
            assert lab_registers == row["registers"]
