"""The CuTe-DSL Hopper GEMM's plan: tiles that split into wgmma, a ring of stages that fits
shared memory, the persistent grid; and the launcher's one-line answers."""

from __future__ import annotations

import pytest

from kernelab.errors import KernelabError
from kernelab.hardware.catalog import get_gpu
from kernelab.ladders.hgemm import cute_dsl


@pytest.mark.parametrize("gpu", ["h100-sxm", "h200"])
def test_default_plan_fits_shared_memory(gpu):
    plan = cute_dsl.gemm_plan(gpu)
    budget = get_gpu(gpu).smem_per_block_kib * 1024
    assert plan.smem_bytes <= budget
    # one more stage would not fit: the ring is as deep as the card allows (up to 4)
    deeper = cute_dsl.GemmPlan(**{**plan.__dict__, "stages": plan.stages + 1})
    assert plan.stages == 4 or deeper.smem_bytes > budget
    assert plan.stage_bytes == (128 * 64 + 256 * 64) * 2  # 48 KiB: A 16 KiB + B 32 KiB


def test_tile_splits_into_wgmma_and_fits_registers():
    plan = cute_dsl.gemm_plan()
    assert plan.wgmma_per_stage == 4  # BK 64 / k16
    assert plan.threads == 384  # two consumer warpgroups and a producer
    assert plan.accumulators_per_thread == 128  # 64 x 256 fp32 over 128 threads
    # the consumers' setmaxnreg 232 holds 128 accumulators with room for addresses
    regs = get_gpu("h100-sxm").registers_per_sm
    assert 2 * 128 * 232 + 128 * 40 <= regs


def test_a_deeper_ring_is_cut_to_what_fits():
    plan = cute_dsl.gemm_plan("h100-sxm", stages=8)
    assert plan.stages == cute_dsl.max_stages(plan) < 8


@pytest.mark.parametrize(
    "overrides", [{"bm": 96}, {"bk": 32}, {"bn": 264}, {"bm": 64, "consumers": 2}]
)
def test_tiles_wgmma_cannot_cover_are_refused(overrides):
    with pytest.raises(KernelabError, match="cute gemm"):
        cute_dsl.gemm_plan(**overrides)


@pytest.mark.parametrize("size, sms", [(4096, 132), (8192, 132), (4096, 114), (200, 132)])
def test_persistent_grid(size, sms):
    plan = cute_dsl.gemm_plan()
    tiles = plan.tiles(size, size)
    grid = plan.grid(size, size, sms)
    assert grid % (plan.cluster_m * plan.cluster_n) == 0
    assert grid <= max(sms, 2) and grid <= max(tiles + 1, 2)
    if tiles >= sms:
        assert grid >= sms - 1  # every SM busy but the cluster remainder


def test_not_registered_until_the_kernel_exists():
    from kernelab.spec import registry

    with pytest.raises(KernelabError):
        registry.get("cute.gemm")
