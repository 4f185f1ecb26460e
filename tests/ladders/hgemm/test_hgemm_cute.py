"""The CuTe-DSL Hopper GEMM: its plan (tiles that split into wgmma, a ring of stages that
fits shared memory, the persistent grid), its registration and one-line refusal, its sm_90a
lowering read from the SASS (when the package is here), and on a Hopper GPU the kernel against
the float64 reference at the target shapes and the ladder's awkward ones."""

from __future__ import annotations

import pytest
from cute_dsl_support import has_opcode, needs_package, sass_opcodes, usable_or_skip

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


def test_registered_as_a_gemm_column():
    from kernelab.ladders.hgemm.ladder import OTHER_COLUMNS
    from kernelab.spec import registry

    impl = registry.get("cute.gemm")
    assert impl.op == "gemm" and impl.dtypes == ("bf16",)
    assert impl.metadata["language"] == "cute-dsl"
    assert "cute.gemm" in OTHER_COLUMNS


def test_build_says_why_in_one_line_when_unusable():
    from kernelab.runtime import cute_dsl as runtime
    from kernelab.spec import registry

    reason = runtime.unusable_reason()
    if reason is None:
        pytest.skip("CuTe-DSL is usable here")
    with pytest.raises(KernelabError) as raised:
        registry.get("cute.gemm").build()
    assert str(raised.value) == reason


def test_ladder_leaves_out_a_column_that_cannot_build():
    from kernelab.ladders.hgemm.ladder import other_candidates
    from kernelab.runtime import cute_dsl as runtime

    if runtime.unusable_reason() is None:
        pytest.skip("CuTe-DSL is usable here")
    said = []
    assert other_candidates(["cute.gemm"], said.append) == []
    assert len(said) == 1 and said[0].startswith("cute.gemm: not timed:")


@needs_package
@pytest.mark.parametrize("cluster_m", [1, 2])
def test_lowers_to_tma_wgmma_and_setmaxnreg_without_a_gpu(cluster_m, tmp_path):
    import cuda.bindings.driver as cuda
    import torch

    from kernelab.ladders.hgemm import cute_dsl_kernel
    from kernelab.runtime import cute_dsl as runtime

    plan = cute_dsl.gemm_plan()
    a = torch.empty(256, 128, dtype=torch.bfloat16)
    b = torch.empty(128, 512, dtype=torch.bfloat16)
    tensors, sms = cute_dsl_kernel.lower_args(plan, a, b, torch.empty(256, 512, dtype=a.dtype), 132)
    op = cute_dsl_kernel.HopperGemm(plan.bm, plan.bn, plan.bk, plan.stages, plan.consumers,
                                    cluster_m)  # fmt: skip
    path = tmp_path / "gemm.cubin"
    runtime.lower_to_cubin(op, *tensors, sms, cuda.CUstream(0), path=path)
    ops = sass_opcodes(path)
    # wgmma m64nNk16 (the reader keeps "HGMMA.64" of "HGMMA.64x256x16.F32.BF16"), one per
    # k16 step of a stage: the k-loop is not unrolled further
    assert ops["HGMMA.64"] == plan.wgmma_per_stage
    assert has_opcode(ops, "UTMALDG")  # TMA loads
    assert has_opcode(ops, "SYNCS")  # mbarrier waits and arrives
    assert has_opcode(ops, "USETMAXREG")  # the warpgroups trade registers
    assert ops["STG.E"] > 0  # whole tiles store bf16 pairs (4 bytes), not single values
    # a 2 x 1 cluster: B's half tiles are multicast, slots released to the peer's barriers,
    # and the CTAs meet at a cluster barrier before the ring starts
    assert has_opcode(ops, "UTMALDG.2D.MULTICAST") == (cluster_m > 1)
    assert has_opcode(ops, "UCGABAR_WAIT") == (cluster_m > 1)


TARGET_SIZES = [4096, 8192]
AWKWARD = [(1, 1, 1), (127, 257, 65), (65, 520, 777), (1000, 1000, 1000), (4097, 129, 4100)]


@pytest.mark.gpu
@pytest.mark.parametrize("cluster_m", [1, 2])
@pytest.mark.parametrize("m, n, k", [(s, s, s) for s in TARGET_SIZES] + AWKWARD, ids=str)
def test_gpu_matches_float64_reference(m, n, k, cluster_m):
    usable_or_skip()
    import functools

    from kernelab.harness.check import check_implementation

    fn = functools.partial(cute_dsl.gemm, cluster_m=cluster_m)
    report = check_implementation(fn, "gemm", {"m": m, "n": n, "k": k}, "bf16", trials=2,
                                  device="cuda")  # fmt: skip
    assert report.ok, report.message


def test_cluster_is_one_or_two():
    with pytest.raises(KernelabError, match="cluster_m"):
        cute_dsl.gemm(None, None, cluster_m=4)
